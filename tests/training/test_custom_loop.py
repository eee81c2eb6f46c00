"""`fit_with_custom_loop` on one device: steps, callbacks, logs and the loss it requires."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.training import TrainingLimit, fit_with_custom_loop


def _batches(count=6):
    ids = np.arange(4, 16, dtype="int32").reshape(2, 6)
    ids[0, 4:] = 0  # padding, which the logged loss must ignore
    inputs = {"encoder_token_ids": ids, "decoder_token_ids": ids}
    return tf.data.Dataset.from_tensors((inputs, ids)).repeat(count)


def _model():
    keras.utils.set_random_seed(0)
    return kt.compile_transformer(kt.build_transformer("tiny", vocabulary_size=20, dropout=0.0))


def test_a_callback_stop_ends_training_after_that_step():
    model = _model()
    history = fit_with_custom_loop(model, _batches(), epochs=3, steps_per_epoch=2,
                                   callbacks=[TrainingLimit(max_steps=3)], verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 3
    assert len(history.history["loss"]) == 2


def test_first_logged_loss_is_keras_loss_on_that_batch():
    model = _model()
    features, labels = _batches(1).get_single_element()
    expected = float(model.compute_loss(y=labels, y_pred=model(features)))
    history = fit_with_custom_loop(model, _batches(1), verbose=0)
    assert history.history["loss"][0] == pytest.approx(expected, rel=1e-5)


def test_another_loss_is_a_type_error_naming_compile_transformer():
    model = kt.build_transformer("tiny", vocabulary_size=20)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    with pytest.raises(TypeError, match="compile_transformer"):
        fit_with_custom_loop(model, _batches(), verbose=0)
