"""The decoding options imported models bring: Hugging Face's length penalty, banned
ids and a forced end, each checked by hand."""

import numpy as np
import pytest

from keras_transformer.generation import generate
from keras_transformer.generation.beam_search import penalty
from keras_transformer.special_tokens import END_ID, PAD_ID


def test_average_penalty_is_length_to_alpha():
    for length, alpha in ((1, 1.0), (7, 1.0), (7, 0.5), (12, 0.0)):
        np.testing.assert_allclose(float(penalty(length, alpha, "average")), length**alpha,
                                   rtol=1e-6)


def test_average_beam_scores_are_log_probs_over_length(random_model, reference, source_ids):
    out = generate(random_model, source_ids, "beam", beam_size=3, max_length=8, alpha=1.0,
                   length_penalty="average", jit_compile=False)
    batch_size, beam_size, length = out["nbest_token_ids"].shape
    flat = out["nbest_token_ids"].reshape(batch_size * beam_size, length)
    log_probs = reference.log_prob(random_model, np.repeat(source_ids, beam_size, 0), flat)
    lengths = np.sum(flat != PAD_ID, axis=1)
    np.testing.assert_allclose(out["nbest_scores"],
                               (log_probs / lengths).reshape(batch_size, beam_size), atol=1e-4)


def test_unknown_length_penalty_is_named(random_model, source_ids):
    with pytest.raises(ValueError, match="length_penalty"):
        generate(random_model, source_ids, "beam", length_penalty=1.0)


@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
def test_banned_ids_are_never_generated(random_model, source_ids, method):
    free = generate(random_model, source_ids, method, max_length=12, seed=3)["token_ids"]
    common = [int(i) for i in np.unique(free) if i not in (PAD_ID, END_ID)][:3]
    assert common, "the unbanned output must use some ids for this test to mean anything"
    out = generate(random_model, source_ids, method, max_length=12, seed=3, banned_ids=common)
    assert not np.isin(out["token_ids"], common).any()


@pytest.mark.parametrize("bad", [[END_ID], [-1], [10_000], "5", [True]])
def test_bad_banned_ids_are_named(random_model, source_ids, bad):
    with pytest.raises(ValueError, match="banned_ids"):
        generate(random_model, source_ids, "greedy", banned_ids=bad)


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_force_end_ends_every_output_by_the_limit(random_model, source_ids, method):
    banned = list(range(4, 40, 2))  # fewer ways out, so some outputs reach the limit
    loose = generate(random_model, source_ids, method, max_length=5, banned_ids=banned)
    forced = generate(random_model, source_ids, method, max_length=5, banned_ids=banned,
                      force_end=True)
    ended = (forced["token_ids"] == END_ID).any(axis=1)
    assert ended.all()
    # Outputs that ended before the limit are the same either way.
    for loose_row, forced_row in zip(loose["token_ids"], forced["token_ids"], strict=True):
        if (loose_row == END_ID).any():
            np.testing.assert_array_equal(loose_row, forced_row)
    assert not (loose["token_ids"] == END_ID).any(axis=1).all(), (
        "some unforced output must reach the limit for this test to mean anything")
