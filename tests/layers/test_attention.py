import keras
import numpy as np
import pytest

from keras_transformer.layers import MultiHeadAttention
from keras_transformer.layers.masking import causal_mask
from tests.harness import assert_layer_contract

RNG = np.random.default_rng(0)


def _inputs(batch=2, query_length=5, key_length=7, hidden_dim=16):
    query = RNG.normal(size=(batch, query_length, hidden_dim)).astype("float32")
    value = RNG.normal(size=(batch, key_length, hidden_dim)).astype("float32")
    return query, value


def _softmax(x):
    x = x - x.max(-1, keepdims=True)
    return np.exp(x) / np.exp(x).sum(-1, keepdims=True)


def test_matches_keras_multi_head_attention_with_same_weights():
    query, value = _inputs()
    mask = RNG.random((2, 5, 7)) > 0.3
    mask[:, :, 0] = True
    ours = MultiHeadAttention(num_heads=4)
    reference = keras.layers.MultiHeadAttention(num_heads=4, key_dim=4)
    expected = reference(query, value, attention_mask=mask)
    ours(query, value)
    ours.set_weights(reference.get_weights())
    actual = ours(query, value, attention_mask=mask)
    np.testing.assert_allclose(actual, expected, atol=1e-5)


def test_key_dim_is_hidden_dim_over_heads():
    layer = MultiHeadAttention(num_heads=4)
    layer(*_inputs(hidden_dim=16))
    assert tuple(layer._query_dense.kernel.shape) == (16, 4, 4)


def test_matches_numpy_scaled_dot_product_attention():
    query, value = _inputs(batch=1)
    layer = MultiHeadAttention(num_heads=2)
    output, weights = layer(query, value, return_attention_scores=True)
    wq, bq, wk, bk, wv, bv, wo, bo = [keras.ops.convert_to_numpy(w) for w in layer.get_weights()]
    q = np.einsum("btd,dnh->bnth", query, wq) + bq[None, :, None]
    k = np.einsum("bsd,dnh->bnsh", value, wk) + bk[None, :, None]
    v = np.einsum("bsd,dnh->bnsh", value, wv) + bv[None, :, None]
    expected_weights = _softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(8))
    expected = np.einsum("bnts,bnsh,nhd->btd", expected_weights, v, wo) + bo
    np.testing.assert_allclose(weights, expected_weights, atol=1e-5)
    np.testing.assert_allclose(output, expected, atol=1e-5)


def test_masked_keys_get_zero_weight_and_fully_masked_rows_no_nan():
    query, value = _inputs()
    mask = np.ones((2, 5, 7), bool)
    mask[:, :, 4:] = False
    mask[1] = False  # every key hidden from every query of the second row
    output, weights = MultiHeadAttention(num_heads=4)(
        query, value, attention_mask=mask, return_attention_scores=True
    )
    weights = keras.ops.convert_to_numpy(weights)
    assert np.all(weights[:, :, :, 4:] == 0)
    assert np.all(weights[1] == 0)
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(output)))


# Batch 1 feeds a single token a step, which `_project` computes as two rows. The cache
# is a (keys, values) pair, or the stacked (B, 2, N, L, H) tensor of earlier releases.
@pytest.mark.parametrize("stacked", [False, True])
@pytest.mark.parametrize("batch", [1, 2])
def test_incremental_cache_equals_full_causal_attention(batch, stacked):
    sequence, _ = _inputs(batch=batch, query_length=6)
    layer = MultiHeadAttention(num_heads=4)
    full = layer(sequence, attention_mask=causal_mask(6)[None])
    shape = (batch, 4, 8, 4)  # 4 heads, preallocated for 8 positions
    cache = (np.zeros((batch, 2, *shape[1:]), "float32") if stacked
             else (np.zeros(shape, "float32"), np.zeros(shape, "float32")))
    steps = []
    for index in range(6):
        mask = causal_mask(1, 8, start_index=index)[None]
        out, cache = layer(sequence[:, index : index + 1], attention_mask=mask, cache=cache,
                           cache_update_index=index)
        steps.append(out)
        if stacked:
            assert tuple(cache.shape) == (batch, 2, *shape[1:])
        else:
            assert [tuple(part.shape) for part in cache] == [shape, shape]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)
    if not stacked:  # the positions not yet written are still zeros
        assert not np.any(keras.ops.convert_to_numpy(cache[0])[:, :, 6:])


def test_cache_pair_holds_the_projected_keys_and_values():
    query, value = _inputs()
    layer = MultiHeadAttention(num_heads=4)
    layer(query, value)
    keys, values = layer.compute_cache(value)
    for part, dense in ((keys, layer._key_dense), (values, layer._value_dense)):
        kernel, bias = (keras.ops.convert_to_numpy(w) for w in dense.weights)
        expected = np.einsum("bsd,dnh->bnsh", value, kernel) + bias[None, :, None]
        np.testing.assert_allclose(part, expected, atol=1e-5)


@pytest.mark.parametrize("stacked", [False, True])
def test_precomputed_cross_attention_cache_equals_direct_call(stacked):
    query, value = _inputs()
    layer = MultiHeadAttention(num_heads=4)
    direct = layer(query, value)
    cache = layer.compute_cache(value)
    if stacked:
        cache = keras.ops.stack(cache, axis=1)
    cached, _ = layer(query, cache=cache)
    np.testing.assert_allclose(cached, direct, atol=1e-6)


def test_shared_cache_rows_equal_a_repeated_cache():
    # Beam search: G = 3 query rows per sentence share that sentence's cache row.
    query, value = _inputs(batch=6, query_length=2)
    value = value[::3]  # 2 sentences
    mask = np.ones((2, 1, 7), bool)
    mask[1, 0, 4:] = False
    layer = MultiHeadAttention(num_heads=4)
    direct, direct_weights = layer(query, np.repeat(value, 3, axis=0),
                                   attention_mask=np.repeat(mask, 3, axis=0),
                                   return_attention_scores=True)
    shared, shared_weights, _ = layer(query, cache=layer.compute_cache(value),
                                      attention_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(shared, direct, atol=1e-5)
    np.testing.assert_allclose(shared_weights, direct_weights, atol=1e-6)
    assert np.all(keras.ops.convert_to_numpy(shared_weights)[3:, :, :, 4:] == 0)


def test_layer_contract():
    query, value = _inputs()
    assert_layer_contract(MultiHeadAttention(num_heads=4, dropout=0.1), query, value)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_heads": 3, "hidden_dim": 16}, "must be divisible by `num_heads` (3)"),
        ({"num_heads": 0}, "`num_heads` must be a positive integer. Received: num_heads=0"),
        ({"num_heads": 2, "dropout": 1.0}, "`dropout` must be in [0, 1). Received: dropout=1.0"),
    ],
)
def test_invalid_arguments(kwargs, message):
    with pytest.raises(ValueError, match=re_escape(message)):
        MultiHeadAttention(**kwargs)


def test_query_width_must_match_hidden_dim():
    with pytest.raises(ValueError, match="must equal `hidden_dim` \\(8\\)"):
        MultiHeadAttention(num_heads=2, hidden_dim=8)(*_inputs(hidden_dim=16))


def re_escape(text):
    import re

    return re.escape(text)
