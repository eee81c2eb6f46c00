import math

import keras
import numpy as np
import pytest

from keras_transformer.layers import PositionwiseFeedForward, TokenEmbedding


def test_embedding_is_scaled_by_sqrt_hidden_dim_and_tied_to_projection():
    layer = TokenEmbedding(vocabulary_size=11, hidden_dim=8)
    embedded = keras.ops.convert_to_numpy(layer(np.array([[3, 5]])))
    table = keras.ops.convert_to_numpy(layer.embeddings)
    np.testing.assert_allclose(embedded[0], table[[3, 5]] * math.sqrt(8), rtol=1e-6)
    hidden = np.random.default_rng(0).normal(size=(1, 2, 8)).astype("float32")
    np.testing.assert_allclose(layer(hidden, reverse=True), hidden @ table.T, rtol=1e-5, atol=1e-5)
    assert len(layer.weights) == 1


def test_feed_forward_is_relu_mlp():
    layer = PositionwiseFeedForward(intermediate_dim=6)
    x = np.random.default_rng(1).normal(size=(2, 3, 4)).astype("float32")
    out = keras.ops.convert_to_numpy(layer(x))
    w1, b1, w2, b2 = [keras.ops.convert_to_numpy(w) for w in layer.get_weights()]
    np.testing.assert_allclose(out, np.maximum(0, x @ w1 + b1) @ w2 + b2, atol=1e-5)


@pytest.mark.parametrize("value", [0, -3, 2.5])
def test_invalid_sizes(value):
    with pytest.raises(ValueError, match=f"Received: vocabulary_size={value}"):
        TokenEmbedding(vocabulary_size=value, hidden_dim=8)
