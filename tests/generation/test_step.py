import keras
import numpy as np
import pytest

from keras_transformer.generation import DecoderStep, generate
from keras_transformer.generation.step import log_probs_of


@pytest.mark.parametrize("model_name", ["random_model", "trained_model"])
def test_cached_greedy_matches_uncached_decoding(request, reference, source_ids, model_name):
    model = request.getfixturevalue(model_name)
    if model_name == "trained_model":
        source_ids = reference.batch(np.random.default_rng(3), 4)[0]
    out = generate(model, source_ids, "greedy", max_length=10, jit_compile=False)
    tokens, log_probs = reference.greedy(model, source_ids, max_length=10)
    np.testing.assert_array_equal(out["token_ids"], tokens[:, : out["token_ids"].shape[1]])
    np.testing.assert_allclose(out["log_probs"], log_probs[:, : out["log_probs"].shape[1]],
                               atol=1e-4)
    if model_name == "trained_model":  # the copy model produces real, finished outputs
        assert (out["token_ids"] == 3).any(axis=1).all()
        assert len(np.unique(out["token_ids"])) > 4


def test_decode_step_matches_full_decode(random_model):
    encoder_ids = np.array([[5, 6, 7, 3], [8, 3, 0, 0]], "int32")
    decoder_ids = np.array([[2, 9, 10, 11], [2, 12, 13, 14]], "int32")
    full = keras.ops.convert_to_numpy(log_probs_of(random_model({"encoder_token_ids": encoder_ids,
                                                 "decoder_token_ids": decoder_ids})))
    step = DecoderStep(random_model, encoder_ids, cache_length=6)
    cache = step.cache
    for index in range(4):
        log_probs, cache = step(decoder_ids[:, index], index, cache)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(log_probs), full[:, index], atol=1e-4)


def test_pad_and_start_are_never_generated():
    log_probs = keras.ops.convert_to_numpy(log_probs_of(np.zeros((2, 8), "float32")))
    assert (log_probs[:, :3:2] < -1e8).all()
    np.testing.assert_allclose(np.exp(log_probs).sum(-1), 1.0, rtol=1e-6)
