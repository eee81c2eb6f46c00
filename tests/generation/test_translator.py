import json

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.data.tokenizer import train_tokenizer
from keras_transformer.generation import Translator, generate, plot_attention

SENTENCES = [
    "Guter Wein muss reifen.", "Good wine needs time.", "Der Hund schläft.",
    "The dog sleeps.", "Die Katze trinkt Milch.", "The cat drinks milk.",
    "Ich lese ein Buch.", "I read a book.", "Wir gehen nach Hause.", "We go home.",
    "Das Wetter ist schön.", "The weather is nice.", "Er spielt Gitarre.",
    "He plays guitar.", "Sie kocht Suppe.", "She cooks soup.",
]
OPTIONS = {"max_length": 6, "jit_compile": False}


@pytest.fixture(scope="module")
def translator():
    # Seed first: `tf.random.set_seed` clears TensorFlow's eager kernel cache, which drops
    # the tf_text SentencePiece resource of a tokenizer made before it.
    keras.utils.set_random_seed(2)
    tokenizer = train_tokenizer(SENTENCES * 3, vocabulary_size=80)
    model = kt.build_transformer("tiny", vocabulary_size=tokenizer.vocabulary_size,
                                 dropout=0.0, num_layers=1)
    return Translator(model, tokenizer, method="greedy", batch_size=2, **OPTIONS)


def test_translate_matches_generate_and_keeps_order(translator, capsys):
    sentences = ["Der Hund schläft.", "Good wine needs time and more time.", "We go home."]
    translations = translator.translate(sentences)
    assert "Translating" in capsys.readouterr().err  # two batches: a progress bar
    assert len(translations) == 3 and all(isinstance(t, str) for t in translations)
    for sentence, translation in zip(sentences, translations, strict=True):
        ids = np.array([translator.tokenize([sentence])[0]], "int32")
        assert ids[0, -1] == kt.END_ID
        expected = translator.detokenize(generate(translator.model, ids, **OPTIONS)["token_ids"])
        assert translation == expected[0]
        assert translator.translate(sentence) == translation  # a str gives a str
    assert translator.translate([]) == []
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        dataset = tf.data.Dataset.from_tensor_slices(sentences).batch(2)
        assert translator.translate(dataset, progress=False) == translations


def test_tokenize_detokenize_round_trip(translator):
    ids = translator.tokenize(SENTENCES[:4])
    assert translator.detokenize([i + [0, 0] for i in [ids[0]]]) == [SENTENCES[0]]
    assert all(row[-1] == kt.END_ID for row in ids)


def test_old_names_of_tokenize_and_detokenize_warn_and_still_work(translator):
    with pytest.warns(DeprecationWarning, match="Translator.tokenize"):
        ids = translator.encode(SENTENCES[:2])
    assert ids == translator.tokenize(SENTENCES[:2])
    with pytest.warns(DeprecationWarning, match="Translator.detokenize"):
        assert translator.decode([ids[0]]) == translator.detokenize([ids[0]])


def test_from_directory_and_files(translator, tmp_path):
    translator.model.save(tmp_path / "model.keras")
    translator.tokenizer.save(str(tmp_path / "tokenizer.model"))
    (tmp_path / "config.json").write_text(json.dumps({"max_sequence_length": 64}))
    loaded = Translator.from_directory(str(tmp_path), method="greedy", **OPTIONS)
    assert loaded.max_sequence_length == 64
    assert loaded.translate(SENTENCES[:3]) == translator.translate(SENTENCES[:3])
    source = tmp_path / "source.txt"
    source.write_text("\n".join(SENTENCES[:3]) + "\n")
    output = loaded.translate_file(str(source), str(tmp_path / "out.txt"))
    assert open(output).read().splitlines() == translator.translate(SENTENCES[:3])
    with pytest.raises(FileNotFoundError, match="model.keras"):
        Translator.from_directory(str(tmp_path / "missing"))


def test_attention_and_plot(translator):
    import matplotlib

    matplotlib.use("Agg")
    attention = translator.attention("Der Hund schläft.", max_length=5)
    source, target = attention["source_pieces"], attention["target_pieces"]
    assert source[-1] == "</s>" and len(attention["cross_attention"]) == 1
    cross = attention["cross_attention"][0]
    assert cross.shape == (4, len(target), len(source))
    np.testing.assert_allclose(cross.sum(-1), 1.0, rtol=1e-5)
    assert attention["encoder_self_attention"][0].shape == (4, len(source), len(source))
    figure = plot_attention(attention, layer=0, heads=[0, 1])
    assert len(figure.axes) == 2
    with pytest.raises(ValueError, match="`kind` must be one of"):
        plot_attention(attention, kind="self")


def test_bad_translator_arguments(translator):
    with pytest.raises(ValueError, match="`method` must be one of"):
        translator.translate(["a"], method="nucleus")
    with pytest.raises(ValueError, match="`batch_size` must be a positive integer"):
        Translator(translator.model, translator.tokenizer, batch_size=0)


def test_cli_translate_keeps_every_line_and_names_invalid_utf8(translator, tmp_path, capsys):
    from keras_transformer.cli import main

    translator.model.save(tmp_path / "model.keras")
    translator.tokenizer.save(str(tmp_path / "tokenizer.model"))
    source = tmp_path / "in.txt"
    source.write_bytes(b"Der Hund schl\xc3\xa4ft.\nGuter \xffWein.\n\nWir gehen nach Hause.\n")
    main(["translate", "--model", str(tmp_path), "--input", str(source), "--method", "greedy",
          "--max-length", "6"])
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 4 and out.splitlines()[2] == ""
    assert "in.txt line 2: invalid UTF-8 byte 0xff at column 7, replaced by U+FFFD" in err
    loaded = Translator.from_directory(str(tmp_path), method="greedy", max_length=6)
    assert out.splitlines()[1] == loaded.translate("Guter \ufffdWein.")
