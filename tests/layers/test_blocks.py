import keras
import numpy as np
import pytest

from keras_transformer.layers import TransformerDecoderBlock, TransformerEncoderBlock
from tests.harness import assert_layer_contract

RNG = np.random.default_rng(0)


def _sequence(batch, length, hidden_dim=16):
    return RNG.normal(size=(batch, length, hidden_dim)).astype("float32")


def test_encoder_padding_changes_nothing_at_real_positions():
    block = TransformerEncoderBlock(intermediate_dim=32, num_heads=4)
    x = _sequence(1, 5)
    mask = np.array([[True, True, True, False, False]])
    out = keras.ops.convert_to_numpy(block(x, padding_mask=mask))
    x2 = x.copy()
    x2[:, 3:] = RNG.normal(size=(1, 2, 16))  # change what sits under the pad mask
    out2 = keras.ops.convert_to_numpy(block(x2, padding_mask=mask))
    np.testing.assert_allclose(out[:, :3], out2[:, :3], atol=1e-5)


def test_decoder_is_causal_and_uses_the_encoder_mask_when_lengths_differ():
    block = TransformerDecoderBlock(intermediate_dim=32, num_heads=4)
    x, memory = _sequence(1, 6), _sequence(1, 4)
    memory_mask = np.array([[True, True, False, False]])
    out = keras.ops.convert_to_numpy(block(x, memory, encoder_padding_mask=memory_mask))
    x2 = x.copy()
    x2[:, 3:] += 1.0
    memory2 = memory.copy()
    memory2[:, 2:] -= 5.0
    out2 = keras.ops.convert_to_numpy(block(x2, memory2, encoder_padding_mask=memory_mask))
    np.testing.assert_allclose(out[:, :3], out2[:, :3], atol=1e-5)
    assert not np.allclose(out[:, 3:], out2[:, 3:])


@pytest.mark.parametrize("stacked", [False, True])
def test_decoder_cache_equals_full_pass(stacked):
    block = TransformerDecoderBlock(intermediate_dim=32, num_heads=4, normalize_first=True)
    x, memory = _sequence(2, 5), _sequence(2, 3)
    full = keras.ops.convert_to_numpy(block(x, memory))
    cross = block.compute_cross_attention_cache(memory)
    shape = (2, 4, 7, 4)  # (B, N, L, H)
    cache = (np.zeros((2, 2, 4, 7, 4), "float32") if stacked  # (B, 2, N, L, H)
             else (np.zeros(shape, "float32"), np.zeros(shape, "float32")))
    steps = []
    for i in range(5):
        out, cache = block(x[:, i : i + 1], self_attention_cache=cache,
                           cross_attention_cache=cross, cache_update_index=i)
        steps.append(keras.ops.convert_to_numpy(out))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)


def test_cache_requires_an_index():
    block = TransformerDecoderBlock(intermediate_dim=32, num_heads=4)
    with pytest.raises(ValueError, match="`cache_update_index` is required"):
        block(_sequence(1, 1), _sequence(1, 2), self_attention_cache=np.zeros((1, 2, 4, 3, 4)))


def test_attention_scores_are_returned_for_plots():
    block = TransformerDecoderBlock(intermediate_dim=32, num_heads=4)
    _, weights = block(_sequence(2, 5), _sequence(2, 3), return_attention_scores=True)
    assert tuple(weights["self_attention"].shape) == (2, 4, 5, 5)
    assert tuple(weights["cross_attention"].shape) == (2, 4, 5, 3)
    cross = keras.ops.convert_to_numpy(weights["cross_attention"])
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_layer_contracts(normalize_first):
    kwargs = dict(intermediate_dim=32, num_heads=4, normalize_first=normalize_first)
    assert_layer_contract(TransformerEncoderBlock(**kwargs), _sequence(2, 5))
    assert_layer_contract(TransformerDecoderBlock(**kwargs), _sequence(2, 5), _sequence(2, 3))


def test_invalid_heads_for_width():
    with pytest.raises(ValueError, match="`hidden_dim` \\(16\\) must be divisible by "
                                         "`num_heads` \\(3\\)"):
        TransformerEncoderBlock(intermediate_dim=8, num_heads=3)(_sequence(1, 2))
