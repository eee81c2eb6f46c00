"""`prepare`: parallel text to split files, a tokenizer, tokenized splits and a report.

It reads any mix of aligned file pairs, TSV files and the Ding dictionary (see
`keras_transformer.data.sources`), in one pass that streams the pairs:

1. **Clean.** Pairs with an empty side are dropped everywhere; exact duplicate pairs are
   kept once; training pairs must pass `CleaningRules` (Moses' `clean-corpus-n`). Held-out
   pairs are otherwise kept as they are, so a test set stays the set.
2. **Split.** Ding pairs follow the project's rule (`split_pairs`, `shared/DATA.md`).
   Other pairs are held out by a stable hash of their source side, at a rate that gives
   about `held_out_pairs` pairs each to validation and test (at most 5% each), capped at
   `held_out_pairs`. Files given for validation or test replace that split, and training
   pairs whose source is in a held-out split are dropped.
3. **Write** `train.tsv`, `validation.tsv`, `test.tsv` (source TAB target).
4. **Tokenizer.** `tokenizer.model` is trained on a seeded sample of at most
   `input_sentence_size` training texts.
5. **Tokenize** every split once into memory-mapped token files (`TokenStore`), which
   `train` reads on every backend.
6. **Report** `report.json`: counts of everything dropped (with line numbers where a line
   was bad), the splits, the unknown-token share and the padding efficiency of the
   training batches next to naive batching.

Memory stays bounded by the tokenizer's sample, the duplicate filter (an 8-byte digest a
pair, about 80 bytes as a Python set) and the token index (16 bytes a pair).
"""

import contextlib
import hashlib
import json
import logging
import os
import random
import sys
import time

import numpy as np
import tqdm

from keras_transformer.data.corpora import _SPACES, default_ding_path, iter_tsv, load_tsv
from keras_transformer.data.sources import (
    CleaningRules,
    DingFile,
    InputReport,
    ParallelFiles,
    TsvFile,
)
from keras_transformer.data.split import sentence_pairs_only, split_pairs
from keras_transformer.data.token_store import (
    TokenStore,
    store_files,
    write_manifest,
    write_split,
)
from keras_transformer.data.tokenizer import train_tokenizer
from keras_transformer.data.tokenizer_files import copy_tokenizer, load_tokenizer, remove_tokenizer
from keras_transformer.folders import REPORT_FILE, TOKENIZER_FILE, TOKENS_FILE, TRAIN_FILE
from keras_transformer.special_tokens import UNK_ID

logger = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")
MAX_HELD_OUT_SHARE = 0.05
_DROPPED = ("empty", "duplicate", "too_short", "too_long", "ratio", "held_out_overlap",
            "held_out_overflow")


