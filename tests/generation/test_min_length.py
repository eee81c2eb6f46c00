"""`min_length`: no output ends before it, for every method; scores stay log P(Y | X)."""

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.generation import generate
from keras_transformer.special_tokens import END_ID, PAD_ID

VOCABULARY_SIZE = 40


@pytest.fixture(scope="module")
def end_first_model():
    """A tiny model whose most probable first token is the end token (a weak model's
    empty translation), through a large end-token bias on the logits."""
    keras.utils.set_random_seed(3)
    model = kt.build_transformer("tiny", vocabulary_size=VOCABULARY_SIZE, dropout=0.0,
                                 num_layers=1, output_bias=True)
    bias = np.zeros(VOCABULARY_SIZE, "float32")
    bias[END_ID] = 6.0
    model.get_layer("token_embedding").logits_bias.assign(bias)
    return model


SOURCES = np.array([[5, 6, 7, 8, 9, 3], [10, 11, 12, 3, 0, 0], [13, 3, 0, 0, 0, 0]], "int32")


def _output_lengths(token_ids):
    """Tokens before the end token of each row (the whole row when it has none)."""
    return [int(np.argmax(row == END_ID)) if (row == END_ID).any() else int(np.sum(row != PAD_ID))
            for row in token_ids]


@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
def test_min_length_zero_lets_the_end_come_first(end_first_model, method):
    out = generate(end_first_model, SOURCES, method, max_length=8, seed=1, min_length=0)
    # Without the minimum the end token wins at once: the test's premise.
    assert _output_lengths(out["token_ids"]) == [0, 0, 0]


@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
@pytest.mark.parametrize("min_length", [1, 3])
def test_no_output_ends_before_min_length(end_first_model, method, min_length):
    out = generate(end_first_model, SOURCES, method, max_length=8, seed=1,
                   min_length=min_length)
    lengths = _output_lengths(out["token_ids"])
    assert min(lengths) >= min_length
    if method != "sample":  # the end is still the likeliest token right after the minimum
        assert lengths == [min_length] * len(SOURCES)


def test_the_default_is_one(end_first_model):
    out = generate(end_first_model, SOURCES, "beam", max_length=8)
    assert _output_lengths(out["token_ids"]) == [1, 1, 1]


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_scores_mask_the_end_before_the_softmax(end_first_model, method):
    """While held back, the end token's logit is masked before the softmax (as
    CTranslate2 does): by hand, each score is the sum of the teacher-forced
    log-probabilities with the end token out of the first `min_length` softmaxes."""
    from keras_transformer.generation.step import masked_logits
    from keras_transformer.special_tokens import START_ID

    min_length = 2
    out = generate(end_first_model, SOURCES, method, max_length=8, min_length=min_length,
                   alpha=0.0, jit_compile=False)
    tokens = out["token_ids"]
    decoder = np.concatenate([np.full((len(tokens), 1), START_ID, "int32"), tokens[:, :-1]], 1)
    logits = np.array(keras.ops.convert_to_numpy(masked_logits(end_first_model(
        {"encoder_token_ids": SOURCES, "decoder_token_ids": decoder}))), "float64")
    logits[:, :min_length, END_ID] = -np.inf
    log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(
        -1, keepdims=True)) - logits.max(-1, keepdims=True)
    picked = np.take_along_axis(log_probs, tokens[..., None], axis=-1)[..., 0]
    expected = np.where(tokens != PAD_ID, picked, 0.0).sum(-1)
    np.testing.assert_allclose(out["scores"], expected, atol=1e-4)


def test_the_limit_wins_over_the_minimum(end_first_model):
    out = generate(end_first_model, SOURCES, "greedy", max_length=3, min_length=5,
                   force_end=True)
    assert [list(row) for row in out["token_ids"][:, 2:3]] == [[END_ID]] * 3


@pytest.mark.parametrize("bad", [-1, 1.5, True, "1"])
def test_bad_min_length_is_named(end_first_model, bad):
    with pytest.raises(ValueError, match="min_length"):
        generate(end_first_model, SOURCES, "greedy", min_length=bad)
