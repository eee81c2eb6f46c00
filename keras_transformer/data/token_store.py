"""Tokenized splits on disk, read through memory maps (as fairseq's `.bin`/`.idx` files).

`prepare` tokenizes each split once; `train` then reads token ids, never text. A split
`NAME` of a data folder is three files:

- `NAME.source.bin`, `NAME.target.bin`: every pair's piece ids, one after the other,
  without start or end ids, as `uint16` where the vocabulary has at most 65,536 pieces
  (else `int32`);
- `NAME.index.npy`: `int64 (N + 1, 2)`, where pair `i`'s source pieces are
  `source[index[i, 0]:index[i + 1, 0]]` and its target pieces
  `target[index[i, 1]:index[i + 1, 1]]`;
- `NAME.sentences.npy`: `bool (N,)`, whether pair `i` is a sentence pair
  (`is_sentence_pair`), for `train --sentences-only`.

`tokens.json` records the dtype, the pair and token counts of each split and the MD5 of
the `tokenizer.model` that wrote them, so ids from another tokenizer are never read.
Writing streams the split's TSV file in chunks, so memory stays at one chunk plus the
index; each file is written under a temporary name and renamed when complete.
"""

import itertools
import json
import os
import sys
import uuid

import numpy as np
import tqdm

from keras_transformer.data.corpora import iter_tsv
from keras_transformer.data.split import is_sentence_pair
from keras_transformer.data.tokenizer_files import load_tokenizer, tokenizer_md5
from keras_transformer.folders import REPORT_FILE, TOKENS_FILE

_SUFFIXES = {"source": ".source.bin", "target": ".target.bin", "index": ".index.npy",
             "sentences": ".sentences.npy"}


def store_files(data_dir, split):
    """The four files of `split`, by role (`source`, `target`, `index`, `sentences`).

    Example:
    >>> store_files("data", "train")["index"]
    'data/train.index.npy'
    """
    return {role: os.path.join(data_dir, split + suffix) for role, suffix in _SUFFIXES.items()}


def token_dtype(vocabulary_size):
    """`uint16` for a vocabulary of at most 65,536 pieces, else `int32`.

    Example:
    >>> token_dtype(37000), token_dtype(100_000)
    ('uint16', 'int32')
    """
    return "uint16" if vocabulary_size <= 2**16 else "int32"


def _tokenizer_dtype(tokenizer):
    """The token dtype of both sides (an imported model's source side has its own size)."""
    return token_dtype(max(tokenizer.vocabulary_size,
                           getattr(tokenizer, "source_vocabulary_size", 0)))


def write_split(data_dir, split, pairs, tokenizer, chunk_size=20_000, progress=False,
                total=None, reverse=False):
    """Tokenizes `pairs` and writes them as the token files of `split`.

    Args:
        data_dir: str. The data folder.
        split: str. The split's name (`"train"`, `"validation"`, `"test"`).
        pairs: iterable of `(source, target)` strings, read once, a chunk at a time.
        tokenizer: a `Tokenizer`.
        chunk_size: int. Pairs tokenized per call.
        progress: bool. Show a progress bar on stderr.
        total: int or `None`. The number of pairs, for the progress bar.
        reverse: bool. The pairs are `(english, german)`: `is_sentence_pair`, which
            reads the German side first, gets them swapped back.

    Returns:
        Dict with `pairs`, `source_tokens` and `target_tokens`.

    Example:
    >>> import tempfile
    >>> from keras_transformer.data import train_tokenizer
    >>> tokenizer = train_tokenizer(["Guten Tag.", "Good day."] * 5, vocabulary_size=30)
    >>> folder = tempfile.mkdtemp()
    >>> write_split(folder, "test", [("Guten Tag.", "Good day.")], tokenizer)["pairs"]
    1
    """
    files = store_files(data_dir, split)
    # Names of this writer's own: several workers may tokenize a shared folder at once
    # (they write the same bytes, and each rename is atomic).
    unique = uuid.uuid4().hex
    partial = {role: f"{path}.partial-{unique}" for role, path in files.items()}
    try:
        counts = _write_partial(partial, pairs, tokenizer, split, chunk_size, progress, total,
                                reverse)
    except BaseException:
        for path in partial.values():
            if os.path.exists(path):
                os.remove(path)
        raise
    for role in files:
        os.replace(partial[role], files[role])
    return counts


def _write_partial(partial, pairs, tokenizer, split, chunk_size, progress, total, reverse):
    dtype = _tokenizer_dtype(tokenizer)
    offsets, flags = [np.zeros((1, 2), "int64")], []
    counts = np.zeros(2, "int64")
    bar = tqdm.tqdm(total=total, desc=f"Tokenizing {split}", unit=" pairs", file=sys.stderr,
                    disable=not progress, mininterval=1.0)
    with open(partial["source"], "wb") as sources, open(partial["target"], "wb") as targets:
        iterator = iter(pairs)
        while chunk := list(itertools.islice(iterator, chunk_size)):
            lengths = np.zeros((len(chunk), 2), "int64")
            for side, handle, encode in ((0, sources, tokenizer.encode_as_ids),
                                         (1, targets, tokenizer.encode_targets_as_ids)):
                ids = encode([pair[side] for pair in chunk])
                lengths[:, side] = [len(row) for row in ids]
                flat = np.fromiter(itertools.chain.from_iterable(ids), dtype,
                                   count=int(lengths[:, side].sum()))
                flat.tofile(handle)
            offsets.append(counts + np.cumsum(lengths, axis=0))
            counts += lengths.sum(axis=0)
            flags.append(np.fromiter((is_sentence_pair(*(pair[::-1] if reverse else pair))
                                      for pair in chunk), bool, count=len(chunk)))
            bar.update(len(chunk))
    bar.close()
    index = np.concatenate(offsets)
    for role, array in (("index", index), ("sentences", np.concatenate(flags or [[]]))):
        with open(partial[role], "wb") as file:
            np.save(file, array.astype(bool) if role == "sentences" else array)
    return {"pairs": len(index) - 1, "source_tokens": int(counts[0]),
            "target_tokens": int(counts[1])}


