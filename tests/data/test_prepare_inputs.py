"""`keras-transformer prepare` on users' own corpora: aligned files, TSV, compressed files,
either direction, given held-out files, the hash split, cleaning and bad input."""

import bz2
import gzip
import json
import logging
import lzma
import os
import random

import numpy as np
import pytest

from keras_transformer.cli import main
from keras_transformer.data import load_tsv
from keras_transformer.data.token_store import TokenStore

SUBJECTS = [("The dog", "Der Hund"), ("The cat", "Die Katze"), ("The child", "Das Kind"),
            ("My friend", "Mein Freund"), ("The teacher", "Der Lehrer")]
VERBS = [("sleeps", "schläft"), ("runs", "läuft"), ("reads", "liest"), ("eats", "isst"),
         ("sings", "singt"), ("waits", "wartet")]
PLACES = [("at home", "zu Hause"), ("in the garden", "im Garten"), ("today", "heute"),
          ("in Berlin", "in Berlin"), ("every morning", "jeden Morgen")]


def english_german(count, seed=0):
    """`count` distinct (English, German) sentence pairs."""
    pairs = [(f"{s} {v} {p}.", f"{gs} {gv} {gp}.")
             for s, gs in SUBJECTS for v, gv in VERBS for p, gp in PLACES]
    random.Random(seed).shuffle(pairs)
    return pairs[:count]


def write_lines(path, lines, opener=open):
    with opener(path, "wt", encoding="utf-8") as file:
        file.writelines(line + "\n" for line in lines)
    return str(path)


def write_aligned(folder, name, pairs, opener=open, suffix=""):
    return (write_lines(folder / f"{name}.en{suffix}", [en for en, _ in pairs], opener),
            write_lines(folder / f"{name}.de{suffix}", [de for _, de in pairs], opener))


def prepare(output, *arguments):
    return main(["prepare", "--output", str(output), "--vocabulary-size", "80",
                 "--tokens-per-batch", "256", "--max-sequence-length", "32", *arguments])


def report_of(output):
    with open(os.path.join(output, "report.json"), encoding="utf-8") as file:
        return json.load(file)


