"""The model options beyond the paper that imported (Marian) models need, each checked
against a hand computation and kept through a `.keras` round trip."""

import math

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.layers.position_embedding import SinusoidalPositionEncoding, sinusoids

VOCAB = 30
INPUTS = {"encoder_token_ids": np.array([[5, 6, 7, 3], [8, 3, 0, 0]], "int32"),
          "decoder_token_ids": np.array([[2, 9, 10], [2, 11, 0]], "int32")}


def _model(**options):
    keras.utils.set_random_seed(0)
    return kt.Transformer(vocabulary_size=VOCAB, num_layers=1, hidden_dim=16,
                          intermediate_dim=32, num_heads=2, dropout=0.0, **options)


def _round_trip(model, tmp_path):
    path = str(tmp_path / "model.keras")
    model.save(path)
    return keras.models.load_model(path)


def _logits(model):
    return keras.ops.convert_to_numpy(model(INPUTS))


def test_halves_layout_is_marians_table():
    # Marian's table, as transformers computes it (MarianSinusoidalPositionalEmbedding).
    positions, dim = 50, 10
    angles = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)]
                       for pos in range(positions)])
    expected = np.concatenate([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])], axis=1)
    ours = keras.ops.convert_to_numpy(sinusoids(np.arange(positions), dim, layout="halves"))
    np.testing.assert_allclose(ours, expected, atol=2e-5)


def test_halves_is_a_permutation_of_interleaved():
    interleaved = keras.ops.convert_to_numpy(sinusoids(np.arange(9), 8))
    halves = keras.ops.convert_to_numpy(sinusoids(np.arange(9), 8, layout="halves"))
    np.testing.assert_allclose(halves, interleaved[:, [0, 2, 4, 6, 1, 3, 5, 7]], atol=1e-6)


def test_unknown_layout_is_named():
    with pytest.raises(ValueError, match="layout"):
        SinusoidalPositionEncoding(layout="mixed")
    with pytest.raises(ValueError, match="position_layout"):
        _model(position_layout="mixed")


def test_output_bias_adds_to_every_logit(tmp_path):
    model = _model(output_bias=True)
    before = _logits(model)
    bias = np.linspace(-1, 1, VOCAB).astype("float32")
    model.token_embedding.logits_bias.assign(bias)
    np.testing.assert_allclose(_logits(model), before + bias, atol=1e-5)
    assert "token_embedding/logits_bias" not in [w.path for w in model.trainable_weights]
    loaded = _round_trip(model, tmp_path)
    assert loaded.output_bias
    np.testing.assert_allclose(_logits(loaded), before + bias, atol=1e-5)


def test_separate_source_embedding(tmp_path):
    model = _model(source_vocabulary_size=12)
    assert model.source_token_embedding is not model.token_embedding
    assert tuple(model.source_token_embedding.embeddings.shape) == (12, 16)
    # The encoder reads only the source embedding: changing the target one's rows that
    # the source ids use changes nothing in the encoder's output.
    encoded = keras.ops.convert_to_numpy(model.encode(INPUTS["encoder_token_ids"]))
    model.token_embedding.embeddings.assign(np.zeros((VOCAB, 16), "float32"))
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model.encode(INPUTS["encoder_token_ids"])), encoded)
    loaded = _round_trip(model, tmp_path)
    assert loaded.source_vocabulary_size == 12
    np.testing.assert_allclose(_logits(loaded), _logits(model), atol=1e-6)


def test_shared_embedding_is_one_weight():
    model = _model()
    assert model.source_token_embedding is model.token_embedding
    paths = [weight.path for weight in model.weights]
    assert paths.count("token_embedding/embeddings") == 1
    assert not any(path.startswith("source_token_embedding") for path in paths)


def test_silu_and_epsilon_reach_the_layers(tmp_path):
    model = _model(activation="silu", layer_norm_epsilon=1e-5)
    loaded = _round_trip(model, tmp_path)
    block = loaded.encoder_blocks[0]
    assert block.activation == "silu" and block.layer_norm_epsilon == 1e-5
    x = np.array([-2.0, 0.0, 3.0], "float32")
    silu = keras.ops.convert_to_numpy(keras.activations.get("silu")(x))
    np.testing.assert_allclose(silu, x / (1 + np.exp(-x)), atol=1e-6)
    np.testing.assert_allclose(_logits(loaded), _logits(model), atol=1e-6)


def test_options_round_trip_with_cached_decoding(tmp_path):
    model = _round_trip(_model(source_vocabulary_size=12, output_bias=True,
                               position_layout="halves", activation="silu"), tmp_path)
    full = _logits(model)
    encoder_ids = INPUTS["encoder_token_ids"]
    sequence = model.encode(encoder_ids)
    cache = model.init_cache(sequence, max_length=3)
    mask = encoder_ids != 0
    for index in range(3):
        step_logits, cache = model.decode_step(INPUTS["decoder_token_ids"][:, index:index + 1],
                                               index, cache, mask)
        real = INPUTS["decoder_token_ids"][:, index] != 0  # padded positions differ
        np.testing.assert_allclose(keras.ops.convert_to_numpy(step_logits)[real, 0],
                                   full[real, index], atol=1e-4)
    assert math.isfinite(float(full.max()))
