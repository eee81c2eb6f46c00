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


def test_perplexity_is_the_exp_of_the_mean_token_nll_over_batches():
    """Against NumPy's log-softmax, with large logits, padding, and two batches summed."""
    rng = np.random.default_rng(0)
    metric, nll = kt.Perplexity(), []
    for _ in range(2):
        logits = (8 * rng.standard_normal((3, 4, 11))).astype("float32")
        targets = rng.integers(1, 11, (3, 4))
        targets[0, 2:] = targets[2, 1:] = 0
        metric.update_state(targets, logits)
        shifted = logits.astype("float64") - logits.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        picked = np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]
        nll.extend(-picked[targets != 0])
    assert len(nll) == 2 * 7
    assert math.isclose(float(metric.result()), math.exp(np.mean(nll)), rel_tol=1e-4)


def test_perplexity_without_an_ignored_class_counts_every_token():
    metric = kt.Perplexity(ignore_class=None)
    metric.update_state(np.array([[1, 0]]), np.log(np.array([[[1, 1, 2, 4]] * 2], "float32")))
    assert math.isclose(float(metric.result()), 8.0, rel_tol=1e-5)  # p = 1/8 at both tokens


def test_metrics_round_trip():
    assert_serializable(kt.MaskedAccuracy())
    assert_serializable(kt.Perplexity())