def write_manifest(data_dir, splits, tokenizer):
    """Writes `tokens.json`: the dtype, each split's counts, the tokenizer's MD5 and the
    size and modification time of each split's TSV file (the text the ids came from)."""
    manifest = {"dtype": _tokenizer_dtype(tokenizer),
                "vocabulary_size": tokenizer.vocabulary_size,
                "tokenizer_md5": tokenizer_md5(data_dir),
                "texts": _text_stamps(data_dir),
                "splits": splits}
    path = os.path.join(data_dir, TOKENS_FILE)
    partial = f"{path}.partial-{uuid.uuid4().hex}"
    with open(partial, "w", encoding="utf-8") as file:
        json.dump(manifest, file, indent=2)
    os.replace(partial, path)
    return manifest


def _text_stamps(data_dir):
    stamps = {}
    for split in ("train", "validation", "test"):
        path = os.path.join(data_dir, f"{split}.tsv")
        if os.path.isfile(path):
            status = os.stat(path)
            stamps[split] = [status.st_size, status.st_mtime_ns]
    return stamps


def read_manifest(data_dir):
    """`tokens.json` of a data folder, or `None` where it is missing or stale: written with
    another `tokenizer.model`, or before a split's TSV file changed."""
    try:
        with open(os.path.join(data_dir, TOKENS_FILE), encoding="utf-8") as file:
            manifest = json.load(file)
    except (OSError, ValueError):
        return None
    if manifest.get("tokenizer_md5") != tokenizer_md5(data_dir):
        return None
    if manifest.get("texts") != _text_stamps(data_dir):
        return None
    return manifest


def tokenize_folder(data_dir, progress=False):
    """`tokens.json` of a data folder, tokenizing its splits first where they are missing
    or were written with another `tokenizer.model` (e.g. a folder from an earlier version,
    or one written by hand: `train.tsv`, `validation.tsv`, `tokenizer.model`).

    Example:
    >>> import tempfile
    >>> from keras_transformer.data import train_tokenizer, write_tsv
    >>> folder = tempfile.mkdtemp()
    >>> write_tsv(os.path.join(folder, "train.tsv"), [("Guten Tag.", "Good day.")] * 3)
    >>> _ = train_tokenizer(["Guten Tag.", "Good day."] * 5,
    ...                     os.path.join(folder, "tokenizer.model"), vocabulary_size=30)
    >>> tokenize_folder(folder)["splits"]["train"]["pairs"]
    3
    """
    manifest = read_manifest(data_dir)
    if manifest is not None:
        return manifest
    tokenizer = load_tokenizer(data_dir)
    try:  # whether `prepare` swapped the sides (for the sentence-pair flags)
        with open(os.path.join(data_dir, REPORT_FILE), encoding="utf-8") as file:
            reverse = bool(json.load(file).get("reverse"))
    except (OSError, ValueError):
        reverse = False
    splits = {}
    for split in ("train", "validation", "test"):
        path = os.path.join(data_dir, f"{split}.tsv")
        if os.path.isfile(path):
            splits[split] = write_split(data_dir, split, iter_tsv(path), tokenizer,
                                        progress=progress, reverse=reverse)
    return write_manifest(data_dir, splits, tokenizer)


class TokenStore:
    """One tokenized split of a data folder, read through memory maps.

    Nothing is read into memory but the index (16 bytes a pair) and what is sliced.

    Args:
        data_dir: str. A data folder written by `prepare`.
        split: str. `"train"`, `"validation"` or `"test"`.
        dtype: str. The dtype of the token files (from `tokens.json`).

    Example:
    >>> import tempfile
    >>> from keras_transformer.data import train_tokenizer
    >>> tokenizer = train_tokenizer(["Guten Tag.", "Good day."] * 5, vocabulary_size=30)
    >>> folder = tempfile.mkdtemp()
    >>> _ = write_split(folder, "train", [("Guten Tag.", "Good day.")] * 3, tokenizer)
    >>> store = TokenStore(folder, "train", "uint16")
    >>> len(store), tokenizer.decode_ids([store.target(2)])
    (3, ['Good day.'])
    """

    def __init__(self, data_dir, split, dtype):
        files = store_files(data_dir, split)
        for path in files.values():
            if not os.path.isfile(path):
                raise FileNotFoundError(
                    f"`{path}` is missing: the data folder `{data_dir}` has no tokenized "
                    f"`{split}` split. Run `keras-transformer prepare --output {data_dir}` "
                    "again (or pass a folder it wrote).")
        self.data_dir, self.split = data_dir, split
        self.index = np.load(files["index"])
        self.sentences = np.load(files["sentences"])
        # An empty file cannot be memory-mapped.
        self.source_ids, self.target_ids = (
            np.memmap(files[side], dtype=dtype, mode="r") if os.path.getsize(files[side])
            else np.zeros(0, dtype) for side in ("source", "target"))
        self.source_lengths = np.diff(self.index[:, 0]).astype(np.int32)
        self.target_lengths = np.diff(self.index[:, 1]).astype(np.int32)

    def __len__(self):
        return len(self.index) - 1

    def source(self, i):
        """The source pieces of pair `i` (a read-only array)."""
        return self.source_ids[self.index[i, 0]:self.index[i + 1, 0]]

    def target(self, i):
        """The target pieces of pair `i` (a read-only array)."""
        return self.target_ids[self.index[i, 1]:self.index[i + 1, 1]]
