"""One backend's side of the cross-backend tests, run as `KERAS_BACKEND=X python worker.py`.

Commands (each writes NumPy arrays to an `.npz` file the test compares):
- `train WORKDIR`: load the shared initial weights, take 30 steps on the shared batches
  (dropout off), save `model-<backend>.keras` and the losses;
- `outputs WORKDIR`: load every `model-*.keras` there and record logits, greedy, beam-4
  and sampled tokens on 16 sentences, and the sampling noise;
- `data-parallel WORKDIR`: (JAX, two devices) the same steps on one device and under
  `keras.distribution.DataParallel`, and both final weights.
"""

import glob
import os
import sys

import keras
import numpy as np

import keras_transformer as kt
from keras_transformer.generation.sampling import stateless_uniform

VOCABULARY_SIZE = 40
STEPS = 30


def build():
    return kt.build_transformer("tiny", vocabulary_size=VOCABULARY_SIZE, num_layers=1,
                                dropout=0.0)


def batches(count, batch_size=16, length=8, seed=0):
    """Copy-task batches: random ids 4..V-1, their copies as targets."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        ids = rng.integers(4, VOCABULARY_SIZE, size=(batch_size, length)).astype("int32")
        source = np.concatenate([ids, np.full((batch_size, 1), kt.END_ID, "int32")], 1)
        decoder = np.concatenate([np.full((batch_size, 1), kt.START_ID, "int32"), ids], 1)
        out.append(({"encoder_token_ids": source, "decoder_token_ids": decoder}, source))
    return out


def sentences():
    return batches(1, batch_size=16, length=6, seed=1)[0][0]["encoder_token_ids"]


def initial_weights(workdir):
    path = os.path.join(workdir, "initial.npz")
    if not os.path.exists(path):
        raise SystemExit(f"{path} is missing: the test writes it first")
    stored = np.load(path)
    return [stored[f"w{i}"] for i in range(len(stored.files))]


def train_steps(model, data, optimizer=None):
    if optimizer is None:
        kt.compile_transformer(model, warmup_steps=10, label_smoothing=0.1)
    else:
        model.compile(optimizer=optimizer,
                      loss=kt.LabelSmoothedSparseCategoricalCrossentropy(label_smoothing=0.1))
    return [float(model.train_on_batch(x, y, return_dict=True)["loss"]) for x, y in data]


def command_train(workdir):
    model = build()
    model.set_weights(initial_weights(workdir))
    losses = train_steps(model, batches(STEPS))
    model.save(os.path.join(workdir, f"model-{keras.backend.backend()}.keras"))
    np.savez(os.path.join(workdir, f"losses-{keras.backend.backend()}.npz"),
             losses=np.array(losses))


def command_outputs(workdir):
    ids = sentences()
    decoder = np.concatenate([np.full((len(ids), 1), kt.START_ID, "int32"), ids[:, :-1]], 1)
    results = {"uniform": np.asarray(stateless_uniform((4, 1000), seed=11, step=3))}
    for path in sorted(glob.glob(os.path.join(workdir, "model-*.keras"))):
        saved_on = os.path.basename(path)[len("model-"):-len(".keras")]
        model = keras.models.load_model(path)
        logits = model({"encoder_token_ids": ids, "decoder_token_ids": decoder})
        results[f"{saved_on}/logits"] = keras.ops.convert_to_numpy(logits)
        for method in ("greedy", "beam"):
            out = kt.generate(model, ids, method, max_length=12)
            results[f"{saved_on}/{method}"] = out["token_ids"]
            results[f"{saved_on}/{method}_scores"] = out["scores"]
        out = kt.generate(model, ids, "sample", max_length=12, seed=5)
        results[f"{saved_on}/sample"] = out["token_ids"]
        results[f"{saved_on}/sample_log_probs"] = out["log_probs"]
    np.savez(os.path.join(workdir, f"outputs-{keras.backend.backend()}.npz"), **results)


def command_data_parallel(workdir):
    import jax

    assert len(jax.devices()) == 2, jax.devices()
    data = batches(5, batch_size=16)
    weights = {}
    for name, distribution in [
        ("one", None),
        ("two", keras.distribution.DataParallel(devices=jax.devices())),
    ]:
        if distribution is not None:
            keras.distribution.set_distribution(distribution)
        model = build()
        model.set_weights(initial_weights(workdir))
        # Plain SGD: Adam turns the rounding noise of zero gradients (the key biases)
        # into full-size steps, so only SGD compares the gradients themselves.
        train_steps(model, data, keras.optimizers.SGD(0.5))
        weights[name] = [keras.ops.convert_to_numpy(w) for w in model.weights]
        keras.distribution.set_distribution(None)
    np.savez(os.path.join(workdir, "data-parallel.npz"),
             **{f"{name}/{i}": w for name, ws in weights.items() for i, w in enumerate(ws)})


if __name__ == "__main__":
    command, workdir = sys.argv[1], sys.argv[2]
    {"train": command_train, "outputs": command_outputs,
     "data-parallel": command_data_parallel}[command](workdir)
