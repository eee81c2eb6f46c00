"""Figures that describe prepared data: unknown-token share and padding efficiency.

Padding efficiency is the share of real (non-pad) tokens among all tokens of the padded
batches, both sides together. `compare_padding` measures it for the length-bucketed
batches of `batch_by_token_budget` next to naive batching of the same examples in the
same order, with as many sentences per batch on average. This module is
TensorFlow-specific.
"""

import random

from keras_transformer.backend import require_tensorflow
from keras_transformer.data.pipeline import batch_by_token_budget, encode_pairs
from keras_transformer.special_tokens import PAD_ID, UNK_ID

tf = require_tensorflow("The padding report (`keras_transformer.data.report`)")


def unknown_share(tokenizer, texts, batch_size=4096):
    """Share of pieces that are `UNK_ID` when `tokenizer` splits `texts`.

    Args:
        tokenizer: a `Tokenizer`.
        texts: list of str.
        batch_size: int. Texts tokenized per call.

    Returns:
        float in `[0, 1]`; `0.0` for no pieces.

    Example:
    >>> from keras_transformer.data import train_tokenizer
    >>> tokenizer = train_tokenizer(["Guten Tag.", "Good day."] * 5, vocabulary_size=30)
    >>> unknown_share(tokenizer, ["Guten Tag."]), unknown_share(tokenizer, ["Zz"])
    (0.0, 0.5)
    """
    unknown = total = 0
    for start in range(0, len(texts), batch_size):
        pieces = tokenizer.tokenize(list(texts[start : start + batch_size])).flat_values
        unknown += int(tf.math.count_nonzero(pieces == UNK_ID))
        total += int(tf.size(pieces))
    return unknown / total if total else 0.0


def batch_statistics(batches):
    """Counts batches, sentences and tokens of a dataset of padded batches.

    Args:
        batches: `tf.data.Dataset` of `(features, labels)` as from `make_dataset`.

    Returns:
        Dict with `batches`, `sentences`, `real_tokens` and `tokens` (encoder and decoder
        sides together), `padding_efficiency` (`real_tokens / tokens`) and
        `largest_side_tokens` (the largest `B * S` or `B * T` of any batch).

    Example:
    >>> batch = ({"encoder_token_ids": [[5, 3], [3, 0]], "decoder_token_ids": [[2, 5], [2, 0]]},
    ...          [[5, 3], [3, 0]])
    >>> batch_statistics(tf.data.Dataset.from_tensors(batch))["padding_efficiency"]
    0.75
    """

    def add(totals, batch):
        features, _ = batch
        encoder = features["encoder_token_ids"]
        decoder = features["decoder_token_ids"]
        real = tf.math.count_nonzero(encoder != PAD_ID) + tf.math.count_nonzero(decoder != PAD_ID)
        sizes = tf.cast(tf.stack([tf.size(encoder), tf.size(decoder)]), tf.int64)
        return {
            "batches": totals["batches"] + 1,
            "sentences": totals["sentences"] + tf.cast(tf.shape(encoder)[0], tf.int64),
            "real_tokens": totals["real_tokens"] + real,
            "tokens": totals["tokens"] + tf.reduce_sum(sizes),
            "largest_side_tokens": tf.maximum(totals["largest_side_tokens"], tf.reduce_max(sizes)),
        }

    names = ("batches", "sentences", "real_tokens", "tokens", "largest_side_tokens")
    zeros = {name: tf.constant(0, tf.int64) for name in names}
    totals = {name: int(value) for name, value in batches.reduce(zeros, add).items()}
    totals["padding_efficiency"] = totals["real_tokens"] / max(totals["tokens"], 1)
    return totals


def compare_padding(pairs, tokenizer, tokens_per_batch=25_000, max_sequence_length=256, seed=0):
    """Padding efficiency of length bucketing next to naive batching of the same data.

    The pairs are shuffled with `seed`, encoded once, then batched both ways: by
    `batch_by_token_budget`, and in plain order with `padded_batch` at the average
    sentences per bucketed batch (so both give about the same number of batches).

    Args:
        pairs: list of `(source, target)` string pairs.
        tokenizer: a `Tokenizer`.
        tokens_per_batch: int. Token budget per side, as in `make_dataset`.
        max_sequence_length: int. As in `make_dataset` (longer pairs are dropped).
        seed: int. Shuffle seed.

    Returns:
        Dict with `"bucketed"` and `"naive"`, each as from `batch_statistics`.

    Example:
    >>> from keras_transformer.data import train_tokenizer
    >>> pairs = [("Ja.", "Yes."), ("Wie spät ist es heute Abend?", "What time is it tonight?")]
    >>> tokenizer = train_tokenizer([text for pair in pairs for text in pair] * 5,
    ...                             vocabulary_size=50)
    >>> result = compare_padding(pairs * 8, tokenizer, tokens_per_batch=64,
    ...                          max_sequence_length=32)
    >>> result["bucketed"]["padding_efficiency"], result["naive"]["sentences"]
    (1.0, 16)
    """
    pairs = list(pairs)
    random.Random(seed).shuffle(pairs)
    examples = encode_pairs(pairs, tokenizer, max_sequence_length).cache()
    bucketed = batch_statistics(
        batch_by_token_budget(examples, tokens_per_batch, max_sequence_length)
    )
    batch_size = max(round(bucketed["sentences"] / max(bucketed["batches"], 1)), 1)
    naive = batch_statistics(examples.padded_batch(batch_size))
    return {"bucketed": bucketed, "naive": naive}
