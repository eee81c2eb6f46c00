"""`no_repeat_ngram_size`: checked against a plain-Python rule and an uncached greedy loop."""

import numpy as np
import pytest

from keras_transformer.generation import generate
from keras_transformer.generation.ngram_blocking import block_repeated_ngrams
from keras_transformer.special_tokens import END_ID, PAD_ID


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_banned_tokens_are_those_of_the_plain_rule(size, reference):
    rng = np.random.default_rng(size)
    vocabulary_size, width = 7, 12
    tokens = rng.integers(2, 6, size=(16, width)).astype("int32")  # few ids: many repeats
    for index in range(width):
        out = np.asarray(block_repeated_ngrams(np.zeros((16, vocabulary_size), "float32"),
                                               tokens, index, size))
        for row in range(16):
            expected = reference.repeating_tokens(list(tokens[row, :index + 1]), size)
            assert set(np.flatnonzero(out[row] < -1e8)) == expected, (row, index)


def test_off_returns_the_scores_unchanged():
    scores = np.arange(6, dtype="float32").reshape(2, 3)
    assert block_repeated_ngrams(scores, np.ones((2, 4), "int32"), 3, None) is scores


def _has_repeat(row, size):
    ids = [int(t) for t in row if t not in (PAD_ID, END_ID)]
    ngrams = [tuple(ids[i:i + size]) for i in range(len(ids) - size + 1)]
    return len(ngrams) != len(set(ngrams))


def test_greedy_equals_the_uncached_loop_with_the_plain_rule(random_model, reference):
    ids = np.array([[5, 6, 7, 8, 9, 3], [10, 11, 3, 0, 0, 0]], "int32")
    for size in (1, 2, 3):
        out = generate(random_model, ids, "greedy", max_length=12, no_repeat_ngram_size=size)
        expected, _ = reference.greedy(random_model, ids, 12, no_repeat_ngram_size=size)
        np.testing.assert_array_equal(out["token_ids"], expected[:, :out["token_ids"].shape[1]])


@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
def test_no_output_repeats_an_ngram(random_model, method):
    ids = np.array([[5, 6, 7, 8, 9, 3], [10, 11, 3, 0, 0, 0], [13, 3, 0, 0, 0, 0]], "int32")
    plain = generate(random_model, ids, method, max_length=20, seed=3)
    blocked = generate(random_model, ids, method, max_length=20, seed=3,
                       no_repeat_ngram_size=2)
    assert any(_has_repeat(row, 2) for row in plain["token_ids"])  # the untrained model loops
    assert not any(_has_repeat(row, 2) for row in blocked["token_ids"])
    if method == "beam":
        assert not any(_has_repeat(row, 2) for rows in blocked["nbest_token_ids"]
                       for row in rows)


@pytest.mark.parametrize("value", [-1, 2.0, True, "3"])
def test_bad_sizes_name_the_argument(random_model, value):
    with pytest.raises(ValueError, match="no_repeat_ngram_size"):
        generate(random_model, np.array([[5, 3]]), no_repeat_ngram_size=value)
