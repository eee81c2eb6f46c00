"""The inputs `prepare` reads, streamed pair by pair, with the cleaning rules users know.

Three layouts (see `keras_transformer.data.corpora` for the in-memory loaders):

- `ParallelFiles`: two aligned plain-text files, line `i` of one translating line `i` of
  the other (the WMT/Moses layout);
- `TsvFile`: `source<TAB>target` lines;
- `DingFile`: the Ding dictionary (German :: English).

Files ending in `.gz`, `.bz2` or `.xz` are decompressed on the fly. Lines that are not
UTF-8, and TSV lines without exactly one tab, are skipped and counted, and their line
numbers are kept for the report; two aligned files of different lengths stop with an
error naming both counts. `CleaningRules` are Moses' `clean-corpus-n` rules.
"""

import dataclasses
import itertools

from keras_transformer.data.corpora import _fetch, _open_text, load_ding

# Line numbers kept per problem and input, for the report and the warning.
SHOWN_LINES = 10


@dataclasses.dataclass(frozen=True)
class CleaningRules:
    """Moses `clean-corpus-n` rules for training pairs, counted in words (split on spaces).

    Args:
        min_words: int. Fewest words a side may have. Defaults to `1`.
        max_words: int. Most words a side may have. Defaults to `250`.
        max_length_ratio: float. Most words of one side per word of the other. Defaults
            to `9.0` (Moses' default).

    Example:
    >>> rules = CleaningRules(max_words=5)
    >>> rules.reject("Ja .", "Yes ."), rules.reject("a b c d e f", "x"), rules.reject("", "x")
    (None, 'too_long', 'empty')
    """

    min_words: int = 1
    max_words: int = 250
    max_length_ratio: float = 9.0

    def __post_init__(self):
        if not 1 <= self.min_words <= self.max_words:
            raise ValueError(f"`min_words` (--min-words) must be at least 1 and at most "
                             f"`max_words` (--max-words). Received: min_words="
                             f"{self.min_words}, max_words={self.max_words}")
        if self.max_length_ratio < 1:
            raise ValueError("`max_length_ratio` (--max-length-ratio) must be at least 1. "
                             f"Received: max_length_ratio={self.max_length_ratio}")

    def reject(self, source, target):
        """Why a pair is dropped (`"empty"`, `"too_short"`, `"too_long"`, `"ratio"`), or
        `None` to keep it."""
        words = len(source.split()), len(target.split())
        if not all(words):
            return "empty"
        if min(words) < self.min_words:
            return "too_short"
        if max(words) > self.max_words:
            return "too_long"
        if max(words) > self.max_length_ratio * min(words):
            return "ratio"
        return None


@dataclasses.dataclass
class InputReport:
    """What reading one input found: its counts and the line numbers of its problems."""

    name: str
    lines: int = 0
    pairs: int = 0
    problems: dict = dataclasses.field(default_factory=dict)  # kind -> [count, [lines]]

    def problem(self, kind, line):
        entry = self.problems.setdefault(kind, [0, []])
        entry[0] += 1
        if len(entry[1]) < SHOWN_LINES:
            entry[1].append(line)

    def to_dict(self):
        return {"input": self.name, "lines": self.lines, "pairs": self.pairs,
                **{kind: {"count": count, "first_lines": lines}
                   for kind, (count, lines) in self.problems.items()}}


def _decoded(raw_lines, report, kind="undecodable_lines"):
    """`(line number, text)` of each line; lines that are not UTF-8 give `None` text."""
    for number, raw in enumerate(raw_lines, start=1):
        try:
            yield number, raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            report.problem(kind, number)
            yield number, None


def count_lines(path):
    """The number of lines of a (possibly compressed) file, read in 1 MB blocks."""
    with _open_text(_fetch(path, None), binary=True) as file:
        return sum(block.count(b"\n") for block in iter(lambda: file.read(1 << 20), b""))


@dataclasses.dataclass(frozen=True)
class ParallelFiles:
    """Two aligned files: `source` line `i` translates `target` line `i`."""

    source: str
    target: str

    @property
    def name(self):
        return f"{self.source} + {self.target}"

    def count_lines(self):
        """The number of lines of each file; a `ValueError` naming both if they differ."""
        counts = count_lines(self.source), count_lines(self.target)
        if counts[0] != counts[1]:
            self._mismatch(self.source, self.target, *counts)
        return counts[0]

    def pairs(self, report):
        """Yields `(source, target)`; raises `ValueError` if the files differ in length."""
        source_path, target_path = _fetch(self.source, None), _fetch(self.target, None)
        with (_open_text(source_path, binary=True) as sources,
              _open_text(target_path, binary=True) as targets):
            lines = itertools.zip_longest(_decoded(sources, report),
                                          _decoded(targets, report))
            for source, target in lines:
                if source is None or target is None:  # a file changed since it was counted
                    rest = 1 + sum(1 for _ in (sources if source is None else targets))
                    common = report.lines
                    self._mismatch(source_path, target_path,
                                   *((common, common + rest) if source is None
                                     else (common + rest, common)))
                report.lines += 1
                if source[1] is None or target[1] is None:
                    continue
                report.pairs += 1
                yield source[1].strip(), target[1].strip()

    @staticmethod
    def _mismatch(source_path, target_path, source_lines, target_lines):
        raise ValueError(
            f"The aligned files must have the same number of lines (one sentence a line), "
            f"but `{source_path}` has {source_lines} lines and `{target_path}` has "
            f"{target_lines}. Check that --source and --target belong together.")


@dataclasses.dataclass(frozen=True)
class TsvFile:
    """A file of `source<TAB>target` lines; `reverse` reads `target<TAB>source`."""

    path: str
    reverse: bool = False

    @property
    def name(self):
        return self.path

    def count_lines(self):
        return count_lines(self.path)

    def pairs(self, report):
        """Yields `(source, target)`; lines without exactly one tab are skipped."""
        with _open_text(_fetch(self.path, None), binary=True) as file:
            for number, line in _decoded(file, report):
                report.lines += 1
                if line is None or not line.strip():
                    continue
                fields = line.split("\t")
                if len(fields) != 2:
                    report.problem("lines_without_one_tab", number)
                    continue
                report.pairs += 1
                source, target = fields[0].strip(), fields[1].strip()
                yield (target, source) if self.reverse else (source, target)


@dataclasses.dataclass(frozen=True)
class DingFile:
    """The Ding dictionary, parsed whole (it is 25 MB) with its own cleaning (see
    `load_ding`). `load` gives `(german, english)` pairs, which `prepare` splits by the
    German side and then swaps where `reverse` is set."""

    path: str
    reverse: bool = False

    @property
    def name(self):
        return self.path

    def load(self, report, progress=False):
        """All its pairs, parsed and deduplicated; `report` gets Ding's counts."""
        from collections import Counter

        counts = Counter()
        pairs = load_ding(self.path, counts=counts, progress=progress)
        report.lines, report.pairs = counts["lines"], len(pairs)
        for kind in ("malformed_lines", "misaligned_lines", "empty_entries", "duplicates",
                     "undecodable_lines"):
            if counts[kind]:
                report.problems[kind] = [counts[kind], []]
        return pairs
