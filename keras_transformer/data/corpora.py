"""Corpus loaders that return aligned `(source, target)` string pairs.

Three layouts are read:

- the Ding dictionary (`German :: English`, the project's corpus, see `load_ding`);
- tab-separated files, one `source<TAB>target` pair a line (`load_tsv`, written by
  `write_tsv`);
- two aligned plain-text files, one sentence a line (the WMT/Moses layout,
  `load_parallel`).

Files ending in `.gz`, `.bz2` or `.xz` are decompressed on the fly.
"""

import bz2
import gzip
import logging
import lzma
import os
import re
import sys
from collections import Counter
from collections.abc import Iterable

import keras
import tqdm

logger = logging.getLogger(__name__)

DING_PATH = "/usr/share/trans/de-en"
"""Where the Debian package `trans-de-en` installs the Ding corpus."""

_URL_SCHEMES = ("http://", "https://", "ftp://", "file://")
_ANNOTATION = re.compile(r"\{[^}]*\}|\[[^\]]*\]|<[^>]*>")
_SPACES = re.compile(r"\s+")


def default_ding_path():
    """The Ding corpus path used when none is given: `$KT_CORPUS`, else `DING_PATH`.

    Example:
    >>> default_ding_path() in (DING_PATH, os.environ.get("KT_CORPUS"))
    True
    """
    return os.environ.get("KT_CORPUS", DING_PATH)


def clean_ding_entry(entry):
    """Cleans one Ding sub-entry into text usable for translation.

    The rule, kept deliberately simple:

    1. `{...}` (grammar: `{n}`, `{vt}`), `[...]` (usage: `[ugs.]`, `[Br.]`) and `<...>`
       (alternative spellings and search keys) are removed.
    2. Of the `;`-separated synonyms, only the first is kept (a `;` inside parentheses
       does not separate synonyms). Sentences then have one reference translation.
    3. Parentheses `(...)` are kept: in sentences they are part of the text.
    4. Whitespace is collapsed and stripped.

    Args:
        entry: str. One sub-entry of one side of a Ding line.

    Returns:
        The cleaned string, possibly empty.

    Example:
    >>> clean_ding_entry("Aas {n}; Aasfleisch {n} [zool.]")
    'Aas'
    >>> clean_ding_entry("Hat jemand noch eine Frage?; Noch Fragen? [ugs.]")
    'Hat jemand noch eine Frage?'
    >>> clean_ding_entry("Aal {m} (auf der Speisekarte; Küche) [cook.]")
    'Aal (auf der Speisekarte; Küche)'
    """
    text = _ANNOTATION.sub(" ", entry)
    depth = 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif char == ";" and depth == 0:
            text = text[:index]
            break
    return _SPACES.sub(" ", text).strip()


def parse_ding(lines, counts=None):
    """Parses Ding lines into deduplicated `(german, english)` pairs.

    `#` lines are comments. Every other line is `German :: English`; each side holds
    sub-entries separated by ` | ` that align one to one, so a line whose sides have
    different sub-entry counts is skipped. Each sub-entry is cleaned with
    `clean_ding_entry`; pairs with an empty side are dropped and exact duplicates are
    kept once, in first-seen order.

    Args:
        lines: iterable of str. The corpus lines.
        counts: optional `collections.Counter`, updated with `lines`, `comments`,
            `malformed_lines` (no ` :: `), `misaligned_lines`, `entries`,
            `empty_entries`, `duplicates` and `pairs`.

    Returns:
        List of `(german, english)` tuples.

    Example:
    >>> parse_ding([
    ...     "# A comment :: ignored",
    ...     "Aal {m} | Aale {pl} :: eel | eels",
    ...     "Aas {n} :: carrion | carcass",
    ...     "Guter Wein muss reifen. :: Good wine needs to mellow.",
    ... ])
    [('Aal', 'eel'), ('Aale', 'eels'), ('Guter Wein muss reifen.', 'Good wine needs to mellow.')]
    """
    counts = Counter() if counts is None else counts
    pairs = {}
    for line in lines:
        counts["lines"] += 1
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            counts["comments"] += 1
            continue
        german, separator, english = line.partition(" :: ")
        if not separator:
            counts["malformed_lines"] += 1
            continue
        german_entries = german.split(" | ")
        english_entries = english.split(" | ")
        if len(german_entries) != len(english_entries):
            counts["misaligned_lines"] += 1
            continue
        for german_entry, english_entry in zip(german_entries, english_entries, strict=True):
            counts["entries"] += 1
            pair = (clean_ding_entry(german_entry), clean_ding_entry(english_entry))
            if not pair[0] or not pair[1]:
                counts["empty_entries"] += 1
            elif pair in pairs:
                counts["duplicates"] += 1
            else:
                pairs[pair] = None
    counts["pairs"] += len(pairs)
    return list(pairs)


