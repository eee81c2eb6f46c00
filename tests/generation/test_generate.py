import importlib

import keras
import numpy as np
import pytest

from keras_transformer.generation import generate
from keras_transformer.generation.generate import _compiled
from keras_transformer.special_tokens import END_ID

# The module (the package's `generate` attribute is the function).
generate_module = importlib.import_module("keras_transformer.generation.generate")


@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
def test_compiled_equals_eager(random_model, source_ids, method):
    kwargs = dict(method=method, max_length=9, seed=5, beam_size=2)
    eager = generate(random_model, source_ids, jit_compile=False, **kwargs)
    compiled = generate(random_model, source_ids, jit_compile=True, **kwargs)
    np.testing.assert_array_equal(compiled["token_ids"], eager["token_ids"])
    np.testing.assert_allclose(compiled["scores"], eager["scores"], atol=1e-4)
    if method == "beam":
        np.testing.assert_array_equal(compiled["nbest_token_ids"], eager["nbest_token_ids"])


def test_compiled_function_is_reused_across_batches(random_model, source_ids):
    # One search per batch here (no smaller second batch), so each bucket traces once.
    generate(random_model, source_ids, max_length=9, shrink_batch=False)  # 3 -> 4 rows
    functions = dict(_compiled[random_model])
    search = functions[("greedy", 16, (("min_length", 1),), True)]
    count = tracing_count(search)
    assert count >= 1 or keras.backend.backend() == "torch"
    generate(random_model, source_ids[::-1, :5].copy(), max_length=12,
             shrink_batch=False)  # same buckets
    generate(random_model, np.concatenate([source_ids, source_ids[:1]]), max_length=5,
             shrink_batch=False)
    assert _compiled[random_model] == functions
    assert tracing_count(search) == count


def tracing_count(search):
    """How often the compiled search was traced (TensorFlow and JAX), else 0."""
    if hasattr(search, "by_shape"):  # TensorFlow: one trace, a concrete function, per shape
        return len(search.by_shape)
    if hasattr(search, "experimental_get_tracing_count"):
        return search.experimental_get_tracing_count()
    compiled = getattr(search, "compiled", None)
    return compiled._cache_size() if compiled is not None else 0


def test_default_max_length_is_input_length_plus_50(random_model, source_ids):
    out = generate(random_model, source_ids, "greedy")
    assert out["max_length"] == 6 + 50
    assert out["token_ids"].shape[1] <= 56 and out["num_steps"] <= 56
    assert generate(random_model, source_ids, max_length_offset=3)["max_length"] == 9


def test_explicit_cap_is_respected(random_model, source_ids):
    for method in ("greedy", "beam"):
        out = generate(random_model, source_ids, method, max_length=4)
        assert out["max_length"] == 4 and out["token_ids"].shape[1] <= 4 and out["num_steps"] <= 4


def test_output_format(trained_model, reference):
    source = reference.batch(np.random.default_rng(7), 5)[0]
    for method in ("greedy", "beam", "sample"):
        out = generate(trained_model, source, method, seed=0)
        tokens = out["token_ids"]
        assert tokens.dtype == np.int32 and tokens.shape[0] == 5
        assert out["scores"].dtype == np.float32 and out["scores"].shape == (5,)
        assert (out["scores"] <= 0).all()
        assert not (tokens == 2).any()  # no start token
        for row in tokens:
            ends = np.flatnonzero(row == 3)
            assert len(ends) == 1  # the copy model always finishes
            assert (row[ends[0] + 1:] == 0).all() and (row[: ends[0]] != 0).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "topk"}, "`method` must be one of"),
        ({"method": "beam", "beam_size": 0}, "`beam_size` must be a positive integer"),
        ({"method": "beam", "beam_size": 30}, "`beam_size` .* at most half"),
        ({"method": "beam", "alpha": -1}, "`alpha` must be"),
        ({"method": "sample", "top_p": 0.0}, r"`top_p` must be in \(0, 1\]"),
        ({"method": "sample", "top_p": 1.5}, r"`top_p` must be in \(0, 1\]"),
        ({"method": "sample", "top_k": 0}, "`top_k` must be a positive integer"),
        ({"max_length": 0}, "`max_length` must be a positive integer"),
        ({"seed": 1.5}, "`seed` must be an int"),
    ],
)
def test_bad_arguments(random_model, source_ids, kwargs, match):
    with pytest.raises(ValueError, match=match):
        generate(random_model, source_ids, **kwargs)