def prepare(
    output_dir,
    corpus=None,
    vocabulary_size=8000,
    tokens_per_batch=25_000,
    max_sequence_length=256,
    input_sentence_size=500_000,
    seed=0,
    progress=True,
    *,
    parallel=(),
    tsv=(),
    reverse=False,
    validation=None,
    test=None,
    held_out_pairs=2000,
    cleaning=None,
    tokenizer=None,
):
    """Prepares parallel text for training and returns the report written to `report.json`.

    Args:
        output_dir: str. Folder for the outputs, created if missing.
        corpus: str. Ding corpus path or URL; the default input when neither `parallel`
            nor `tsv` is given (see `load_ding` for its default path).
        vocabulary_size: int. Shared BPE vocabulary size. Defaults to `8000`.
        tokens_per_batch: int. Token budget per side for the padding figures.
        max_sequence_length: int. Longest sequence for the padding figures (longer pairs
            are counted as dropped). Defaults to `256`.
        input_sentence_size: int. Most texts sampled to train the tokenizer.
        seed: int. Seed of the tokenizer's sample and the batch order of the figures.
        progress: bool. Show progress bars on stderr. Defaults to `True`.
        parallel: list of `(source_file, target_file)`: aligned files, one pair a line.
        tsv: list of TSV files, `source<TAB>target` a line.
        reverse: bool. Swap the sides of `tsv` and `corpus` input (e.g. English to German
            from the German-English Ding file).
        validation: `(source_file, target_file)` or `None`: the validation split, as given.
        test: `(source_file, target_file)` or `None`: the test split, as given.
        held_out_pairs: int. About how many pairs the hash split holds out for each of
            validation and test (at most this many). Defaults to `2000`.
        cleaning: `CleaningRules` for training pairs; `CleaningRules()` when `None`.
        tokenizer: str or `None`. A model folder whose tokenizer to use instead of
            training one (e.g. an imported OPUS-MT model, to fine-tune it); its files
            are copied into `output_dir`.

    Returns:
        The report as a dict (see `report.json`).

    Example:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> corpus = os.path.join(folder, "de-en")
    >>> with open(corpus, "w", encoding="utf-8") as file:
    ...     _ = file.write("Hund {m} | Hunde {pl} :: dog | dogs\\n" * 3)
    ...     _ = file.write("Wie spät ist es? :: What time is it?\\n")
    >>> report = prepare(os.path.join(folder, "out"), corpus, vocabulary_size=50,
    ...                  tokens_per_batch=64, max_sequence_length=16, progress=False)
    >>> report["splits"]["test"]["pairs"], sorted(os.listdir(os.path.join(folder, "out")))[:4]
    (1, ['report.json', 'test.index.npy', 'test.sentences.npy', 'test.source.bin'])
    """
    cleaning = CleaningRules() if cleaning is None else cleaning
    tokenizer_dir = tokenizer
    if tokenizer_dir is not None:
        load_tokenizer(tokenizer_dir)  # a folder without a tokenizer stops here, first
    if reverse and not tsv and corpus is None and parallel:
        logger.warning("--reverse swaps the sides of --tsv and --corpus input only; for "
                       "aligned files, swap --source and --target instead.")
    inputs = [ParallelFiles(*files) for files in parallel] + [TsvFile(path, reverse)
                                                               for path in tsv]
    if corpus is not None or not inputs:
        inputs.insert(0, DingFile(default_ding_path() if corpus is None else corpus, reverse))
    given = {"validation": validation, "test": test}
    for name, files in given.items():
        if files is not None and len(files) != 2:
            raise ValueError(f"`{name}` must be `(source_file, target_file)`. "
                             f"Received: {name}={files!r}")
    if held_out_pairs < 0:
        raise ValueError("`held_out_pairs` (--held-out-pairs) must be 0 or more. "
                         f"Received: held_out_pairs={held_out_pairs}")
    os.makedirs(output_dir, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):  # its token files are stale from here on
        os.remove(os.path.join(output_dir, TOKENS_FILE))
    writer = _SplitWriter(output_dir, held_out_pairs, cleaning, seed, input_sentence_size)
    try:
        reports = _read_inputs(writer, inputs, given, held_out_pairs, progress)
    except BaseException:
        writer.abort()  # no partial split file stays behind
        raise
    counts = writer.close()
    if not counts["train"]:
        raise ValueError(
            f"No training pair is left in {', '.join(source.name for source in inputs)}: "
            f"{writer.dropped_summary()}. Check the files and their format.")
    if not counts["validation"]:
        logger.warning(
            "The validation split is empty, and `train` validates on it: give validation "
            "files (--validation-source and --validation-target), or let the hash split "
            "hold out pairs (--held-out-pairs, now %d).", held_out_pairs)

    start = time.perf_counter()
    if tokenizer_dir is None:
        remove_tokenizer(output_dir)
        tokenizer = train_tokenizer(writer.sample, os.path.join(output_dir, TOKENIZER_FILE),
                                    vocabulary_size=vocabulary_size,
                                    input_sentence_size=input_sentence_size, seed=seed)
    else:
        copy_tokenizer(tokenizer_dir, output_dir)
        tokenizer = load_tokenizer(output_dir)
    training_seconds = time.perf_counter() - start
    sample_texts, writer.sample = len(writer.sample), None
    tokens = {}
    for name in SPLITS:
        path = os.path.join(output_dir, f"{name}.tsv")
        tokens[name] = write_split(output_dir, name, iter_tsv(path), tokenizer,
                                   progress=progress, total=counts[name], reverse=reverse)
    manifest = write_manifest(output_dir, tokens, tokenizer)
    report = {
        "corpus": next((source.path for source in inputs if isinstance(source, DingFile)),
                       None),
        "inputs": [report.to_dict() for report in reports],
        "reverse": reverse,
        "cleaning": {**vars(cleaning), "held_out_pairs": held_out_pairs,
                     "held_out_rate": writer.rate,
                     "given": {name: files for name, files in given.items() if files}},
        "pairs": _pair_counts(reports, writer, counts),
        **_token_figures(output_dir, manifest, tokens, tokenizer, training_seconds,
                         sample_texts),
        "padding": _padding(TokenStore(output_dir, "train", manifest["dtype"]),
                            tokens_per_batch, max_sequence_length, seed),
    }
    with open(os.path.join(output_dir, REPORT_FILE), "w", encoding="utf-8") as file:
        json.dump(report, file, indent=2, ensure_ascii=False)
    return report


