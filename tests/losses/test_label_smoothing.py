import math

import numpy as np
import pytest

import keras_transformer as kt
from tests.harness import assert_serializable

LOGITS = np.array([[[2.0, 1.0, 0.0], [0.5, 0.5, 3.0], [1.0, 1.0, 1.0]]], "float32")
TARGETS = np.array([[1, 2, 0]])  # the last token is padding


def _hand_loss(eps):
    total = 0.0
    for logits, target in zip(LOGITS[0][:2], TARGETS[0][:2], strict=True):
        log_probs = logits - math.log(sum(math.exp(v) for v in logits))
        q = [(1 - eps) * (i == target) + eps / 3 for i in range(3)]
        total += -sum(qi * lp for qi, lp in zip(q, log_probs, strict=True))
    return total / 2  # averaged over the two real tokens


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_matches_a_hand_computation(eps):
    loss = kt.LabelSmoothedSparseCategoricalCrossentropy(label_smoothing=eps)
    assert float(loss(TARGETS, LOGITS)) == pytest.approx(_hand_loss(eps), rel=1e-5)


def test_without_smoothing_equals_keras_crossentropy_with_ignore_class():
    import keras

    reference = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)
    ours = kt.LabelSmoothedSparseCategoricalCrossentropy(label_smoothing=0.0)
    assert float(ours(TARGETS, LOGITS)) == pytest.approx(float(reference(TARGETS, LOGITS)),
                                                         rel=1e-5)


def test_all_padding_batch_gives_zero_not_nan():
    loss = kt.LabelSmoothedSparseCategoricalCrossentropy()
    assert float(loss(np.zeros((2, 3), "int32"), np.ones((2, 3, 5), "float32"))) == 0.0


def test_bfloat16_logits_are_computed_in_float32():
    import keras

    logits = keras.ops.cast(LOGITS, "bfloat16")
    losses, _ = kt.label_smoothed_sparse_categorical_crossentropy(TARGETS, logits, 0.1)
    assert keras.backend.standardize_dtype(losses.dtype) == "float32"


def test_round_trips_through_config():
    revived = assert_serializable(kt.LabelSmoothedSparseCategoricalCrossentropy(0.2))
    assert revived.label_smoothing == 0.2


def test_invalid_smoothing():
    with pytest.raises(ValueError, match="Received: label_smoothing=1.5"):
        kt.LabelSmoothedSparseCategoricalCrossentropy(label_smoothing=1.5)
