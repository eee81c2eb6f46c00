"""A training process killed with SIGKILL resumes from its timed backup and ends where an
uninterrupted run ends."""

import json
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.training import list_checkpoints


def _command(data_dir, model_dir):
    return [sys.executable, "-m", "keras_transformer.cli", "train", "--data", data_dir,
            "--output", model_dir, "--preset", "tiny", "--dropout", "0",
            "--tokens-per-batch", "96", "--max-sequence-length", "16", "--max-steps", "12",
            "--checkpoint-every", "8", "--bleu-every", "0", "--warmup-steps", "4",
            "--backup-minutes", "0"]  # 0: a timed backup after every step


def _env():
    return {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}


def _weights(model_dir):
    model = keras.models.load_model(os.path.join(model_dir, "model.keras"))
    return model.get_weights()


@pytest.mark.slow
def test_a_run_killed_after_a_timed_backup_resumes_to_the_same_weights(tiny_data_dir,
                                                                       tmp_path):
    reference_dir, killed_dir = str(tmp_path / "reference"), str(tmp_path / "killed")
    subprocess.run(_command(tiny_data_dir, reference_dir), env=_env(), check=True,
                   capture_output=True, timeout=300)

    process = subprocess.Popen(_command(tiny_data_dir, killed_dir), env=_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metadata = os.path.join(killed_dir, "backup", "training_metadata.json")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with open(metadata, encoding="utf-8") as file:
                if json.load(file)["step"] >= 3:
                    break
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    assert process.poll() is None, "training ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert not os.path.exists(os.path.join(killed_dir, "model.keras"))
    # Killed before the first step checkpoint (step 8): only the timed backup holds work.
    assert list_checkpoints(os.path.join(killed_dir, "checkpoints")) == []
    with open(metadata, encoding="utf-8") as file:
        assert 0 < json.load(file)["step"] < 8

    rerun = subprocess.run(_command(tiny_data_dir, killed_dir), env=_env(), check=True,
                           capture_output=True, text=True, timeout=300)
    assert 0 < json.loads(rerun.stdout.strip().splitlines()[-1])["resumed_from"] < 8
    for expected, actual in zip(_weights(reference_dir), _weights(killed_dir), strict=True):
        np.testing.assert_allclose(actual, expected, atol=1e-5)

    model = kt.build_transformer("tiny", vocabulary_size=60, dropout=0.0)
    for _, path in list_checkpoints(os.path.join(killed_dir, "checkpoints")):
        model.load_weights(path)  # every checkpoint left behind is readable
