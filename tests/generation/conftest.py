"""Shared models for the generation tests: a random tiny model and a copy-task model."""

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.generation.search_input import DEFAULT_MIN_LENGTH
from keras_transformer.generation.step import masked_logits
from keras_transformer.layers.masking import padding_mask
from keras_transformer.special_tokens import END_ID, PAD_ID, START_ID

VOCABULARY_SIZE = 40


def copy_batch(rng, batch_size, max_length=8):
    """Random sequences of ids 4..V-1 and their copies (with start/end tokens)."""
    lengths = rng.integers(2, max_length + 1, size=batch_size)
    source = np.full((batch_size, max_length + 1), PAD_ID, "int32")
    decoder = np.full((batch_size, max_length + 1), PAD_ID, "int32")
    labels = np.full((batch_size, max_length + 1), PAD_ID, "int32")
    for row, length in enumerate(lengths):
        ids = rng.integers(4, VOCABULARY_SIZE, size=length)
        source[row, : length + 1] = [*ids, END_ID]
        decoder[row, : length + 1] = [START_ID, *ids]
        labels[row, : length + 1] = [*ids, END_ID]
    return source, decoder, labels


@pytest.fixture(scope="session")
def random_model():
    keras.utils.set_random_seed(0)
    return kt.build_transformer("tiny", vocabulary_size=VOCABULARY_SIZE, dropout=0.0)


@pytest.fixture(scope="session")
def trained_model():
    """A tiny model trained for a few seconds to copy its input."""
    keras.utils.set_random_seed(1)
    model = kt.build_transformer("tiny", vocabulary_size=VOCABULARY_SIZE, dropout=0.0,
                                 num_layers=1)
    kt.compile_transformer(model, warmup_steps=100, learning_rate_scale=1.0,
                           label_smoothing=0.0)
    source, decoder, labels = copy_batch(np.random.default_rng(0), 4096)
    model.fit({"encoder_token_ids": source, "decoder_token_ids": decoder}, labels,
              batch_size=64, epochs=4, verbose=0)
    return model


@pytest.fixture()
def source_ids():
    return np.array([[5, 6, 7, 8, 9, 3], [10, 11, 12, 3, 0, 0], [13, 3, 0, 0, 0, 0]], "int32")


def repeating_tokens(output, size):
    """The tokens that would repeat an n-gram of `output` (a list of ids), the plain way."""
    if len(output) < size:
        return set()
    seen = {tuple(output[i:i + size]) for i in range(len(output) - size + 1)}
    prefix = tuple(output[len(output) - size + 1:])
    return {ngram[-1] for ngram in seen if ngram[:-1] == prefix}


def reference_log_probs(logits, first_position=0, min_length=DEFAULT_MIN_LENGTH):
    """Float64 log-probabilities of `logits` `(B, T, V)` whose position `t` is output
    position `first_position + t`: padding and start masked, and the end token too at
    output positions below `min_length` (all before the softmax, NumPy only)."""
    logits = np.array(keras.ops.convert_to_numpy(masked_logits(logits)), "float64")
    positions = first_position + np.arange(logits.shape[1])
    logits[:, positions < min_length, END_ID] = -np.inf
    top = logits.max(-1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))


def uncached_greedy(model, encoder_token_ids, max_length, no_repeat_ngram_size=None,
                    min_length=DEFAULT_MIN_LENGTH):
    """Greedy decoding the slow way: a full decoder pass over the prefix at every step
    (with n-gram blocking by `repeating_tokens`, start token included)."""
    encoder_sequence = model.encode(encoder_token_ids)
    mask = padding_mask(encoder_token_ids)
    batch_size = len(encoder_token_ids)
    tokens = np.full((batch_size, 1), START_ID, "int32")
    finished = np.zeros(batch_size, bool)
    log_probs = []
    for position in range(max_length):
        logits = model.decode(tokens, encoder_sequence, mask)[:, -1:]
        step_log_probs = reference_log_probs(logits, position, min_length)[:, 0]
        if no_repeat_ngram_size:
            for row in range(batch_size):
                for token in repeating_tokens(list(tokens[row]), no_repeat_ngram_size):
                    step_log_probs[row, token] = -1e9
        next_tokens = np.where(finished, PAD_ID, step_log_probs.argmax(-1)).astype("int32")
        log_probs.append(np.where(finished, 0.0, step_log_probs[np.arange(batch_size),
                                                                 next_tokens]))
        tokens = np.concatenate([tokens, next_tokens[:, None]], axis=1)
        finished |= next_tokens == END_ID
        if finished.all():
            break
    return tokens[:, 1:], np.stack(log_probs, axis=1)


def sequence_log_prob(model, encoder_token_ids, output_ids, min_length=DEFAULT_MIN_LENGTH):
    """Summed log-probability of each output `(B, L)` (teacher forcing, stops at PAD)."""
    decoder = np.concatenate(
        [np.full((len(output_ids), 1), START_ID, "int32"), output_ids[:, :-1]], axis=1)
    logits = model({"encoder_token_ids": encoder_token_ids, "decoder_token_ids": decoder})
    log_probs = reference_log_probs(logits, 0, min_length)
    picked = np.take_along_axis(log_probs, output_ids[..., None], axis=-1)[..., 0]
    return np.where(output_ids != PAD_ID, picked, 0.0).sum(-1)


@pytest.fixture(scope="session")
def reference():
    """The slow reference functions, for tests (conftest is not importable by name)."""

    class Reference:
        greedy = staticmethod(uncached_greedy)
        log_prob = staticmethod(sequence_log_prob)
        batch = staticmethod(copy_batch)
        repeating_tokens = staticmethod(repeating_tokens)

    return Reference
