import math

import numpy as np

import keras_transformer as kt
from tests.harness import assert_serializable


def test_accuracy_ignores_padding():
    metric = kt.MaskedAccuracy()
    logits = np.eye(5)[[[1, 2, 4, 0, 0]]]
    metric.update_state(np.array([[1, 2, 3, 0, 0]]), logits)
    assert math.isclose(float(metric.result()), 2 / 3, rel_tol=1e-6)
    metric.reset_state()
    assert float(metric.result()) == 0.0


def test_perplexity_of_uniform_logits_is_vocabulary_size():
    metric = kt.Perplexity()
    metric.update_state(np.array([[1, 2, 0]]), np.zeros((1, 3, 7), "float32"))
    assert math.isclose(float(metric.result()), 7.0, rel_tol=1e-5)


def test_metrics_round_trip():
    assert_serializable(kt.MaskedAccuracy())
    assert_serializable(kt.Perplexity())
