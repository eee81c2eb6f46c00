import gzip
from collections import Counter

import pytest

from keras_transformer.data import (
    clean_ding_entry,
    load_ding,
    load_parallel,
    load_tsv,
    parse_ding,
    write_tsv,
)

DING_LINES = """\
# Version :: devel 2023-01-30
# License :: GPL Version 2 or later
Aal {m} [cook.] | Aale {pl} :: eel | eels
Aas {n}; Aasfleisch {n} [zool.] :: carrion; carcass
Aachener {adj} | der Aachener Dom :: Aachen
das A und O [ugs.] :: the nuts and bolts [coll.]
Aal {m} :: eel
Hat jemand noch eine Frage?; Noch Fragen? :: Are there any questions?; Any questions?
Aalen {n} (erdgeschichtliche Stufe; Jura) [geol.] :: Aalenian (stage) <Aalen>
{n} :: [coll.]
no separator here
"""


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_parse_ding_aligns_sub_entries_and_skips_the_rest():
    counts = Counter()
    pairs = parse_ding(DING_LINES.splitlines(), counts)
    assert pairs == [
        ("Aal", "eel"),
        ("Aale", "eels"),
        ("Aas", "carrion"),
        ("das A und O", "the nuts and bolts"),
        ("Hat jemand noch eine Frage?", "Are there any questions?"),
        ("Aalen (erdgeschichtliche Stufe; Jura)", "Aalenian (stage)"),
    ]
    assert counts["comments"] == 2
    assert counts["misaligned_lines"] == 1  # the Aachener line: 2 sub-entries vs 1
    assert counts["duplicates"] == 1  # "Aal {m} :: eel" again
    assert counts["empty_entries"] == 1
    assert counts["malformed_lines"] == 1
    assert counts["pairs"] == len(pairs)


@pytest.mark.parametrize(
    "entry, expected",
    [
        ("Aas {n}; Aasfleisch {n}", "Aas"),
        ("  Haus   {n}  [arch.]  ", "Haus"),
        ("Guter Wein muss reifen.", "Guter Wein muss reifen."),
        ("eel spear <eelspear>", "eel spear"),
        ("Es regnet (in Strömen).; Es gießt.", "Es regnet (in Strömen)."),
    ],
)
def test_clean_ding_entry(entry, expected):
    assert clean_ding_entry(entry) == expected


def test_load_ding_skips_and_counts_lines_that_are_not_utf8(tmp_path, caplog):
    path = tmp_path / "de-en"
    path.write_bytes(b"Hund {m} :: dog\nKatze \xff\xfe :: cat\nMaus {f} :: mouse\n")
    counts = Counter()
    with caplog.at_level("WARNING"):
        pairs = load_ding(str(path), counts=counts)
    assert pairs == [("Hund", "dog"), ("Maus", "mouse")]
    assert counts["undecodable_lines"] == 1
    assert "not UTF-8: line 2" in caplog.text


def test_load_ding_from_path_gzip_and_file_url(tmp_path):
    path = write(tmp_path / "de-en", DING_LINES)
    expected = parse_ding(DING_LINES.splitlines())
    assert load_ding(path) == expected
    with gzip.open(tmp_path / "de-en.gz", "wt", encoding="utf-8") as file:
        file.write(DING_LINES)
    assert load_ding(str(tmp_path / "de-en.gz")) == expected
    url = (tmp_path / "de-en").as_uri()
    assert load_ding(url, cache_dir=str(tmp_path / "cache")) == expected
    assert list((tmp_path / "cache").rglob("de-en"))  # downloaded once, into `cache_dir`


def test_load_ding_default_path_follows_kt_corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("KT_CORPUS", write(tmp_path / "de-en", "Hund {m} :: dog\n"))
    assert load_ding() == [("Hund", "dog")]


def test_load_ding_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="Corpus file not found: .*apt-get install"):
        load_ding(str(tmp_path / "missing"))


def test_load_ding_empty_corpus(tmp_path):
    path = write(tmp_path / "de-en", "# only a comment\n\nA | B :: a\n")
    with pytest.raises(ValueError, match="holds no pairs"):
        load_ding(path)


def test_tsv_round_trip_escapes_tabs_and_newlines(tmp_path):
    path = str(tmp_path / "pairs.tsv")
    write_tsv(path, [("Guten\tTag.", "Good\nday."), ("Hund", "dog")])
    assert load_tsv(path) == [("Guten Tag.", "Good day."), ("Hund", "dog")]


def test_load_tsv_skips_blank_lines(tmp_path):
    path = write(tmp_path / "pairs.tsv", "Hund\tdog\n\nKatze\tcat\n")
    assert load_tsv(path) == [("Hund", "dog"), ("Katze", "cat")]


def test_load_tsv_errors(tmp_path):
    with pytest.raises(ValueError, match="Line 2 of .* two tab-separated fields .* holds 3"):
        load_tsv(write(tmp_path / "bad.tsv", "Hund\tdog\na\tb\tc\n"))
    with pytest.raises(ValueError, match="holds no pairs"):
        load_tsv(write(tmp_path / "empty.tsv", "\n\n"))
    with pytest.raises(FileNotFoundError, match="not found"):
        load_tsv(str(tmp_path / "missing.tsv"))


def test_load_parallel(tmp_path):
    source = write(tmp_path / "train.de", "Hallo.\n\nDanke.\n")
    target = write(tmp_path / "train.en", "Hello.\nBlank above.\nThanks.\n")
    assert load_parallel(source, target) == [("Hallo.", "Hello."), ("Danke.", "Thanks.")]


def test_load_parallel_errors(tmp_path):
    source = write(tmp_path / "train.de", "Hallo.\nDanke.\nBitte.\n")
    target = write(tmp_path / "train.en", "Hello.\nThanks.\n")
    with pytest.raises(ValueError, match="same number of lines.* has 3 lines .* has 2"):
        load_parallel(source, target)
    with pytest.raises(FileNotFoundError, match="not found"):
        load_parallel(source, str(tmp_path / "missing.en"))
    empty = write(tmp_path / "empty.de", "\n")
    with pytest.raises(ValueError, match="holds no pairs"):
        load_parallel(empty, write(tmp_path / "empty.en", "\n"))


def test_real_corpus_size(real_pairs):
    assert 350_000 <= len(real_pairs) <= 430_000
    assert len(set(real_pairs)) == len(real_pairs)
    assert ("Guter Wein muss reifen.", "Good wine needs to mellow.") in real_pairs
    assert all(text and "\t" not in text for pair in real_pairs[:1000] for text in pair)