def test_english_to_german_from_aligned_files_with_given_held_out_files(tmp_path, capsys):
    pairs = english_german(150)
    source, target = write_aligned(tmp_path, "train", pairs)
    validation = write_aligned(tmp_path, "newstest2013", pairs[:5])  # also in train
    test = write_aligned(tmp_path, "newstest2014", english_german(150, seed=1)[:7])
    output = tmp_path / "data"
    assert prepare(output, "--source", source, "--target", target,
                   "--validation-source", validation[0], "--validation-target", validation[1],
                   "--test-source", test[0], "--test-target", test[1]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert load_tsv(output / "validation.tsv") == pairs[:5]
    assert load_tsv(output / "test.tsv") == english_german(150, seed=1)[:7]
    train = load_tsv(output / "train.tsv")
    held_out = {en for en, _ in load_tsv(output / "test.tsv") + pairs[:5]}
    assert train == [pair for pair in pairs if pair[0] not in held_out]
    report = report_of(output)
    assert report["pairs"]["held_out_overlap_dropped"] == 150 - len(train)
    assert summary["splits"] == {"train": len(train), "validation": 5, "test": 7}
    manifest = json.loads((output / "tokens.json").read_text())
    assert manifest["dtype"] == "uint16" and manifest["splits"]["train"]["pairs"] == len(train)
    store = TokenStore(str(output), "train", "uint16")
    assert len(store) == len(train)
    from keras_transformer.data import Tokenizer

    tokenizer = Tokenizer.from_file(str(output / "tokenizer.model"))
    assert tokenizer.decode_ids([store.source(3), store.target(3)]) == list(train[3])


def test_tsv_and_compressed_inputs_are_concatenated(tmp_path):
    pairs = english_german(150)
    gz = write_aligned(tmp_path, "part1", pairs[:50], gzip.open, ".gz")
    tsv_bz2 = write_lines(tmp_path / "part2.tsv.bz2", [f"{en}\t{de}" for en, de in pairs[50:100]],
                          bz2.open)
    tsv_xz = write_lines(tmp_path / "part3.tsv.xz", [f"{en}\t{de}" for en, de in pairs[100:]],
                         lzma.open)
    output = tmp_path / "data"
    assert prepare(output, "--source", gz[0], "--target", gz[1], "--tsv", tsv_bz2,
                   "--tsv", tsv_xz) == 0
    report = report_of(output)
    assert [entry["pairs"] for entry in report["inputs"]] == [50, 50, 50]
    kept = sorted(sum((load_tsv(output / f"{split}.tsv")
                       for split in ("train", "validation", "test")), []))
    assert kept == sorted(pairs)


def test_reverse_swaps_tsv_and_ding_sides(tmp_path):
    pairs = english_german(60)
    tsv = write_lines(tmp_path / "de-en.tsv", [f"{de}\t{en}" for en, de in pairs])
    assert prepare(tmp_path / "tsv", "--tsv", tsv, "--reverse") == 0
    assert set(load_tsv(tmp_path / "tsv" / "train.tsv")) <= set(pairs)
    # Sentence pairs by the German side only (the English has two words).
    short = [f"Es regnet heute {word}. :: It rains." for word in ("sehr", "viel", "oft")]
    ding = write_lines(tmp_path / "ding", [f"{de} :: {en}" for en, de in pairs] + short)
    assert prepare(tmp_path / "forward", "--corpus", ding) == 0
    assert prepare(tmp_path / "reverse", "--corpus", ding, "--reverse") == 0
    for split in ("train", "validation", "test"):  # the project's split, by the German side
        forward = load_tsv(tmp_path / "forward" / f"{split}.tsv")
        reverse = load_tsv(tmp_path / "reverse" / f"{split}.tsv")
        assert reverse == [(en, de) for de, en in forward]
        # `train --sentences-only` keeps the same pairs in either direction.
        np.testing.assert_array_equal(np.load(tmp_path / "reverse" / f"{split}.sentences.npy"),
                                      np.load(tmp_path / "forward" / f"{split}.sentences.npy"))


def test_the_hash_split_is_stable_bounded_and_disjoint(tmp_path):
    pairs = english_german(150)
    source, target = write_aligned(tmp_path, "train", pairs)
    for run in ("one", "two"):
        assert prepare(tmp_path / run, "--source", source, "--target", target,
                       "--held-out-pairs", "4") == 0
    splits = {split: load_tsv(tmp_path / "one" / f"{split}.tsv")
              for split in ("train", "validation", "test")}
    for split, held_out in splits.items():
        assert load_tsv(tmp_path / "two" / f"{split}.tsv") == held_out  # stable
        if split != "train":
            assert 1 <= len(held_out) <= 4
            assert not {en for en, _ in held_out} & {en for en, _ in splits["train"]}
    assert sum(map(len, splits.values())) == 150


def test_cleaning_rules_drop_and_count(tmp_path):
    pairs = english_german(40)
    bad = [("", "Leer."), ("Long " * 30 + ".", "Lang."), ("Yes.", "Ja " * 12 + "."),
           pairs[0], pairs[0]]  # empty, too long, ratio, two duplicates
    source, target = write_aligned(tmp_path, "train", pairs + bad)
    output = tmp_path / "data"
    assert prepare(output, "--source", source, "--target", target, "--max-words", "20",
                   "--held-out-pairs", "0") == 0
    counts = report_of(output)["pairs"]
    assert (counts["empty_dropped"], counts["too_long_dropped"], counts["ratio_dropped"],
            counts["duplicates_dropped"]) == (1, 1, 1, 2)
    assert sorted(load_tsv(output / "train.tsv")) == sorted(pairs)


def test_aligned_files_of_different_lengths_name_both_counts(tmp_path, capsys):
    source = write_lines(tmp_path / "train.en", ["One.", "Two.", "Three."])
    target = write_lines(tmp_path / "train.de", ["Eins.", "Zwei."])
    assert prepare(tmp_path / "data", "--source", source, "--target", target) == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert message.startswith("keras-transformer: error:")
    assert f"`{source}` has 3 lines" in message and f"`{target}` has 2" in message
    assert not (tmp_path / "data" / "report.json").exists()


def test_bad_lines_are_skipped_counted_and_named(tmp_path, caplog):
    pairs = english_german(40)
    lines = [f"{en}\t{de}".encode() for en, de in pairs]
    lines[4] = b"no tab on this line"
    lines[9] = b"\xff\xfe not UTF-8\tnicht UTF-8"
    (tmp_path / "corpus.tsv").write_bytes(b"\n".join(lines) + b"\n")
    with caplog.at_level(logging.WARNING):
        assert prepare(tmp_path / "data", "--tsv", str(tmp_path / "corpus.tsv")) == 0
    report = report_of(tmp_path / "data")
    assert report["pairs"]["lines_without_one_tab_skipped"] == 1
    assert report["pairs"]["undecodable_lines_skipped"] == 1
    assert report["inputs"][0]["lines_without_one_tab"] == {"count": 1, "first_lines": [5]}
    assert report["inputs"][0]["undecodable_lines"] == {"count": 1, "first_lines": [10]}
    assert "line 5" in caplog.text and "line 10" in caplog.text


@pytest.mark.parametrize("arguments, message", [
    (["--source", "a.en"], "Each --source needs its --target"),
    (["--tsv", "x.tsv", "--validation-source", "v.en"], "--validation-target was not given"),
    (["--tsv", "missing.tsv"], "Corpus file not found: `missing.tsv`"),
])
def test_bad_arguments_get_one_line_naming_the_fix(tmp_path, capsys, arguments, message):
    assert prepare(tmp_path / "data", *arguments) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("keras-transformer: error:") and message in error


def test_padding_report_comes_from_the_training_batches(tmp_path):
    source, target = write_aligned(tmp_path, "train", english_german(150))
    assert prepare(tmp_path / "data", "--source", source, "--target", target) == 0
    padding = report_of(tmp_path / "data")["padding"]
    assert padding["bucketed"]["largest_side_tokens"] <= 256
    assert padding["bucketed"]["padding_efficiency"] > padding["naive"]["padding_efficiency"]
    lengths = np.diff(np.load(tmp_path / "data" / "train.index.npy"), axis=0)
    assert padding["bucketed"]["real_tokens"] == int(lengths.sum() + 2 * len(lengths))


def test_no_held_out_source_trains_when_ding_and_other_corpora_mix(tmp_path):
    ding_pairs = [(f"{de} ist hier.", f"{en} is here.") for en, de in
                  [(en[:-1], de[:-1]) for en, de in english_german(150)]]
    ding = write_lines(tmp_path / "ding", [f"{de} :: {en}" for de, en in ding_pairs])
    # The TSV repeats every Ding German side with another translation.
    tsv = write_lines(tmp_path / "more.tsv", [f"{de}\tAnother {en}" for de, en in ding_pairs])
    output = tmp_path / "data"
    assert prepare(output, "--corpus", ding, "--tsv", tsv, "--held-out-pairs", "20") == 0
    held_out = {de for split in ("validation", "test")
                for de, _ in load_tsv(output / f"{split}.tsv")}
    assert held_out
    assert not held_out & {de for de, _ in load_tsv(output / "train.tsv")}
    assert report_of(output)["pairs"]["held_out_overlap_dropped"] > 0


def test_mismatched_files_stop_before_any_split_file_is_written(tmp_path):
    source = write_lines(tmp_path / "train.en", ["One.", "Two.", "Three."])
    target = write_lines(tmp_path / "train.de", ["Eins.", "Zwei."])
    assert prepare(tmp_path / "data", "--source", source, "--target", target) == 2
    assert os.listdir(tmp_path / "data") == []


def test_token_files_follow_the_text_they_came_from(tmp_path):
    from keras_transformer.data import tokenize_folder

    source, target = write_aligned(tmp_path, "train", english_german(100))
    output = tmp_path / "data"
    assert prepare(output, "--source", source, "--target", target) == 0
    before = tokenize_folder(str(output))["splits"]["train"]["pairs"]
    with open(output / "train.tsv", "a", encoding="utf-8") as file:
        file.write("The dog sleeps here.\tDer Hund schläft hier.\n")
    assert tokenize_folder(str(output))["splits"]["train"]["pairs"] == before + 1


def test_an_empty_validation_split_is_named_with_its_fix_when_training(tmp_path, caplog):
    from keras_transformer.data.batch_plan import StoreBatches
    from keras_transformer.data.token_store import read_manifest

    source, target = write_aligned(tmp_path, "train", english_german(50))
    output = tmp_path / "data"
    with caplog.at_level(logging.WARNING):
        assert prepare(output, "--source", source, "--target", target,
                       "--held-out-pairs", "0") == 0
    assert "validation split is empty" in caplog.text
    store = TokenStore(str(output), "validation", read_manifest(str(output))["dtype"])
    with pytest.raises(ValueError, match="validation split of .* holds no pairs.*"
                                         "--validation-source"):
        StoreBatches(store)
    assert prepare(tmp_path / "other", "--source", source, "--target", target,
                   "--held-out-pairs", "-1") == 2
