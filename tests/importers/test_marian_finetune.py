"""An imported OPUS-MT model is an ordinary model folder: prepare with its tokenizer,
fine-tune it (the loss falls), resume, translate and export it (TensorFlow)."""

import json
import os

import keras
import numpy as np
import pytest

pytest.importorskip("transformers")

from keras_transformer.data import write_tsv  # noqa: E402
from keras_transformer.data.prepare import prepare  # noqa: E402
from keras_transformer.data.tokenizer_files import tokenizer_md5  # noqa: E402
from keras_transformer.generation import Translator, generate  # noqa: E402
from keras_transformer.importers import import_marian  # noqa: E402
from keras_transformer.training import train  # noqa: E402
from tests.conftest import SENTENCES  # noqa: E402
from tests.importers.marian_fixtures import write_marian_snapshot  # noqa: E402

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                reason="training and the SavedModel run on TensorFlow here")

RECIPE = dict(tokens_per_batch=256, max_sequence_length=32, checkpoint_every=5,
              bleu_every=0, verbose=0, warmup_steps=10, learning_rate_scale=2.0)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune")
    snapshot = write_marian_snapshot(root / "snapshot", shared=False, init_std=0.3)
    imported = str(root / "imported")
    import_marian(snapshot, imported)
    corpus = str(root / "pairs.tsv")
    write_tsv(corpus, SENTENCES)
    held_out = {}
    for split, pair in (("validation", ("Der Hund ist hier.", "The dog is here.")),
                        ("test", ("Die Katze ist klein.", "The cat is small."))):
        held_out[split] = []
        for side, text in zip(("source", "target"), pair, strict=True):
            path = str(root / f"{split}.{side}")
            with open(path, "w", encoding="utf-8") as file:
                file.write(text + "\n")
            held_out[split].append(path)
    data = str(root / "data")
    prepare(data, tsv=[corpus], tokenizer=imported, tokens_per_batch=256,
            max_sequence_length=32, progress=False, validation=tuple(held_out["validation"]),
            test=tuple(held_out["test"]))
    return imported, data, str(root / "tuned")


def test_prepare_uses_the_imported_tokenizer(folders):
    imported, data, _ = folders
    assert tokenizer_md5(data) == tokenizer_md5(imported)
    assert not os.path.exists(os.path.join(data, "tokenizer.model"))
    with open(os.path.join(data, "tokens.json")) as file:
        assert json.load(file)["splits"]["train"]["pairs"] > 0


def test_fine_tuning_lowers_the_loss_and_resumes(folders):
    imported, data, tuned = folders
    first = train(data, tuned, initial_model=imported, max_steps=1, **RECIPE)
    assert first["step"] == 1
    # The first step starts from the imported weights, not from a fresh model.
    start = keras.models.load_model(os.path.join(imported, "model.keras"))
    after_one = keras.models.load_model(os.path.join(tuned, "model.keras"))
    moved = [np.abs(keras.ops.convert_to_numpy(a) - keras.ops.convert_to_numpy(b)).max()
             for a, b in zip(start.trainable_weights, after_one.trainable_weights, strict=True)]
    assert 0 < max(moved) < 0.1
    resumed = train(data, tuned, initial_model=imported, max_steps=30, **RECIPE)
    assert resumed["resumed_from"] >= 1 and resumed["step"] == 30
    print(f"fine-tuning loss: {first['logs']['loss']:.3f} -> {resumed['logs']['loss']:.3f}")
    assert resumed["logs"]["loss"] < 0.8 * first["logs"]["loss"]
    with open(os.path.join(tuned, "config.json")) as file:
        config = json.load(file)
    with open(os.path.join(imported, "config.json")) as file:
        assert config["generation"] == json.load(file)["generation"]


def test_the_tuned_folder_translates_and_exports(folders, tmp_path):
    import tensorflow as tf

    from keras_transformer.export import export_saved_model

    _, _, tuned = folders
    if not os.path.exists(os.path.join(tuned, "model.keras")):
        pytest.skip("needs test_fine_tuning_lowers_the_loss_and_resumes")
    translator = Translator.from_directory(tuned)
    sources = [source for source, _ in SENTENCES]
    texts = translator.translate(sources)
    assert len(texts) == len(sources) and all(isinstance(text, str) for text in texts)
    path = export_saved_model(tuned, str(tmp_path / "saved" / "1"))
    loaded = tf.saved_model.load(path)
    metadata = json.loads(loaded.signatures["metadata"]()["metadata"].numpy())
    assert metadata["length_penalty"] == "average" and metadata["force_end"]
    served = loaded.signatures["serving_default"](text=tf.constant(sources))
    assert [text.decode() for text in served["translation"].numpy()] == texts
    ids = translator.tokenize(sources)
    padded = np.zeros((len(ids), max(map(len, ids))), "int32")
    for row, sequence in enumerate(ids):
        padded[row, :len(sequence)] = sequence
    out = generate(translator.model, padded, "beam", **translator.generate_options)
    for row, served_row in zip(out["token_ids"], served["token_ids"].numpy(), strict=True):
        np.testing.assert_array_equal(row[row != 0], served_row[served_row != 0])


def test_initial_model_errors_are_named(folders, tmp_path):
    imported, data, _ = folders
    other = str(tmp_path / "other_data")
    os.makedirs(other)
    write_tsv(os.path.join(other, "train.tsv"), SENTENCES)
    write_tsv(os.path.join(other, "validation.tsv"), SENTENCES[:2])
    from keras_transformer.data import train_tokenizer

    train_tokenizer([text for pair in SENTENCES * 4 for text in pair],
                    os.path.join(other, "tokenizer.model"), vocabulary_size=40)
    with pytest.raises(ValueError, match="--tokenizer"):
        train(other, str(tmp_path / "out"), initial_model=imported, max_steps=1, **RECIPE)
    with pytest.raises(ValueError, match="dropout"):
        train(data, str(tmp_path / "out2"), initial_model=imported, max_steps=1, dropout=0.0,
              **RECIPE)
    with pytest.raises(FileNotFoundError, match="initial_model"):
        train(data, str(tmp_path / "out3"), initial_model=str(tmp_path / "nowhere"),
              max_steps=1, **RECIPE)
