"""int8 decoding: the tied embedding and output projection quantized per row, checked
by hand; the quantized model decodes cached as uncached, saves, and leaves the float
model alone."""

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.generation import Translator, generate
from keras_transformer.layers.embedding import TokenEmbedding
from keras_transformer.special_tokens import END_ID, PAD_ID, START_ID

VOCABULARY_SIZE = 48


def _model(seed=0):
    keras.utils.set_random_seed(seed)
    return kt.build_transformer("tiny", vocabulary_size=VOCABULARY_SIZE, num_layers=1,
                                dropout=0.0)


SOURCES = np.array([[5, 6, 7, 8, 9, 3], [10, 11, 12, 3, 0, 0]], "int32")


def test_rows_are_int8_with_one_scale_each():
    embedding = TokenEmbedding(vocabulary_size=6, hidden_dim=4)
    embedding.build()
    table = np.array([[1.0, -2.0, 0.5, 0.0], [0.0, 0.0, 0.0, 0.0], [3.0, 1.0, -1.0, 2.0],
                      [0.1, 0.2, 0.3, -0.4], [5.0, 5.0, 5.0, 5.0], [-1.0, 1.0, -1.0, 1.0]],
                     "float32")
    embedding.embeddings.assign(table)
    embedding.quantize("int8")
    values = keras.ops.convert_to_numpy(embedding.quantized_kernel).T  # stored (D, V)
    scale = keras.ops.convert_to_numpy(embedding.kernel_scale)
    # By hand: row 0's largest magnitude is 2, so its scale is 2 / 127 and -2 -> -127.
    np.testing.assert_allclose(scale[0], 2 / 127, rtol=1e-6)
    assert values[0].tolist() == [64, -127, 32, 0]  # round(127 / 2 * [1, -2, 0.5, 0])
    assert scale[1] == 1.0 and not values[1].any()  # an all-zero row stays zero
    assert values.dtype == np.int8 and np.abs(values).max() == 127
    np.testing.assert_allclose(values * scale[:, None], table, atol=scale.max() / 2 + 1e-7)
    assert embedding.embeddings is None and len(embedding.weights) == 2


def test_int8_lookup_and_logits_approximate_the_float_layer():
    embedding = TokenEmbedding(vocabulary_size=VOCABULARY_SIZE, hidden_dim=32)
    ids = np.array([[1, 7, 30, 0]])
    hidden = np.random.default_rng(0).normal(size=(2, 3, 32)).astype("float32")
    float_embedded = keras.ops.convert_to_numpy(embedding(ids))
    float_logits = keras.ops.convert_to_numpy(embedding(hidden, reverse=True))
    embedding.quantize("int8")
    embedded = keras.ops.convert_to_numpy(embedding(ids))
    logits = keras.ops.convert_to_numpy(embedding(hidden, reverse=True))
    # Each weight moves by at most half a step (1/254 of its row's largest magnitude).
    assert np.abs(embedded - float_embedded).max() <= np.abs(float_embedded).max() / 254 + 1e-6
    assert np.abs(logits - float_logits).max() < 0.02 * np.abs(float_logits).max()
    # The same choice of token for almost every row: int8 keeps the ranking.
    assert (logits.argmax(-1) == float_logits.argmax(-1)).mean() >= 0.8


@pytest.mark.parametrize("filters", [None, "token_embedding"])
def test_quantized_model_saves_and_loads(tmp_path, filters):
    model = _model()
    model.quantize("int8", filters=filters)
    kinds = {w.path.split("/")[-1] for w in model.weights}
    assert "quantized_kernel" in kinds and "embeddings" not in kinds
    assert ("kernel_scale" in {w.path.split("/")[-1] for w in model.weights
                               if "dense" in w.path}) == (filters is None)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.quantization == "int8" and loaded.quantization_filters == filters
    inputs = {"encoder_token_ids": SOURCES, "decoder_token_ids": SOURCES}
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(inputs)),
                               keras.ops.convert_to_numpy(model(inputs)), atol=1e-5)


def test_cached_int8_decoding_gives_the_uncached_tokens():
    model = _model(1)
    model.quantize("int8")
    out = generate(model, SOURCES, "greedy", max_length=8, min_length=0)
    # Uncached: the whole prefix through `decode` at every step.
    encoded = model.encode(SOURCES)
    mask = SOURCES != PAD_ID
    tokens = np.full((len(SOURCES), 1), START_ID, "int32")
    for _ in range(out["token_ids"].shape[1]):
        logits = keras.ops.convert_to_numpy(model.decode(tokens, encoded, mask))[:, -1]
        logits[:, [PAD_ID, START_ID]] = -np.inf
        done = (tokens[:, 1:] == END_ID).any(axis=1) | (tokens[:, 1:] == PAD_ID).any(axis=1)
        tokens = np.concatenate(
            [tokens, np.where(done, PAD_ID, logits.argmax(-1))[:, None].astype("int32")], 1)
    np.testing.assert_array_equal(out["token_ids"], tokens[:, 1:])


def test_translator_quantizes_a_copy(tmp_path):
    from keras_transformer.data import train_tokenizer

    tokenizer = train_tokenizer(["Guten Tag.", "Good day."] * 5, vocabulary_size=30)
    model = kt.build_transformer("tiny", vocabulary_size=30, num_layers=1, dropout=0.0)
    translator = Translator(model, tokenizer, method="greedy", max_length=5,
                            quantization="int8")
    assert translator.model is not model and translator.model.quantization == "int8"
    assert model.quantization is None and model.token_embedding.embeddings is not None
    assert isinstance(translator.translate("Guten Tag."), str)


def test_bad_quantization_is_named():
    model = _model()
    with pytest.raises(ValueError, match="quantization"):
        Translator(model, None, quantization="int4")
    with pytest.raises(ValueError, match="mode"):
        model.quantize("float8")
    model.quantize("int8")
    with pytest.raises(ValueError, match="already quantized"):
        model.quantize("int8")
