import json
import os

import keras
import numpy as np
import pytest

from keras_transformer.folders import CONFIG_FILE
from keras_transformer.training import train
from keras_transformer.training.precision import choose_precision, set_precision

SETTINGS = dict(preset="tiny", max_steps=2, tokens_per_batch=64, max_sequence_length=16,
                checkpoint_every=2, bleu_every=0, verbose=0, dropout=0.0)


def _stand_in(seconds):
    def fit_steps(precision, steps, timer):
        assert keras.mixed_precision.global_policy().name == precision
        timer.seconds = [seconds[precision]] * (steps - timer.skip)
    return fit_steps


@pytest.mark.parametrize("bfloat16_seconds, expected", [(0.5, "mixed_bfloat16"),
                                                        (0.97, "float32"),
                                                        (1.2, "float32")])
def test_mixed_precision_must_be_clearly_faster(bfloat16_seconds, expected):
    seconds = {"float32": 1.0, "mixed_bfloat16": bfloat16_seconds}
    try:
        chosen, timings = choose_precision(_stand_in(seconds), candidates=tuple(seconds))
        assert (chosen, timings) == (expected, seconds)
        assert keras.mixed_precision.global_policy().name == expected
    finally:
        set_precision("float32")


def test_auto_records_its_choice_and_trains_the_model_that_choice_would(tmp_path,
                                                                         tiny_data_dir):
    auto_dir, named_dir = str(tmp_path / "auto"), str(tmp_path / "named")
    try:
        train(tiny_data_dir, auto_dir, precision="auto", **SETTINGS)
        with open(os.path.join(auto_dir, CONFIG_FILE)) as file:
            config = json.load(file)
        chosen = config["training"]["precision"]
        assert chosen in ("float32", "mixed_bfloat16")
        assert config["precision_auto"]["chosen"] == chosen
        seconds = config["precision_auto"]["seconds_per_step"]
        assert set(seconds) == {"float32", "mixed_bfloat16"}
        assert all(value > 0 for value in seconds.values())

        train(tiny_data_dir, named_dir, precision=chosen, **SETTINGS)
        auto = keras.models.load_model(os.path.join(auto_dir, "model.keras"))
        named = keras.models.load_model(os.path.join(named_dir, "model.keras"))
        for a, b in zip(auto.weights, named.weights, strict=True):
            np.testing.assert_array_equal(keras.ops.convert_to_numpy(a),
                                          keras.ops.convert_to_numpy(b), err_msg=a.path)

        # Resuming with auto keeps the saved choice: no conflict, no second trial.
        result = train(tiny_data_dir, auto_dir, precision="auto",
                       **{**SETTINGS, "max_steps": 4})
        assert result["step"] == 4
        with open(os.path.join(auto_dir, CONFIG_FILE)) as file:
            resumed = json.load(file)
        assert resumed["training"]["precision"] == chosen
        assert resumed["precision_auto"] == config["precision_auto"]
    finally:
        set_precision("float32")
