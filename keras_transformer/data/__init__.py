"""Data: corpora and `prepare`, the split, the SentencePiece tokenizer, the tokenized splits
on disk (`TokenStore`) and their batches (`StoreBatches`, `store_dataset`), and for pairs
held in memory the tf.data pipeline (`make_dataset`) and NumPy batcher (`NumpyBatches`).

Example:
>>> from keras_transformer import data
>>> splits = data.split_pairs(data.parse_ding(["Wie spät ist es? :: What time is it?"]))
>>> splits["test"]
[('Wie spät ist es?', 'What time is it?')]
"""

from typing import TYPE_CHECKING

from keras_transformer.lazy import lazy_attributes

if TYPE_CHECKING:  # static tools (docs, IDEs) see the names; they load lazily
    from keras_transformer.data.batch_plan import BatchPlan, StoreBatches
    from keras_transformer.data.batching import (
        NumpyBatches,
        bucket_boundaries,
        token_budget_batch_sizes,
    )
    from keras_transformer.data.corpora import (
        DING_PATH,
        clean_ding_entry,
        default_ding_path,
        load_ding,
        load_parallel,
        load_tsv,
        parse_ding,
        write_tsv,
    )
    from keras_transformer.data.marian_tokenizer import MarianTokenizer
    from keras_transformer.data.pipeline import (
        batch_by_token_budget,
        encode_pairs,
        make_dataset,
        store_dataset,
        teacher_forcing,
    )
    from keras_transformer.data.prepare import load_training_pairs, prepare
    from keras_transformer.data.report import batch_statistics, compare_padding, unknown_share
    from keras_transformer.data.sources import CleaningRules
    from keras_transformer.data.split import is_sentence_pair, sentence_pairs_only, split_pairs
    from keras_transformer.data.token_store import TokenStore, tokenize_folder
    from keras_transformer.data.tokenizer import Tokenizer, train_tokenizer
    from keras_transformer.data.tokenizer_files import load_tokenizer


# Corpora, the split, the tokenizer and the NumPy batcher run on every backend; the
# `tf.data` pipeline and the padding report load TensorFlow when first used.
_MODULES = {
    "corpora": ["DING_PATH", "clean_ding_entry", "default_ding_path", "load_ding",
                "load_parallel",
    "load_tokenizer", "load_tsv", "parse_ding", "write_tsv"],
    "pipeline": ["batch_by_token_budget", "encode_pairs", "make_dataset", "store_dataset",
                 "teacher_forcing"],
    "batch_plan": ["BatchPlan", "StoreBatches"],
    "token_store": ["TokenStore", "tokenize_folder"],
    "sources": ["CleaningRules"],
    "batching": ["NumpyBatches", "bucket_boundaries", "token_budget_batch_sizes"],
    "prepare": ["load_training_pairs", "prepare"],
    "report": ["batch_statistics", "compare_padding", "unknown_share"],
    "split": ["is_sentence_pair", "sentence_pairs_only", "split_pairs"],
    "tokenizer": ["Tokenizer", "train_tokenizer"],
    "marian_tokenizer": ["MarianTokenizer"],
    "tokenizer_files": ["load_tokenizer"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _MODULES)

__all__ = [
    "BatchPlan",
    "CleaningRules",
    "MarianTokenizer",
    "DING_PATH",
    "NumpyBatches",
    "Tokenizer",
    "batch_by_token_budget",
    "batch_statistics",
    "bucket_boundaries",
    "clean_ding_entry",
    "compare_padding",
    "default_ding_path",
    "encode_pairs",
    "is_sentence_pair",
    "load_ding",
    "load_parallel",
    "load_tokenizer",
    "load_training_pairs",
    "load_tsv",
    "make_dataset",
    "parse_ding",
    "prepare",
    "sentence_pairs_only",
    "StoreBatches",
    "store_dataset",
    "split_pairs",
    "teacher_forcing",
    "token_budget_batch_sizes",
    "TokenStore",
    "tokenize_folder",
    "train_tokenizer",
    "unknown_share",
    "write_tsv",
]
