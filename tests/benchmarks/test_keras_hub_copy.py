"""`keras_hub_copy_of`: the KerasHub baseline holding our weights computes our logits."""

import os
import sys

import numpy as np
import pytest

BENCHMARKS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
sys.path.insert(0, BENCHMARKS)

pytestmark = pytest.mark.slow

VOCABULARY_SIZE = 50
MAX_LENGTH = 8  # generated tokens, end token included
CONFIGS = [(normalize_first, position)
           for normalize_first in (False, True) for position in ("sinusoidal", "learned")]


def config_id(config):
    return f"{'pre' if config[0] else 'post'}-LN-{config[1]}"


@pytest.fixture(scope="module", params=CONFIGS, ids=config_id)
def models(request):
    """A tiny model with random weights (not its initializers'), and its KerasHub copy."""
    from keras_hub_baseline import keras_hub_copy_of

    import keras_transformer as kt

    normalize_first, position_embedding = request.param
    model = kt.build_transformer("tiny", vocabulary_size=VOCABULARY_SIZE, dropout=0.0,
                                 normalize_first=normalize_first,
                                 position_embedding=position_embedding, max_sequence_length=32)
    randomize(model, np.random.default_rng(request.param_index))
    return model, keras_hub_copy_of(model)


def randomize(model, rng):
    """Random weights: layer-norm scales near 1, every bias and shift non-zero."""
    for variable in model.weights:
        shape = tuple(variable.shape)
        if variable.path.endswith("gamma"):
            value = 1.0 + rng.normal(0.0, 0.1, shape)
        elif variable.path.endswith(("beta", "bias")):
            value = rng.normal(0.0, 0.1, shape)
        elif variable.path.endswith("embeddings"):
            value = rng.normal(0.0, 1.0, shape)
        else:
            value = rng.normal(0.0, shape[0] ** -0.5, shape)
        variable.assign(value.astype("float32"))


def sources(rng, batch_size=4, length=9, end=True):
    """Random source ids, padded (no row is all padding), each ending with END_ID if `end`."""
    ids = rng.integers(4, VOCABULARY_SIZE, (batch_size, length)).astype("int32")
    for row, size in enumerate(rng.integers(2, length + 1, batch_size)):
        ids[row, size:] = 0
        if end:
            ids[row, size - 1] = 3
    return ids


def test_copy_computes_our_logits(models):
    model, copy = models
    rng = np.random.default_rng(1)
    decoder = sources(rng, length=7)
    decoder[:, 0] = 2
    ids = {"encoder_token_ids": sources(rng), "decoder_token_ids": decoder}
    ours = np.asarray(model(ids))
    theirs = np.asarray(copy(ids))
    assert theirs.dtype == np.float32 and theirs.shape == ours.shape
    assert np.abs(ours).max() > 1.0  # random weights: logits far from trivial
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=1e-4)


def test_keras_hub_greedy_sampler_gives_our_greedy_tokens(models):
    from keras_hub_baseline import keras_hub_copy_of, sampler_search

    import keras_transformer as kt
    from keras_transformer.generation import generate

    trained, _ = models
    model = kt.Transformer.from_config(trained.get_config())
    model.set_weights(trained.get_weights())
    source = sources(np.random.default_rng(2), batch_size=6, end=False)
    # A random model hardly ever ends: make END the twin (a little longer) of the token
    # that row 0 emits last. The sources hold no END, so every search runs as before up
    # to that token's first appearance, then ends there (row 0 at least).
    probe = generate(model, source, "greedy", max_length=MAX_LENGTH, jit_compile=False)
    embeddings = np.array(model.token_embedding.embeddings)
    embeddings[kt.END_ID] = 1.05 * embeddings[probe["token_ids"][0, -1]]
    model.token_embedding.embeddings.assign(embeddings)
    # KerasHub's sampler may end at the first step: so may ours, with `min_length=0`.
    ours = generate(model, source, "greedy", max_length=MAX_LENGTH, min_length=0,
                    jit_compile=False)["token_ids"]
    assert kt.END_ID in ours[0].tolist()

    # Our greedy search never emits PAD or START; KerasHub's sampler has no such option,
    # so a copy whose output bias rules them out stands for it.
    copy = keras_hub_copy_of(model)
    bias = copy.decoder.get_layer("output").bias
    bias.assign(np.where(np.isin(np.arange(VOCABULARY_SIZE), [kt.PAD_ID, kt.START_ID]),
                         -1e9, 0.0).astype("float32"))
    for cached in (False, True):
        theirs = sampler_search(copy, "greedy", cached=cached)(source, MAX_LENGTH + 1)
        assert theirs.shape == (len(source), MAX_LENGTH)
        for row, mine in enumerate(ours.tolist()):
            mine = mine[: mine.index(kt.END_ID) + 1] if kt.END_ID in mine else mine
            assert theirs[row, : len(mine)].tolist() == mine, (cached, row)


def test_copy_refuses_more_positions_than_a_learned_table():
    from keras_hub_baseline import keras_hub_copy_of

    import keras_transformer as kt

    model = kt.build_transformer("tiny", vocabulary_size=VOCABULARY_SIZE, num_layers=1,
                                 position_embedding="learned", max_sequence_length=16)
    with pytest.raises(ValueError, match="max_sequence_length"):
        keras_hub_copy_of(model, max_sequence_length=32)