def _read_inputs(writer, inputs, given, held_out_pairs, progress):
    """Reads the given held-out files, then every input, into `writer`; returns each
    input's `InputReport`."""
    reports = []
    for name, files in given.items():
        if files is not None:
            report = InputReport(f"{name}: {files[0]} + {files[1]}")
            held_out = ParallelFiles(*files)
            held_out.count_lines()  # stops on files of different lengths
            for source, target in held_out.pairs(report):
                writer.add_given(name, source, target)
            reports.append(report)
            _warn_problems(report)
    lines = {source: source.count_lines() for source in inputs
             if not isinstance(source, DingFile)}
    if not all(given.values()) and held_out_pairs > 0 and sum(lines.values()):
        writer.rate = min(MAX_HELD_OUT_SHARE, held_out_pairs / sum(lines.values()))
    for source in inputs:
        report = InputReport(source.name)
        if isinstance(source, DingFile):
            splits = split_pairs(source.load(report, progress=progress))
            for name in SPLITS:
                for pair in splits[name]:
                    writer.add(*(pair[::-1] if source.reverse else pair), split=name)
        else:
            for pair in tqdm.tqdm(source.pairs(report), total=lines[source], unit=" pairs",
                                  desc=f"Reading {_short_name(source)}",
                                  file=sys.stderr, disable=not progress, mininterval=1.0):
                writer.add(*pair)
        reports.append(report)
        _warn_problems(report)
    return reports


def _token_figures(output_dir, manifest, tokens, tokenizer, training_seconds, sample_texts):
    stores = {name: TokenStore(output_dir, name, manifest["dtype"]) for name in SPLITS}
    return {
        "splits": {name: {"pairs": len(store), "sentence_pairs": int(store.sentences.sum())}
                   for name, store in stores.items()},
        "tokens": tokens,
        "tokenizer": {
            "vocabulary_size": tokenizer.vocabulary_size,
            "training_seconds": round(training_seconds, 2),
            "sample_texts": sample_texts,
            "unknown_share": {name: _unknown_share(output_dir, name, manifest["dtype"])
                              for name in SPLITS},
        },
    }


