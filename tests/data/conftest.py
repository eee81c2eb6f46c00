"""Fixtures for the data tests: a small inline corpus and, where installed, the real one."""

import os

import pytest

from keras_transformer.data import default_ding_path, load_ding, split_pairs, train_tokenizer

# A few dozen pairs written here, so unit tests need no corpus package.
SMALL_PAIRS = [
    ("Guter Wein muss reifen.", "Good wine needs to mellow."),
    ("Wie spät ist es?", "What time is it?"),
    ("Er ist krank.", "He is ill."),
    ("Ich bin hier.", "I am here."),
    ("Komm sofort her!", "Come here at once!"),
    ("Das Wetter ist heute schön.", "The weather is nice today."),
    ("Wo ist der Bahnhof?", "Where is the station?"),
    ("Ich habe keine Zeit.", "I have no time."),
    ("Der Hund schläft im Garten.", "The dog is sleeping in the garden."),
    ("Sie liest ein Buch.", "She is reading a book."),
    ("Wir fahren morgen nach Berlin.", "We are going to Berlin tomorrow."),
    ("Das ist eine gute Idee.", "That is a good idea."),
    ("Kannst du mir helfen?", "Can you help me?"),
    ("Die Kinder spielen draußen.", "The children are playing outside."),
    ("Ich trinke gern Kaffee.", "I like drinking coffee."),
    ("Hund", "dog"),
    ("Hunde", "dogs"),
    ("Katze", "cat"),
    ("Katzen", "cats"),
    ("Haus", "house"),
    ("Häuser", "houses"),
    ("Wein", "wine"),
    ("Zeit", "time"),
    ("schön", "beautiful"),
    ("reifen", "to mellow"),
    ("ein gutes Buch", "a good book"),
    ("im Garten", "in the garden"),
    ("nach Hause gehen", "to go home"),
    ("zu spät kommen", "to be late"),
    ("am Bahnhof", "at the station"),
]


@pytest.fixture(scope="session")
def small_pairs():
    return list(SMALL_PAIRS)


@pytest.fixture(scope="session")
def small_tokenizer(tmp_path_factory):
    texts = [text for pair in SMALL_PAIRS for text in pair]
    path = tmp_path_factory.mktemp("small_tokenizer") / "tokenizer.model"
    return train_tokenizer(texts, str(path), vocabulary_size=200)


@pytest.fixture(scope="session")
def ding_path():
    path = default_ding_path()
    if not os.path.isfile(path):
        pytest.skip(
            f"The Ding corpus is not installed at {path}: run `apt-get install trans-de-en` "
            "or set KT_CORPUS."
        )
    return path


@pytest.fixture(scope="session")
def real_pairs(ding_path):
    return load_ding(ding_path)


@pytest.fixture(scope="session")
def real_splits(real_pairs):
    return split_pairs(real_pairs)


@pytest.fixture(scope="session")
def real_tokenizer(real_splits, tmp_path_factory):
    """The 8,000-piece tokenizer, trained once per session on (a sample of) the train split."""
    texts = [text for pair in real_splits["train"] for text in pair]
    path = tmp_path_factory.mktemp("real_tokenizer") / "tokenizer.model"
    return train_tokenizer(texts, str(path), vocabulary_size=8000, input_sentence_size=200_000)
