"""The file names inside a prepared data folder and a model folder, in one place.

A data folder (`keras-transformer prepare --output DIR`) holds the splits, the tokenizer
and the report; a model folder (`keras-transformer train --output DIR`) holds the model,
a copy of the tokenizer, the training settings, checkpoints, the backup that resumes a
run, TensorBoard logs and the loss history.

Example:
>>> import os
>>> os.path.join("runs/demo/model", MODEL_FILE)
'runs/demo/model/model.keras'
"""

import os

# A data folder.
TRAIN_FILE = "train.tsv"
VALIDATION_FILE = "validation.tsv"
TEST_FILE = "test.tsv"
REPORT_FILE = "report.json"
TOKENS_FILE = "tokens.json"  # the tokenized splits (see `data.token_store`)
TOKENIZER_FILE = "tokenizer.model"  # in a model folder too

# A model folder.
MODEL_FILE = "model.keras"
UNAVERAGED_MODEL_FILE = "model.unaveraged.keras"
CONFIG_FILE = "config.json"
CHECKPOINTS_DIR = "checkpoints"
BACKUP_DIR = "backup"
LOGS_DIR = "logs"
HISTORY_FILE = "history.csv"
EVALUATION_FILE = "eval-test.json"


def check_model_folder(directory, argument="directory"):
    """Raise a `FileNotFoundError` naming `argument` unless `directory` is a model folder
    (a folder holding model.keras and tokenizer.model)."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(
            f"`{argument}` is not a folder. Pass a model folder written by training "
            f"(model.keras, tokenizer.model, config.json). Received: {argument}={directory!r}"
        )
    from keras_transformer.data.tokenizer_files import has_tokenizer

    for name in (MODEL_FILE, TOKENIZER_FILE):
        if name == TOKENIZER_FILE and has_tokenizer(directory):
            continue
        if not os.path.isfile(os.path.join(directory, name)):
            raise FileNotFoundError(
                f"`{name}` not found in `{argument}`. A model folder written by training "
                f"holds model.keras, tokenizer.model and config.json. "
                f"Received: {argument}={directory!r}"
            )