def load_ding(path=None, cache_dir=None, counts=None, progress=False):
    """Loads the Ding German-English dictionary as `(german, english)` pairs.

    Args:
        path: str. A local file, or a URL (`http://`, `https://`, `ftp://`,
            `file://`) fetched once with `keras.utils.get_file`. Defaults to the
            `KT_CORPUS` environment variable, else `/usr/share/trans/de-en` (the Debian
            package `trans-de-en`).
        cache_dir: str. Where a downloaded file is kept; `keras.utils.get_file`'s
            default (`~/.keras`) when `None`.
        counts: optional `collections.Counter` filled as in `parse_ding`, plus
            `undecodable_lines`: lines that are not UTF-8, skipped (and logged with
            their line numbers) rather than failing the whole corpus.
        progress: bool. Show a `tqdm` progress bar over the lines on stderr.

    Returns:
        List of about 390k `(german, english)` tuples, deduplicated (see `parse_ding`
        and `clean_ding_entry` for the rules).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file holds no pair.

    Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "de-en")
    >>> with open(path, "w", encoding="utf-8") as file:
    ...     _ = file.write("Hund {m} | Hunde {pl} :: dog | dogs\\n")
    >>> load_ding(path)
    [('Hund', 'dog'), ('Hunde', 'dogs')]
    """
    if path is None:
        path = default_ding_path()
    path = _fetch(path, cache_dir)
    counts = Counter() if counts is None else counts
    undecodable = []
    with _open_text(path, binary=True) as file:
        lines = file
        if progress:
            lines = tqdm.tqdm(file, desc="Parsing", unit=" lines", file=sys.stderr)
        pairs = parse_ding(_utf8_lines(lines, undecodable), counts)
    counts["undecodable_lines"] += len(undecodable)
    if undecodable:
        shown = ", ".join(map(str, undecodable[:10])) + (", ..." if len(undecodable) > 10 else "")
        logger.warning("%s: skipped %d line(s) that are not UTF-8: line %s", path,
                       len(undecodable), shown)
    _check_not_empty(pairs, path, "Ding lines (`German :: English`)")
    return pairs


def load_tsv(path, cache_dir=None):
    """Loads a tab-separated file of `source<TAB>target` pairs.

    Blank lines are skipped; every other line must hold exactly two fields.

    Args:
        path: str. A local file or a URL (see `load_ding`).
        cache_dir: str. Where a downloaded file is kept.

    Returns:
        List of `(source, target)` tuples, in file order.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a line does not hold two fields, or the file holds no pair.

    Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "pairs.tsv")
    >>> write_tsv(path, [("Guten Morgen.", "Good morning.")])
    >>> load_tsv(path)
    [('Guten Morgen.', 'Good morning.')]
    """
    path = _fetch(path, cache_dir)
    pairs = list(iter_tsv(path))
    _check_not_empty(pairs, path, "tab-separated pairs")
    return pairs


