import numpy as np
import pytest

from keras_transformer.generation import generate, length_penalty


def test_length_penalty_is_gnmt():
    for length in (1, 4, 20):
        expected = ((5 + length) / 6) ** 0.6
        np.testing.assert_allclose(float(length_penalty(length, 0.6)), expected, rtol=1e-6)
    assert float(length_penalty(9, 0.0)) == 1.0


@pytest.mark.parametrize("model_name", ["random_model", "trained_model"])
def test_beam_size_one_equals_greedy(request, reference, source_ids, model_name):
    model = request.getfixturevalue(model_name)
    if model_name == "trained_model":
        source_ids = reference.batch(np.random.default_rng(4), 4)[0]
    greedy = generate(model, source_ids, "greedy", max_length=10, jit_compile=False)
    beam = generate(model, source_ids, "beam", beam_size=1, max_length=10, jit_compile=False)
    np.testing.assert_array_equal(beam["token_ids"], greedy["token_ids"])
    lengths = np.sum(greedy["token_ids"] != 0, axis=1)
    penalty = ((5 + lengths) / 6) ** 0.6
    np.testing.assert_allclose(beam["scores"] * penalty, greedy["scores"], rtol=1e-5, atol=1e-5)


def test_beam_scores_are_rescored_log_probs_and_sorted(random_model, reference, source_ids):
    out = generate(random_model, source_ids, "beam", beam_size=3, max_length=8,
                   jit_compile=False)
    batch_size, beam_size, length = out["nbest_token_ids"].shape
    assert (batch_size, beam_size) == (3, 3) and out["nbest_scores"].shape == (3, 3)
    assert (np.diff(out["nbest_scores"], axis=1) <= 1e-6).all()  # best first
    np.testing.assert_array_equal(out["token_ids"], out["nbest_token_ids"][:, 0])
    flat = out["nbest_token_ids"].reshape(batch_size * beam_size, length)
    log_probs = reference.log_prob(random_model, np.repeat(source_ids, beam_size, 0), flat)
    lengths = np.sum(flat != 0, axis=1)
    rescored = (log_probs / ((5 + lengths) / 6) ** 0.6).reshape(batch_size, beam_size)
    np.testing.assert_allclose(out["nbest_scores"], rescored, atol=1e-4)
    assert len({tuple(row) for row in flat[:beam_size]}) == beam_size  # distinct hypotheses


def test_beam_is_at_least_as_good_as_greedy(random_model, reference, source_ids):
    greedy = generate(random_model, source_ids, "greedy", max_length=8, jit_compile=False)
    beam = generate(random_model, source_ids, "beam", max_length=8, jit_compile=False)
    lengths = np.sum(greedy["token_ids"] != 0, axis=1)
    greedy_scores = greedy["scores"] / ((5 + lengths) / 6) ** 0.6
    assert (beam["scores"] >= greedy_scores - 1e-5).all()


def test_beam_stops_early_when_every_beam_has_finished(trained_model, reference):
    source = reference.batch(np.random.default_rng(6), 4)[0]
    out = generate(trained_model, source, "beam", jit_compile=False)
    assert out["max_length"] == np.sum(source != 0, axis=1).max() + 50
    assert out["num_steps"] < out["max_length"] // 2
    # Every sentence is done: its best hypothesis finished (the others may be live ones
    # that could no longer beat it).
    assert (out["token_ids"] == 3).any(axis=1).all()
