import keras
import numpy as np
import pytest

from keras_transformer.generation import filter_logits, generate


def test_same_seed_reproduces_and_different_seeds_differ(random_model, source_ids):
    kwargs = dict(method="sample", max_length=10, temperature=2.0, jit_compile=False)
    first = generate(random_model, source_ids, seed=1, **kwargs)
    again = generate(random_model, source_ids, seed=1, **kwargs)
    other = generate(random_model, source_ids, seed=2, **kwargs)
    np.testing.assert_array_equal(first["token_ids"], again["token_ids"])
    assert not np.array_equal(first["token_ids"], other["token_ids"])


@pytest.mark.parametrize("option", [{"top_k": 1}, {"top_p": 1e-6}])
def test_top_k_one_and_tiny_top_p_equal_greedy(random_model, source_ids, option):
    greedy = generate(random_model, source_ids, "greedy", max_length=8, jit_compile=False)
    sampled = generate(random_model, source_ids, "sample", max_length=8, seed=3,
                       jit_compile=False, **option)
    np.testing.assert_array_equal(sampled["token_ids"], greedy["token_ids"])
    np.testing.assert_allclose(sampled["scores"], greedy["scores"], rtol=1e-5)


def test_filter_logits():
    logits = np.log(np.array([[0.1, 0.6, 0.3], [0.5, 0.2, 0.3]], "float32"))
    kept = lambda **kw: (keras.ops.convert_to_numpy(filter_logits(logits, **kw)) > -1e30).tolist()  # noqa: E731
    assert kept(top_k=1) == [[False, True, False], [True, False, False]]
    assert kept(top_p=0.75) == [[False, True, True], [True, False, True]]
    assert kept(top_p=1.0) == [[True] * 3] * 2
    scaled = keras.ops.convert_to_numpy(filter_logits(logits, temperature=2.0))
    np.testing.assert_allclose(scaled, logits / 2)


@pytest.mark.parametrize("temperature", [0, -1.0, "hot", None])
def test_bad_temperature(random_model, source_ids, temperature):
    with pytest.raises(ValueError, match="`temperature` must be a number > 0"):
        generate(random_model, source_ids, "sample", temperature=temperature)