def iter_tsv(path):
    """Yields the `(source, target)` pairs of a local TSV file one at a time, as
    `load_tsv` reads them (blank lines skipped, any other line two fields).

    Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "pairs.tsv")
    >>> write_tsv(path, [("Danke.", "Thanks.")])
    >>> list(iter_tsv(path))
    [('Danke.', 'Thanks.')]
    """
    with _open_text(path) as file:
        for number, line in enumerate(file, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != 2:
                raise ValueError(
                    f"Line {number} of `{path}` must hold two tab-separated fields "
                    f"(source<TAB>target), but it holds {len(fields)}. "
                    f"Received: {line[:80]!r}"
                )
            yield fields[0].strip(), fields[1].strip()


def write_tsv(path, pairs: Iterable):
    """Writes pairs as `source<TAB>target` lines, readable by `load_tsv`.

    Tabs, newlines and other whitespace runs inside a text become one space.

    Args:
        path: str. The file to write (UTF-8).
        pairs: iterable of `(source, target)` string pairs.

    Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "pairs.tsv")
    >>> write_tsv(path, [("a\\tb", "c\\nd")])
    >>> open(path, encoding="utf-8").read()
    'a b\\tc d\\n'
    """
    with open(path, "w", encoding="utf-8", newline="\n") as file:
        for source, target in pairs:
            source = _SPACES.sub(" ", source).strip()
            target = _SPACES.sub(" ", target).strip()
            file.write(f"{source}\t{target}\n")


def load_parallel(source_path, target_path, cache_dir=None):
    """Loads two aligned plain-text files, one sentence a line (the WMT/Moses layout).

    Line `i` of `source_path` translates line `i` of `target_path`. Pairs where
    either side is blank are dropped.

    Args:
        source_path: str. The source-language file, local or a URL.
        target_path: str. The target-language file, local or a URL.
        cache_dir: str. Where downloaded files are kept.

    Returns:
        List of `(source, target)` tuples, in file order.

    Raises:
        FileNotFoundError: a file does not exist.
        ValueError: the files have different line counts, or hold no pair.

    Example:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> for name, text in [("train.de", "Hallo.\\nDanke.\\n"), ("train.en", "Hello.\\nThanks.\\n")]:
    ...     with open(os.path.join(folder, name), "w", encoding="utf-8") as file:
    ...         _ = file.write(text)
    >>> load_parallel(os.path.join(folder, "train.de"), os.path.join(folder, "train.en"))
    [('Hallo.', 'Hello.'), ('Danke.', 'Thanks.')]
    """
    source_path = _fetch(source_path, cache_dir)
    target_path = _fetch(target_path, cache_dir)
    with _open_text(source_path) as file:
        sources = file.read().splitlines()
    with _open_text(target_path) as file:
        targets = file.read().splitlines()
    if len(sources) != len(targets):
        raise ValueError(
            "`source_path` and `target_path` must have the same number of lines (one "
            f"sentence a line, aligned), but `{source_path}` has {len(sources)} lines and "
            f"`{target_path}` has {len(targets)}. Check that the files belong together."
        )
    pairs = [
        (source.strip(), target.strip())
        for source, target in zip(sources, targets, strict=True)
        if source.strip() and target.strip()
    ]
    _check_not_empty(pairs, source_path, "aligned lines")
    return pairs


def _fetch(path, cache_dir):
    """Returns a local path for `path`, downloading a URL with `keras.utils.get_file`."""
    path = os.fspath(path)
    if path.startswith(_URL_SCHEMES):
        name = os.path.basename(path.rstrip("/")) or "corpus"
        if cache_dir is not None:
            os.makedirs(cache_dir, exist_ok=True)  # else get_file falls back to /tmp/.keras
        return keras.utils.get_file(name, origin=path, cache_dir=cache_dir)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"Corpus file not found: `{path}`. For the Ding corpus run "
            "`apt-get install trans-de-en` (it installs /usr/share/trans/de-en), or pass "
            "the path or URL of a downloaded copy."
        )
    return path


def _open_text(path, binary=False):
    opener = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}.get(
        os.path.splitext(path)[1], open
    )
    return opener(path, "rb") if binary else opener(path, "rt", encoding="utf-8")


def _utf8_lines(binary_lines, undecodable):
    """The lines that decode as UTF-8; the numbers of the others go to `undecodable`."""
    for number, raw in enumerate(binary_lines, start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError:
            undecodable.append(number)


def _check_not_empty(pairs, path, expected):
    if not pairs:
        raise ValueError(
            f"The corpus `{path}` holds no pairs. Expected {expected}; check the file "
            "and its format."
        )
