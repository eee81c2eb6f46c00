"""`keras.utils.set_random_seed` may come before or after the tokenizer's first use.

Setting a seed clears TensorFlow's eager kernel cache; the SentencePiece resource that
`tf.data` pipelines and traced functions hold must survive it.
"""

import keras
import pytest
import tensorflow as tf

from keras_transformer.data import make_dataset, train_tokenizer
from keras_transformer.special_tokens import END_ID, START_ID

PAIRS = [("Guten Tag.", "Good day.")] * 4


@pytest.fixture
def tokenizer():
    return train_tokenizer(["Guten Tag.", "Good day.", "Danke.", "Thanks."] * 5,
                           vocabulary_size=40)


def _expected(tokenizer):
    source, target = (tokenizer.encode_as_ids([text])[0] for text in PAIRS[0])
    return source + [END_ID], [START_ID] + target, target + [END_ID]


def _first_batch(dataset):
    features, labels = next(iter(dataset))
    rows = features["encoder_token_ids"], features["decoder_token_ids"], labels
    return [row.numpy().tolist() for row in rows]


def _make(tokenizer):
    return make_dataset(PAIRS, tokenizer, tokens_per_batch=64, max_sequence_length=16,
                        seed=0)


@pytest.mark.parametrize("seed_first", [False, True], ids=["dataset_first", "seed_first"])
def test_make_dataset_survives_set_random_seed(tokenizer, seed_first):
    if seed_first:
        keras.utils.set_random_seed(0)
    dataset = _make(tokenizer)
    if not seed_first:
        keras.utils.set_random_seed(0)  # clears the eager kernel cache
    batch = _first_batch(dataset)
    assert batch == [[row] * len(PAIRS) for row in _expected(tokenizer)]
    keras.utils.set_random_seed(1)  # a second pass, after another seed
    assert _first_batch(dataset) == batch


def test_traced_functions_and_two_models_survive_set_random_seed(tokenizer):
    other = train_tokenizer(["Wie spät ist es?", "What time is it?"] * 10, vocabulary_size=40)
    round_trip = tf.function(lambda strings: tokenizer.detokenize(tokenizer.tokenize(strings)))
    other_ids = tf.function(lambda strings: other.tokenize(strings))
    assert round_trip(tf.constant(["Danke."])).numpy().tolist() == [b"Danke."]
    expected = other.encode_as_ids(["Wie spät ist es?"])
    assert other_ids(tf.constant(["Wie spät ist es?"])).to_list() == expected
    keras.utils.set_random_seed(0)
    assert round_trip(tf.constant(["Danke."])).numpy().tolist() == [b"Danke."]
    assert other_ids(tf.constant(["Wie spät ist es?"])).to_list() == expected
    assert tokenizer.tokenize(["Danke."]).to_list() == tokenizer.encode_as_ids(["Danke."])
