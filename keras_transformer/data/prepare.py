"""`prepare`: corpus to split files, tokenizer and report, as `keras-transformer prepare`.

It loads the Ding corpus, splits it by the project's rule, writes
`train.tsv`, `validation.tsv` and `test.tsv` (German TAB English), trains the shared
tokenizer on the train split into `tokenizer.model`, and writes `report.json` with the
pair counts, the unknown-token share of the held-out splits and the padding efficiency of
length bucketing next to naive batching.
"""

import json
import os
import time
from collections import Counter

from keras_transformer.data.corpora import default_ding_path, load_ding, load_tsv, write_tsv
from keras_transformer.data.split import sentence_pairs_only, split_pairs
from keras_transformer.data.tokenizer import train_tokenizer
from keras_transformer.folders import REPORT_FILE, TOKENIZER_FILE, TRAIN_FILE


def prepare(
    output_dir,
    corpus=None,
    vocabulary_size=8000,
    tokens_per_batch=25_000,
    max_sequence_length=256,
    input_sentence_size=500_000,
    seed=0,
    progress=True,
):
    """Prepares a corpus for training and returns the report written to `report.json`.

    Args:
        output_dir: str. Folder for the outputs, created if missing.
        corpus: str. Ding corpus path or URL; see `load_ding` for the default.
        vocabulary_size: int. Shared BPE vocabulary size. Defaults to `8000`.
        tokens_per_batch: int. Token budget per side for the padding figures. Defaults
            to `25_000`.
        max_sequence_length: int. Longest sequence for the padding figures (longer pairs
            are counted as dropped). Defaults to `256`.
        input_sentence_size: int. Most texts sampled to train the tokenizer.
        seed: int. Seed of the tokenizer's sampling and the batch order.
        progress: bool. Show a progress bar over parsing on stderr. Defaults to `True`.

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
    >>> report["splits"]["test"]["pairs"], sorted(os.listdir(os.path.join(folder, "out")))
    (1, ['report.json', 'test.tsv', 'tokenizer.model', 'train.tsv', 'validation.tsv'])
    """
    corpus = default_ding_path() if corpus is None else corpus
    counts = Counter()
    pairs = load_ding(corpus, counts=counts, progress=progress)
    splits = split_pairs(pairs)
    os.makedirs(output_dir, exist_ok=True)
    for name, split in splits.items():
        write_tsv(os.path.join(output_dir, f"{name}.tsv"), split)

    start = time.perf_counter()
    tokenizer = train_tokenizer(
        [text for pair in splits["train"] for text in pair],
        os.path.join(output_dir, TOKENIZER_FILE),
        vocabulary_size=vocabulary_size,
        input_sentence_size=input_sentence_size,
        seed=seed,
    )
    training_seconds = time.perf_counter() - start
    from keras_transformer.data.report import compare_padding, unknown_share

    padding = compare_padding(
        splits["train"], tokenizer, tokens_per_batch, max_sequence_length, seed=seed
    )
    report = {
        "corpus": corpus,
        "pairs": {
            "kept": len(pairs),
            "duplicates_dropped": counts["duplicates"],
            "empty_entries_dropped": counts["empty_entries"],
            "misaligned_lines_skipped": counts["misaligned_lines"],
            "malformed_lines_skipped": counts["malformed_lines"],
            "undecodable_lines_skipped": counts["undecodable_lines"],
            "lines": counts["lines"],
        },
        "splits": {
            name: {"pairs": len(split), "sentence_pairs": len(sentence_pairs_only(split))}
            for name, split in splits.items()
        },
        "tokenizer": {
            "vocabulary_size": tokenizer.vocabulary_size,
            "training_seconds": round(training_seconds, 2),
            "unknown_share": {
                name: unknown_share(tokenizer, [text for pair in split for text in pair])
                for name, split in splits.items()
            },
        },
        "padding": {
            "tokens_per_batch": tokens_per_batch,
            "max_sequence_length": max_sequence_length,
            "long_pairs_dropped": len(splits["train"]) - padding["bucketed"]["sentences"],
            **padding,
        },
    }
    with open(os.path.join(output_dir, REPORT_FILE), "w", encoding="utf-8") as file:
        json.dump(report, file, indent=2)
    return report


def load_training_pairs(data_dir, sentences_only=False):
    """The training pairs of a folder written by `prepare`, or only its sentence pairs.

    The Ding corpus is 96% words and phrases; the test split holds sentences only. Under a
    budget of minutes, training on the sentence pairs alone gives far better sentence
    translations (see `keras_transformer.demo`).

    Example:
    >>> import tempfile
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
