"""`keras-transformer prepare` on a small inline corpus, and once on the real corpus."""

import json
import os

import pytest

from keras_transformer.cli import main
from keras_transformer.data import default_ding_path, load_tsv

CORPUS = """\
# A tiny Ding-format corpus
Hund {m} | Hunde {pl} :: dog | dogs
Katze {f} | Katzen {pl} :: cat | cats
Haus {n} | Häuser {pl} :: house | houses
Wie spät ist es? :: What time is it?
Er ist krank. :: He is ill.
Guter Wein muss reifen. :: Good wine needs to mellow.
Ich bin hier.; Hier bin ich. :: I am here.
Das ist eine gute Idee. :: That is a good idea.
Wir fahren morgen nach Berlin. :: We are going to Berlin tomorrow.
A | B :: misaligned
"""


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "de-en"
    path.write_text(CORPUS, encoding="utf-8")
    return str(path)


def test_prepare_writes_splits_tokenizer_and_report(corpus, tmp_path, capsys):
    output = str(tmp_path / "prepared")
    argv = [
        "prepare",
        "--output",
        output,
        "--corpus",
        corpus,
        "--vocabulary-size",
        "60",
        "--tokens-per-batch",
        "64",
        "--max-sequence-length",
        "16",
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "Parsing" in captured.err  # the progress bar, on stderr
    assert json.loads(captured.out)["pairs"] == 12
    tokenized = [f"{split}.{part}" for split in ("test", "train", "validation")
                 for part in ("index.npy", "sentences.npy", "source.bin", "target.bin", "tsv")]
    assert sorted(os.listdir(output)) == sorted(
        ["report.json", "tokenizer.model", "tokens.json", *tokenized])
    assert load_tsv(os.path.join(output, "test.tsv")) == [("Wie spät ist es?", "What time is it?")]
    assert load_tsv(os.path.join(output, "validation.tsv")) == [("Er ist krank.", "He is ill.")]
    assert ("Ich bin hier.", "I am here.") in load_tsv(os.path.join(output, "train.tsv"))
    with open(os.path.join(output, "report.json"), encoding="utf-8") as file:
        report = json.load(file)
    assert report["pairs"]["kept"] == 12
    assert report["pairs"]["misaligned_lines_skipped"] == 1
    assert {name: split["pairs"] for name, split in report["splits"].items()} == {
        "train": 10,
        "validation": 1,
        "test": 1,
    }
    assert 0 <= report["tokenizer"]["unknown_share"]["test"] < 1
    padding = report["padding"]
    assert padding["bucketed"]["largest_side_tokens"] <= 64
    assert 0 < padding["naive"]["padding_efficiency"] <= 1
    assert 0 < padding["bucketed"]["padding_efficiency"] <= 1


@pytest.mark.parametrize(
    "corpus_text, message",
    [(None, "Corpus file not found"), ("# nothing\n", "holds no pairs")],
)
def test_prepare_user_errors_exit_2_with_one_line(tmp_path, capsys, corpus_text, message):
    path = tmp_path / "de-en"
    if corpus_text is not None:
        path.write_text(corpus_text, encoding="utf-8")
    assert main(["prepare", "--output", str(tmp_path / "out"), "--corpus", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("keras-transformer: error: ") and message in lines[-1]
    assert "Traceback" not in "\n".join(lines)


def test_bad_arguments_exit_2(capsys):
    with pytest.raises(SystemExit) as raised:
        main(["prepare", "--vocabulary-size", "many"])
    assert raised.value.code == 2
    assert "keras-transformer prepare: error:" in capsys.readouterr().err
    with pytest.raises(SystemExit) as raised:
        main([])
    assert raised.value.code == 2


@pytest.mark.slow
def test_prepare_on_the_real_corpus(tmp_path):
    corpus = default_ding_path()
    if not os.path.isfile(corpus):
        pytest.skip(f"The Ding corpus is not installed at {corpus}: apt-get install trans-de-en")
    assert main(["prepare", "--output", str(tmp_path), "--corpus", corpus]) == 0
    with open(tmp_path / "report.json", encoding="utf-8") as file:
        report = json.load(file)
    assert 350_000 <= report["pairs"]["kept"] <= 430_000
    assert 1_600 <= report["splits"]["test"]["pairs"] <= 2_200
    assert report["tokenizer"]["unknown_share"]["test"] < 0.01
    assert report["padding"]["bucketed"]["padding_efficiency"] >= 0.85
    assert report["padding"]["naive"]["padding_efficiency"] < 0.5
