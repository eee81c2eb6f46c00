import os

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.training import StepCheckpoint, average_checkpoints


def test_average_is_the_elementwise_mean_of_the_last_checkpoints(tmp_path, tiny_data_dir):
    keras.utils.set_random_seed(0)
    model = kt.build_transformer("tiny", vocabulary_size=60)
    checkpoint = StepCheckpoint(str(tmp_path), keep=3)
    checkpoint.set_model(model)
    rng = np.random.default_rng(0)
    saved = []
    for step in (10, 20, 30):
        weights = [rng.normal(size=w.shape).astype(w.dtype) for w in model.get_weights()]
        model.set_weights(weights)
        checkpoint.save(step)
        saved.append(weights)
    assert average_checkpoints(model, str(tmp_path), last=2) == [20, 30]
    for averaged, a, b in zip(model.get_weights(), saved[1], saved[2], strict=True):
        expected = ((a.astype("float64") + b.astype("float64")) / 2).astype(a.dtype)
        np.testing.assert_array_equal(averaged, expected)

    tokenizer = kt.data.Tokenizer.from_file(os.path.join(tiny_data_dir, "tokenizer.model"))
    translation = kt.Translator(model, tokenizer).translate("Der Hund schläft.",
                                                           method="greedy", max_length=5)
    assert isinstance(translation, str)


def test_average_without_checkpoints_is_a_clear_error(tmp_path):
    model = kt.build_transformer("tiny", vocabulary_size=20)
    with pytest.raises(FileNotFoundError, match="No checkpoints"):
        average_checkpoints(model, str(tmp_path))


def _copy_task_losses(dtype):
    keras.utils.set_random_seed(0)
    model = kt.build_transformer("tiny", vocabulary_size=20, dropout=0.0, dtype=dtype)
    kt.compile_transformer(model, warmup_steps=20, label_smoothing=0.1)
    rng = np.random.default_rng(0)
    source = rng.integers(4, 20, size=(320, 8)).astype("int32")
    inputs = {"encoder_token_ids": source,
              "decoder_token_ids": np.concatenate([np.full((320, 1), 2, "int32"),
                                                   source[:, :-1]], 1)}
    history = model.fit(inputs, source, batch_size=32, epochs=4, shuffle=False, verbose=0)
    return np.array(history.history["loss"])


def test_mixed_bfloat16_loss_tracks_float32():
    """bf16 keeps 8 mantissa bits: epoch losses stay within 5% of float32 (documented)."""
    float32, bfloat16 = _copy_task_losses("float32"), _copy_task_losses("mixed_bfloat16")
    assert float32[-1] < float32[0]
    np.testing.assert_array_less(np.abs(bfloat16 - float32) / float32, 0.05)