@pytest.mark.parametrize("ids", [np.array([5, 6, 3]), np.ones((1, 2, 3), "int32")])
def test_wrong_rank(random_model, ids):
    with pytest.raises(ValueError, match="`encoder_token_ids` must have rank 2"):
        generate(random_model, ids)


def test_float_ids_are_rejected(random_model):
    with pytest.raises(ValueError, match="integer ids"):
        generate(random_model, np.ones((1, 3), "float32"))


def counting_searches(monkeypatch):
    """Patch `generate` to count its compiled searches' calls; returns the call list."""
    calls = []
    original = generate_module._search_function

    def search_function(*args):
        search = original(*args)

        def counted(encoder_token_ids, *rest):
            calls.append(int(encoder_token_ids.shape[0]))
            return search(encoder_token_ids, *rest)

        return counted

    monkeypatch.setattr(generate_module, "_search_function", search_function)
    return calls


def mixed_batch(rng):
    """28 copy-task sources, which end within 9 steps, and 4 much longer ones."""
    from tests.generation.conftest import VOCABULARY_SIZE, copy_batch

    short = copy_batch(rng, 28)[0]
    long = np.concatenate([rng.integers(4, VOCABULARY_SIZE, (4, 24)),
                           np.full((4, 1), END_ID)], axis=1).astype("int32")
    batch = np.zeros((32, 25), "int32")
    batch[:28, : short.shape[1]] = short
    batch[28:] = long
    return batch[rng.permutation(32)]


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_shrinking_the_batch_gives_the_same_tokens(trained_model, monkeypatch, method):
    batch = mixed_batch(np.random.default_rng(3))
    whole = generate(trained_model, batch, method, shrink_batch=False)
    calls = counting_searches(monkeypatch)
    shrunk = generate(trained_model, batch, method)
    # The long sources were searched again in a smaller batch, and gave the same tokens.
    assert len(calls) >= 2 and calls[0] == 32 and calls[1] <= 8, calls
    np.testing.assert_array_equal(shrunk["token_ids"], whole["token_ids"])
    np.testing.assert_allclose(shrunk["scores"], whole["scores"], atol=1e-4)
    if method == "beam":
        np.testing.assert_array_equal(shrunk["nbest_token_ids"], whole["nbest_token_ids"])
        np.testing.assert_allclose(shrunk["nbest_scores"], whole["nbest_scores"], atol=1e-4)
    assert shrunk["max_length"] == whole["max_length"]


def test_sampling_keeps_its_batch_whole(trained_model, monkeypatch):
    calls = counting_searches(monkeypatch)
    generate(trained_model, mixed_batch(np.random.default_rng(3)), "sample", seed=1)
    assert calls == [32]


def test_shrink_batch_must_be_a_bool(random_model, source_ids):
    with pytest.raises(ValueError, match="shrink_batch"):
        generate(random_model, source_ids, shrink_batch="yes")


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_a_sentence_longer_than_the_first_buffer_is_searched_again(random_model, monkeypatch,
                                                                    method):
    # The random model rarely ends: the first search stops at its short buffer (the
    # source + 8, rounded up to 16) and the sentence is searched again with the whole one.
    source = np.array([[5, 6, 7, 8, 9, 3]], "int32")
    whole = generate(random_model, source, method, max_length=40, shrink_batch=False)
    buffers = []
    original = generate_module._search_function
    monkeypatch.setattr(generate_module, "_search_function",
                        lambda *args: buffers.append(args[2]) or original(*args))
    shrunk = generate(random_model, source, method, max_length=40)
    assert whole["token_ids"].shape[1] > 16  # it ran past the first buffer
    assert buffers == [16, 48], buffers
    np.testing.assert_array_equal(shrunk["token_ids"], whole["token_ids"])
    np.testing.assert_allclose(shrunk["scores"], whole["scores"], atol=1e-4)
