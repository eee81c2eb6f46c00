"""Fixtures for the importer tests: tiny OPUS-MT snapshots, written here (nothing downloaded)."""

import pytest

from tests.importers.marian_fixtures import (
    ENGLISH_WORDS,
    GERMAN_WORDS,
    synthetic_sentences,
    write_marian_snapshot,
)

# Varied lengths, digits, punctuation, whitespace to normalize and characters the spm
# models never saw (they become `<unk>`).
_EXTRA_SOURCES = [
    "Wie spät ist es? Es ist 10:45 Uhr.",
    "Größe: 1,80 m – „schön“!",
    "Ein sehr langer Satz, der immer weiter geht, 3 Zahlen (1, 2, 3) enthält und hier endet.",
    "Unbekannt: 😀 漢字 Ω",
    "  doppelte  Leerzeichen ",
    "",
    "ﬁ … Ünïcödé",
    "Tabs\tund\nZeilen",
    "Hund",
    "?!",
]
_EXTRA_TARGETS = [
    "What time is it? It is 10:45.",
    "Height: 1.80 m - \"nice\"!",
    "A very long sentence that goes on and on, holds 3 numbers (1, 2, 3) and ends here.",
    "Unknown: 😀 漢字 Ω",
    "  double  spaces ",
    "",
    "The dog 's ball , isn't it ?",
    "Tabs\tand\nlines",
    "dog",
    "?!",
]


# Large random weights and a likelier end token: outputs differ from sentence to sentence
# and some end early while others run to the limit (with transformers' default 0.02, a
# random model repeats one token for every input).
VARIED_OUTPUTS = {"init_std": 1.0, "end_bias": 4.0}


@pytest.fixture(scope="session")
def marian_shared(tmp_path_factory):
    """A snapshot with one vocabulary for both sides, as most OPUS-MT models have."""
    return write_marian_snapshot(tmp_path_factory.mktemp("marian_shared"), shared=True,
                                 **VARIED_OUTPUTS)


@pytest.fixture(scope="session")
def marian_separate(tmp_path_factory):
    """A snapshot with separate source and target vocabularies (`separate_vocabs: true`)."""
    return write_marian_snapshot(tmp_path_factory.mktemp("marian_separate"), shared=False,
                                 **VARIED_OUTPUTS)


@pytest.fixture(scope="session")
def marian_sentences():
    """40 German-like source sentences of the snapshots' language."""
    return synthetic_sentences(GERMAN_WORDS, 30, seed=5) + _EXTRA_SOURCES


@pytest.fixture(scope="session")
def marian_target_sentences():
    """40 English-like target sentences of the snapshots' language."""
    return synthetic_sentences(ENGLISH_WORDS, 30, seed=6) + _EXTRA_TARGETS


@pytest.fixture(scope="session", params=["shared", "separate"])
def marian_logits_snapshot(request, tmp_path_factory):
    """Snapshots for the logit comparison, at the scale of a trained model's logits
    (about +-5): with `VARIED_OUTPUTS`' weights, attention is so peaked that float32
    rounding alone moves logits of about 16 by up to 1e-2, in any two implementations."""
    return write_marian_snapshot(tmp_path_factory.mktemp(f"marian_logits_{request.param}"),
                                 shared=request.param == "shared", init_std=0.3)
