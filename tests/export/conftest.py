"""A tiny trained model directory and its SavedModel, shared by the export tests."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.data.tokenizer import train_tokenizer
from keras_transformer.export import export_saved_model
from keras_transformer.generation import Translator
from keras_transformer.special_tokens import END_ID, PAD_ID, START_ID

SENTENCES = [
    "Guten Morgen.", "Good morning.", "Wie geht es dir?", "How are you?",
    "Ich habe einen Hund.", "I have a dog.", "Das Wetter ist schön.", "The weather is nice.",
    "Wir gehen nach Hause.", "We are going home.", "Der Zug ist spät.", "The train is late.",
    "Sie liest ein Buch.", "She reads a book.", "Er trinkt Kaffee.", "He drinks coffee.",
    "Die Katze schläft.", "The cat is sleeping.", "Es regnet heute.", "It is raining today.",
    "Ich lerne Deutsch.", "I am learning German.", "Das Haus ist groß.", "The house is big.",
    "Wo ist der Bahnhof?", "Where is the station?", "Guter Wein muss reifen.",
    "Good wine must mature.", "Danke schön.", "Thank you very much.", "Bis morgen!",
    "See you tomorrow!", "Das Essen ist kalt.", "The food is cold.", "Mein Bruder kocht.",
    "My brother cooks.",
]
# Settings shared by the exported SavedModel and the in-Python `Translator`.
BEAM_SIZE = 2
MAX_LENGTH = 20
MAX_SEQUENCE_LENGTH = 24


def write_model_dir(directory):
    """Write a model directory as training does, with a tiny model fit briefly to copy."""
    tokenizer = train_tokenizer(SENTENCES, path=str(directory / "tokenizer.model"),
                                vocabulary_size=80)
    # Tokenize first: `set_random_seed` clears TensorFlow's eager resources, the
    # SentencePiece resource of `tokenizer` included.
    ids = tokenizer.tokenize(SENTENCES).to_list()
    keras.utils.set_random_seed(0)
    model = kt.build_transformer("tiny", vocabulary_size=tokenizer.vocabulary_size,
                                 dropout=0.0, num_layers=1)
    kt.compile_transformer(model, warmup_steps=50, learning_rate_scale=1.0,
                           label_smoothing=0.0)
    width = max(len(row) for row in ids) + 1
    source = np.full((len(ids), width), PAD_ID, "int32")
    decoder = np.full((len(ids), width), PAD_ID, "int32")
    for row, pieces in enumerate(ids):
        source[row, : len(pieces) + 1] = [*pieces, END_ID]
        decoder[row, : len(pieces) + 1] = [START_ID, *pieces]
    model.fit({"encoder_token_ids": source, "decoder_token_ids": decoder}, source,
              batch_size=12, epochs=10, verbose=0)
    model.save(str(directory / "model.keras"))
    with open(directory / "config.json", "w") as file:
        json.dump({"max_sequence_length": MAX_SEQUENCE_LENGTH}, file)
    return str(directory)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return write_model_dir(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="session")
def translator(model_dir):
    return Translator.from_directory(model_dir, method="beam",
                                                   beam_size=BEAM_SIZE, max_length=MAX_LENGTH)


@pytest.fixture(scope="session")
def export_dir(translator, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("export") / "1")
    return export_saved_model(translator, path, beam_size=BEAM_SIZE,
                                        max_length=MAX_LENGTH)


def run_tensorflow_only(script, *args, timeout=240):
    """Run `script` in a fresh Python that imports tensorflow and tensorflow_text only."""
    # `keras_transformer` is made unimportable. (TensorFlow itself imports parts of
    # the installed Keras on `import tensorflow`; the script never does.)
    prelude = (
        "import os, sys, json\n"
        "sys.modules['keras_transformer'] = None\n"
        "import tensorflow as tf\nimport tensorflow_text  # noqa\n"
    )
    check = ("\nassert 'keras_transformer' not in "
             "{m.split('.')[0] for m in sys.modules if sys.modules[m]}\n")
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run([sys.executable, "-c", prelude + script + check, *args],
                            capture_output=True, text=True, timeout=timeout, env=environment)
    if result.returncode != 0:
        raise AssertionError(f"subprocess failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return result.stdout