class _SplitWriter:
    """Routes each pair to its split file, dropping and counting as the rules say."""

    def __init__(self, output_dir, held_out_pairs, cleaning, seed, sample_size):
        self.paths = {name: os.path.join(output_dir, f"{name}.tsv") for name in SPLITS}
        self.files = {name: open(path + ".partial", "w", encoding="utf-8", newline="\n")
                      for name, path in self.paths.items()}
        self.counts = dict.fromkeys(SPLITS, 0)
        self.dropped = dict.fromkeys(_DROPPED, 0)
        self.given = set()
        self.held_out_sources = {"validation": set(), "test": set()}
        self.ruled_train_sources = set()  # Ding's training sources: never hash-held-out
        self.seen = set()
        self.cap, self.cleaning, self.rate = held_out_pairs, cleaning, 0.0
        self.sample, self.sample_size, self.texts = [], sample_size, 0
        self.random = random.Random(seed)

    def add_given(self, split, source, target):
        source, target = _SPACES.sub(" ", source).strip(), _SPACES.sub(" ", target).strip()
        if not source or not target:
            self.dropped["empty"] += 1
            return
        self.given.add(split)
        self.held_out_sources[split].add(source)
        self._write(split, source, target)

    def add(self, source, target, split=None):
        """Adds a corpus pair; `split` is set for Ding pairs (the project's rule)."""
        source, target = _SPACES.sub(" ", source).strip(), _SPACES.sub(" ", target).strip()
        if not source or not target:
            self.dropped["empty"] += 1
            return
        key = hashlib.blake2b(f"{source}\t{target}".encode(), digest_size=8).digest()
        if key in self.seen:
            self.dropped["duplicate"] += 1
            return
        self.seen.add(key)
        ruled = split is not None
        if not ruled:
            split = self._hash_split(source)
        if split != "train" and split in self.given:
            split = "train"
        if ruled and split == "train":
            self.ruled_train_sources.add(source)
        elif ruled and split is not None:
            self.held_out_sources[split].add(source)
        if split == "train":
            if any(source in held_out for held_out in self.held_out_sources.values()):
                self.dropped["held_out_overlap"] += 1
                return
            reason = self.cleaning.reject(source, target)
            if reason:
                self.dropped[reason] += 1
                return
            self._sample(source)
            self._sample(target)
        self._write(split, source, target)

    def _hash_split(self, source):
        share = int(hashlib.md5(source.encode()).hexdigest()[:12], 16) / 16**12
        split = "test" if share < self.rate else "validation" if share < 2 * self.rate else (
            "train")
        if split == "train" or split in self.given or source in self.ruled_train_sources:
            return "train"
        if self.counts[split] >= self.cap:
            if source in self.held_out_sources[split]:
                self.dropped["held_out_overflow"] += 1
                return None
            return "train"
        self.held_out_sources[split].add(source)
        return split

    def _sample(self, text):
        """Reservoir sampling (Algorithm R) of the tokenizer's training texts."""
        if len(self.sample) < self.sample_size:
            self.sample.append(text)
        else:
            slot = self.random.randrange(self.texts + 1)
            if slot < self.sample_size:
                self.sample[slot] = text
        self.texts += 1

    def _write(self, split, source, target):
        if split is None:
            return
        self.files[split].write(f"{source}\t{target}\n")
        self.counts[split] += 1

    def dropped_summary(self):
        return ", ".join(f"{count} {name.replace('_', ' ')}" for name, count in
                         self.dropped.items() if count) or "no pair was read"

    def abort(self):
        for name, file in self.files.items():
            file.close()
            os.remove(self.paths[name] + ".partial")

    def close(self):
        self.seen = None  # the duplicate filter's memory, free for the tokenizer
        for name, file in self.files.items():
            file.close()
            os.replace(self.paths[name] + ".partial", self.paths[name])
        return self.counts


def _short_name(source):
    if isinstance(source, ParallelFiles):
        return f"{os.path.basename(source.source)} + {os.path.basename(source.target)}"
    return os.path.basename(source.path)


def _warn_problems(report):
    for kind, (count, lines) in report.problems.items():
        if lines:
            shown = ", ".join(map(str, lines)) + (", ..." if count > len(lines) else "")
            logger.warning("%s: skipped %d %s: line %s", report.name, count,
                           kind.replace("_", " "), shown)


