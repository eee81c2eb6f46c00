"""Fixtures shared across test packages: a tiny prepared data folder."""

import pytest

SENTENCES = [
    ("Der Hund schläft.", "The dog sleeps."),
    ("Die Katze schläft.", "The cat sleeps."),
    ("Der Hund läuft.", "The dog runs."),
    ("Die Katze läuft.", "The cat runs."),
    ("Das Haus ist groß.", "The house is big."),
    ("Das Haus ist klein.", "The house is small."),
    ("Ich bin hier.", "I am here."),
    ("Wir sind hier.", "We are here."),
]


@pytest.fixture(scope="session")
def tiny_data_dir(tmp_path_factory):
    from keras_transformer.data import train_tokenizer, write_tsv

    folder = tmp_path_factory.mktemp("tiny_data")
    pairs = SENTENCES * 8
    write_tsv(folder / "train.tsv", pairs)
    write_tsv(folder / "validation.tsv", SENTENCES[:4])
    write_tsv(folder / "test.tsv", SENTENCES[4:])
    train_tokenizer([text for pair in pairs for text in pair], str(folder / "tokenizer.model"),
                    vocabulary_size=60)
    return str(folder)
