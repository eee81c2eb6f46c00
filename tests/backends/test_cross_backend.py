"""The same weights on TensorFlow, JAX and PyTorch: one model file, one set of outputs.

Each backend runs in its own process (`worker.py`), as a Keras backend is chosen once
per process. Needs `jax` and `torch` installed (`make test` installs both); a missing
one is a visible skip naming it.
"""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

BACKENDS = ("tensorflow", "jax", "torch")
WORKER = os.path.join(os.path.dirname(__file__), "worker.py")
MISSING = [name for name in BACKENDS if importlib.util.find_spec(name) is None]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(MISSING), reason=f"backend package(s) not installed: {MISSING} "
                                             "(make test installs jax[cpu] and torch+cpu)"),
]


def run(backend, *args, env=None):
    environment = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3",
                   **(env or {})}
    result = subprocess.run([sys.executable, *args], env=environment, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, f"{backend}: {' '.join(args)}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """Every backend trains from the same weights, then loads every backend's model."""
    import keras

    sys.path.insert(0, os.path.dirname(__file__))
    import worker

    path = tmp_path_factory.mktemp("backends")
    keras.utils.set_random_seed(0)
    weights = [keras.ops.convert_to_numpy(w) for w in worker.build().weights]
    np.savez(path / "initial.npz", **{f"w{i}": w for i, w in enumerate(weights)})
    for backend in BACKENDS:
        run(backend, WORKER, "train", str(path))
    for backend in BACKENDS:
        run(backend, WORKER, "outputs", str(path))
    return path


def outputs(workdir, backend):
    return dict(np.load(workdir / f"outputs-{backend}.npz"))


def test_import_loads_no_tensorflow():
    check = ("import sys, keras_transformer as kt; "
             "kt.build_transformer('tiny', vocabulary_size=20, num_layers=1); "
             "loaded = [m for m in sys.modules if m.startswith('tensorflow')]; "
             "assert not loaded, loaded")
    for backend in ("jax", "torch"):
        run(backend, "-c", check)


def test_tensorflow_only_feature_without_tensorflow_names_the_fix():
    check = (
        "import sys; sys.modules['tensorflow'] = None; sys.modules['tensorflow_text'] = None\n"
        "import keras_transformer as kt\n"
        "try:\n"
        "    kt.data.make_dataset\n"
        "except kt.backend.TensorFlowRequiredError as error:\n"
        "    print(error)\n"
        "else:\n"
        "    raise SystemExit('no error')\n"
    )
    message = run("jax", "-c", check).stdout
    assert "The tf.data pipeline" in message and "pip install tensorflow" in message
    assert "NumPy batcher" in message


def test_thirty_training_steps_agree_within_one_percent(workdir):
    losses = {b: np.load(workdir / f"losses-{b}.npz")["losses"] for b in BACKENDS}
    for backend in ("jax", "torch"):
        np.testing.assert_allclose(losses[backend], losses["tensorflow"], rtol=0.01)
    assert losses["tensorflow"][-1] < losses["tensorflow"][0]  # it learned something


@pytest.mark.parametrize("saved_on", BACKENDS)
def test_a_model_saved_on_one_backend_gives_the_same_outputs_on_all(workdir, saved_on):
    results = {backend: outputs(workdir, backend) for backend in BACKENDS}
    reference = results[saved_on]
    for backend in BACKENDS:
        got = results[backend]
        np.testing.assert_allclose(got[f"{saved_on}/logits"], reference[f"{saved_on}/logits"],
                                   atol=1e-5, rtol=0)
        for method in ("greedy", "beam"):
            np.testing.assert_array_equal(got[f"{saved_on}/{method}"],
                                          reference[f"{saved_on}/{method}"])
            np.testing.assert_allclose(got[f"{saved_on}/{method}_scores"],
                                       reference[f"{saved_on}/{method}_scores"], atol=1e-4)


def test_sampling_is_valid_and_the_same_on_every_backend(workdir):
    results = {backend: outputs(workdir, backend) for backend in BACKENDS}
    for backend, got in results.items():
        uniform = got["uniform"]
        assert (uniform > 0).all() and (uniform < 1).all(), backend
        assert abs(uniform.mean() - 0.5) < 0.02 and abs(uniform.std() - 12 ** -0.5) < 0.02
        np.testing.assert_array_equal(uniform, results["tensorflow"]["uniform"])
        for saved_on in BACKENDS:
            tokens = got[f"{saved_on}/sample"]
            assert ((tokens >= 0) & (tokens < 40) & (tokens != 2)).all()  # never START
            ended = np.cumsum(tokens == 3, axis=1) > 0
            padded = np.concatenate([np.zeros_like(ended[:, :1]), ended[:, :-1]], axis=1)
            assert ((tokens == 0) == padded).all()  # PAD exactly after END
            # The same noise on (nearly) the same logits: the same draws.
            np.testing.assert_array_equal(tokens, results["tensorflow"][f"{saved_on}/sample"])
            log_probs = got[f"{saved_on}/sample_log_probs"]
            assert (log_probs <= 0).all() and np.isfinite(log_probs).all()


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_jax_data_parallel_on_two_devices_matches_one(workdir):
    run("jax", WORKER, "data-parallel", str(workdir),
        env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    stored = np.load(workdir / "data-parallel.npz")
    count = len(stored.files) // 2
    for i in range(count):
        np.testing.assert_allclose(stored[f"two/{i}"], stored[f"one/{i}"], atol=1e-5)
    changed = [not np.allclose(stored[f"one/{i}"], initial)
               for i, initial in enumerate(np.load(workdir / "initial.npz").values())]
    assert any(changed)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_train_command_trains_resumes_and_translates(backend, tiny_data_dir, tmp_path):
    model_dir = str(tmp_path / "model")

    def train(max_steps):
        args = ["train", "--data", tiny_data_dir, "--output", model_dir, "--preset", "tiny",
                "--tokens-per-batch", "256", "--max-sequence-length", "32",
                "--checkpoint-every", "3", "--bleu-every", "3", "--max-steps", str(max_steps)]
        done = run(backend, "-c", f"from keras_transformer.cli import main; main({args!r})")
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert train(3)["step"] == 3
    resumed = train(6)
    assert resumed["step"] == 6 and resumed["stopped"] == "reached 6 steps"
    assert [step for step, _ in resumed["bleu"]] == [6]  # this run's BLEU pass only
    assert {"model.keras", "config.json", "checkpoints", "backup", "history.csv"} <= set(
        os.listdir(model_dir))
    translate = ("from keras_transformer.generation import Translator; "
                 f"t = Translator.from_directory({model_dir!r}, method='beam', max_length=8); "
                 "print(repr(t.translate(['Der Hund schläft.', ''])))")
    assert run(backend, "-c", translate).stdout.strip().splitlines()[-1].endswith(", '']")
