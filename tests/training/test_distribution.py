"""MirroredStrategy over 2 logical CPUs; MultiWorkerMirroredStrategy with 2 localhost workers."""

import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

ENV = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}

# Batches without padding: each replica then averages over the same number of tokens, so
# the mean of the replicas' means is the global mean and the losses must agree.
TRAINING = """
import keras
import numpy as np
import tensorflow as tf
import keras_transformer as kt

def fixed_dataset():
    rng = np.random.default_rng(0)
    source = rng.integers(4, 20, size=(64, 9)).astype("int32")
    inputs = {"encoder_token_ids": source,
              "decoder_token_ids": np.concatenate([np.full((64, 1), 2, "int32"),
                                                   source[:, :-1]], 1)}
    return tf.data.Dataset.from_tensor_slices((inputs, source)).batch(8)

def train(strategy, epochs=1):
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = kt.build_transformer("tiny", vocabulary_size=20, dropout=0.0)
        kt.compile_transformer(model, warmup_steps=10)
    running = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: running.append(float(logs["loss"])))
    model.fit(fixed_dataset(), epochs=epochs, callbacks=[record], verbose=0)
    # Keras logs a running mean; recover each step's loss from it.
    steps = [k * m - (k - 1) * p for k, (m, p) in enumerate(zip(running, [0.0] + running), 1)]
    return model, steps
"""


def _run(script, timeout=240, extra_env=None):
    return subprocess.run([sys.executable, "-c", script], env={**ENV, **(extra_env or {})},
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_mirrored_over_two_cpus_matches_one_device():
    script = "from keras_transformer.training import split_cpu\nsplit_cpu(2)\n" + TRAINING + (
        textwrap.dedent("""
        import json
        from keras_transformer.training import select_strategy
        mirrored = select_strategy("mirrored")
        assert mirrored.num_replicas_in_sync == 2, mirrored.num_replicas_in_sync
        _, one = train(tf.distribute.OneDeviceStrategy("/cpu:0"))
        _, two = train(mirrored)
        print(json.dumps({"one": one, "two": two}))
        """))
    result = _run(script)
    assert result.returncode == 0, result.stderr[-3000:]
    losses = json.loads(result.stdout.strip().splitlines()[-1])
    one, two = np.array(losses["one"]), np.array(losses["two"])
    assert len(one) == len(two) == 8
    np.testing.assert_array_less(np.abs(one - two) / np.abs(one), 1e-3)


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


# Rows of 3 to 9 real tokens: the two halves of each batch hold different token counts,
# so averaging the replicas' means would not give the global mean the test expects.
MULTI_WORKER = """
import json
import sys
import keras
import numpy as np
import tensorflow as tf
import keras_transformer as kt
from keras_transformer.training import fit_with_custom_loop, select_strategy

def padded_batches():
    rng = np.random.default_rng(0)
    labels = rng.integers(4, 20, size=(64, 9)).astype("int32")
    lengths = np.tile([3, 4, 3, 5, 9, 8, 9, 7], 8)
    labels[np.arange(9) >= lengths[:, None]] = 0
    decoder = np.concatenate([np.full((64, 1), 2, "int32"), labels[:, :-1]], 1)
    inputs = {"encoder_token_ids": labels, "decoder_token_ids": decoder}
    return tf.data.Dataset.from_tensor_slices((inputs, labels)).batch(8)

def build(strategy):
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = kt.build_transformer("tiny", vocabulary_size=20, dropout=0.0)
        return kt.compile_transformer(model, warmup_steps=10)

strategy = select_strategy("multi_worker")
assert strategy.num_replicas_in_sync == 2, strategy.num_replicas_in_sync
model = build(strategy)
# One step an epoch: the history holds each step's loss.
history = fit_with_custom_loop(model, padded_batches(), epochs=8, steps_per_epoch=1, verbose=0)
np.savez(sys.argv[1], *model.get_weights())
result = {"losses": history.history["loss"]}
if strategy.cluster_resolver.task_id == 0:  # Keras' own fit on one device, same batches
    reference = build(tf.distribute.OneDeviceStrategy("/cpu:0"))
    running = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: running.append(float(logs["loss"])))
    reference.fit(padded_batches(), callbacks=[record], verbose=0)
    result["one_device"] = [k * m - (k - 1) * p
                            for k, (m, p) in enumerate(zip(running, [0.0] + running), 1)]
print(json.dumps(result))
"""


def _run_two_workers(command, timeout=240):
    """Run `command(index)` as workers 0 and 1 of a localhost cluster; `(stdout, stderr)`s."""
    cluster = {"worker": [f"localhost:{port}" for port in _free_ports(2)]}
    workers = []
    try:
        for index in range(2):
            config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
            workers.append(subprocess.Popen(
                command(index), env={**ENV, "TF_CONFIG": config}, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True))
        outputs = [worker.communicate(timeout=timeout) for worker in workers]
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    for worker, (_, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err[-3000:]
    return outputs


@pytest.mark.slow
def test_two_workers_on_localhost_end_with_identical_weights(tmp_path):
    outputs = _run_two_workers(
        lambda index: [sys.executable, "-c", MULTI_WORKER, str(tmp_path / f"worker{index}.npz")])
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    first, second = (np.load(tmp_path / f"worker{i}.npz") for i in range(2))
    assert len(first.files) == len(second.files) > 0
    for name in first.files:
        np.testing.assert_array_equal(first[name], second[name])

    # The loss of each step is the token-weighted mean over the global batch of 8 rows,
    # as on one device (Keras' `fit`), not the mean of the two workers' means.
    losses, one_device = np.array(results[0]["losses"]), np.array(results[0]["one_device"])
    assert len(losses) == len(one_device) == 8
    assert results[1]["losses"] == results[0]["losses"]
    np.testing.assert_array_less(np.abs(losses - one_device) / np.abs(one_device), 1e-3)
    assert losses[-1] < losses[0]


@pytest.mark.slow
def test_cli_trains_and_resumes_with_two_workers(tiny_data_dir, tmp_path):
    model_dir = str(tmp_path / "model")

    def command(max_steps):
        return lambda index: [
            sys.executable, "-m", "keras_transformer.cli", "train", "--data", tiny_data_dir,
            "--output", model_dir, "--preset", "tiny", "--strategy", "multi_worker",
            "--tokens-per-batch", "64", "--max-sequence-length", "16", "--warmup-steps", "4",
            "--checkpoint-every", "2", "--bleu-every", "0", "--max-steps", str(max_steps)]

    for max_steps in (4, 6):  # the second run resumes both workers from the chief's backup
        outputs = _run_two_workers(command(max_steps))
        results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
        for result in results:  # each worker's own time in fit and to its first step
            assert result.pop("seconds") > 0
            assert result.pop("first_step_seconds") > 0
        assert results[0] == results[1]
        assert results[0]["step"] == max_steps
    assert sorted(os.listdir(os.path.join(model_dir, "checkpoints"))) == [
        f"ckpt-{step:08d}.weights.h5" for step in (2, 4, 6)]
    with open(os.path.join(model_dir, "history.csv"), encoding="utf-8") as file:
        assert len(file.read().splitlines()) == 1 + 3  # written once, by the chief
