import math

import keras
import numpy as np

from keras_transformer.layers import (
    LearnedPositionEmbedding,
    SinusoidalPositionEncoding,
    sinusoids,
)
from tests.harness import assert_layer_contract


def test_sinusoids_match_the_formula():
    hidden_dim = 16
    encoding = keras.ops.convert_to_numpy(sinusoids(np.arange(50), hidden_dim))
    for pos in (0, 1, 7, 49):
        for i in range(hidden_dim // 2):
            angle = pos / 10000 ** (2 * i / hidden_dim)
            assert math.isclose(encoding[pos, 2 * i], math.sin(angle), abs_tol=1e-5)
            assert math.isclose(encoding[pos, 2 * i + 1], math.cos(angle), abs_tol=1e-5)


def test_start_index_shifts_positions():
    layer = SinusoidalPositionEncoding()
    full = keras.ops.convert_to_numpy(layer(np.zeros((1, 10, 8))))
    shifted = keras.ops.convert_to_numpy(layer(np.zeros((1, 3, 8)), start_index=4))
    np.testing.assert_allclose(shifted[0], full[0, 4:7], atol=1e-6)


def test_layer_contracts():
    inputs = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    assert_layer_contract(SinusoidalPositionEncoding(), inputs, fit=False)
    assert_layer_contract(LearnedPositionEmbedding(max_sequence_length=12), inputs, fit=False)
