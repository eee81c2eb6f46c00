"""Data: corpora, the project's split, the SentencePiece tokenizer and the tf.data pipeline.

Example:
>>> from keras_transformer import data
>>> splits = data.split_pairs(data.parse_ding(["Wie spät ist es? :: What time is it?"]))
>>> splits["test"]
[('Wie spät ist es?', 'What time is it?')]
"""

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
from keras_transformer.data.pipeline import (
    batch_by_token_budget,
    bucket_boundaries,
    encode_pairs,
    make_dataset,
    teacher_forcing,
)
from keras_transformer.data.prepare import load_training_pairs, prepare
from keras_transformer.data.report import batch_statistics, compare_padding, unknown_share
from keras_transformer.data.split import is_sentence_pair, sentence_pairs_only, split_pairs
from keras_transformer.data.tokenizer import Tokenizer, train_tokenizer

__all__ = [
    "DING_PATH",
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
    "load_training_pairs",
    "load_tsv",
    "make_dataset",
    "parse_ding",
    "prepare",
    "sentence_pairs_only",
    "split_pairs",
    "teacher_forcing",
    "train_tokenizer",
    "unknown_share",
    "write_tsv",
]