def _pair_counts(reports, writer, counts):
    problems = {}
    for report in reports:
        for kind, (count, _) in report.problems.items():
            problems[kind] = problems.get(kind, 0) + count
    return {
        "kept": sum(counts.values()),
        "lines": sum(report.lines for report in reports),
        # Ding's own cleaning (see `parse_ding`), the names earlier reports used:
        "duplicates_dropped": writer.dropped["duplicate"] + problems.get("duplicates", 0),
        "empty_entries_dropped": problems.get("empty_entries", 0),
        "misaligned_lines_skipped": problems.get("misaligned_lines", 0),
        "malformed_lines_skipped": problems.get("malformed_lines", 0),
        "undecodable_lines_skipped": problems.get("undecodable_lines", 0),
        "lines_without_one_tab_skipped": problems.get("lines_without_one_tab", 0),
        **{f"{name}_dropped": count for name, count in writer.dropped.items()
           if name != "duplicate"},
    }


def _unknown_share(output_dir, split, dtype, chunk=1 << 24):
    """The share of `UNK_ID` among a split's pieces, read in chunks rather than through the
    memory map, whose pages would stay in this process's RSS."""
    unknown = pieces = 0
    for side in ("source", "target"):
        with open(store_files(output_dir, split)[side], "rb") as file:
            while block := file.read(chunk):
                ids = np.frombuffer(block, dtype)
                unknown += int(np.count_nonzero(ids == UNK_ID))
                pieces += len(ids)
    return unknown / pieces if pieces else 0.0


def _padding(store, tokens_per_batch, max_sequence_length, seed):
    """Padding of the training batches (`StoreBatches`) next to naive batching: the same
    pairs in a random order, as many a batch as the bucketed batches hold on average."""
    from keras_transformer.data.batch_plan import StoreBatches

    batches = StoreBatches(store, tokens_per_batch, max_sequence_length, seed=seed)
    bucketed = batches.statistics()
    limit = max_sequence_length - 1
    lengths = np.stack([np.minimum(store.source_lengths[batches.pairs], limit),
                        np.minimum(store.target_lengths[batches.pairs], limit)], 1) + 1
    lengths = lengths[np.random.default_rng(seed).permutation(len(lengths))]
    size = max(round(bucketed["sentences"] / bucketed["batches"]), 1)
    naive = dict(batches=0, sentences=len(lengths), real_tokens=int(lengths.sum()), tokens=0,
                 largest_side_tokens=0)
    for start in range(0, len(lengths), size):
        rows = lengths[start:start + size]
        naive["batches"] += 1
        naive["tokens"] += 2 * len(rows) * int(rows.max())
        naive["largest_side_tokens"] = max(naive["largest_side_tokens"],
                                           len(rows) * int(rows.max()))
    naive["padding_efficiency"] = naive["real_tokens"] / max(naive["tokens"], 1)
    return {"tokens_per_batch": tokens_per_batch, "max_sequence_length": max_sequence_length,
            "long_pairs_dropped": len(store) - len(batches.pairs),
            "bucketed": bucketed, "naive": naive}


def load_training_pairs(data_dir, sentences_only=False):
    """The training pairs of a folder written by `prepare`, or only its sentence pairs.

    For small folders and your own code: it loads every pair into memory (`train` reads
    the tokenized splits instead). The Ding corpus is 96% words and phrases; the test split
    holds sentences only. Under a budget of minutes, training on the sentence pairs alone
    gives far better sentence translations (see `keras_transformer.demo`).

    Example:
    >>> import tempfile
    >>> from keras_transformer.data import write_tsv
    >>> data_dir = tempfile.mkdtemp()
    >>> write_tsv(os.path.join(data_dir, "train.tsv"), [("Aas", "carrion"),
    ...                                                 ("Ich bin hier.", "I am here.")])
    >>> load_training_pairs(data_dir, sentences_only=True)
    [('Ich bin hier.', 'I am here.')]
    """
    pairs = load_tsv(os.path.join(data_dir, TRAIN_FILE))
    if not sentences_only:
        return pairs
    sentences = sentence_pairs_only(pairs)
    if not sentences:
        raise ValueError(
            f"`sentences_only=True`, but {os.path.join(data_dir, 'train.tsv')} holds no "
            "sentence pairs. Train on every pair (`sentences_only=False`)."
        )
    return sentences
