"""The one decoder step that every decoding strategy shares.

The encoder runs once per batch, each decoder layer's cross-attention keys and values
are computed once (`Transformer.init_cache`), and each step feeds one token per
sequence, writing its self-attention keys and values into the preallocated
static-shape cache at the current position. Greedy search, beam search and sampling
all advance with `DecoderStep.__call__` (log-probabilities from `log_probs_of`); beam
search also reorders the cache with `DecoderStep.reorder`.
"""

import numpy as np
from keras import ops, tree

from keras_transformer.layers.masking import padding_mask
from keras_transformer.numerics import LOWEST_SCORE
from keras_transformer.special_tokens import END_ID, PAD_ID, START_ID


def masked_logits(logits, banned_ids=()):
    """Float32 logits with `PAD_ID`, `START_ID` and `banned_ids` set to `LOWEST_SCORE`;
    `(..., V)`."""
    logits = ops.cast(logits, "float32")
    vocabulary = ops.arange(ops.shape(logits)[-1])
    banned = ops.logical_or(ops.equal(vocabulary, PAD_ID), ops.equal(vocabulary, START_ID))
    for token_id in banned_ids:
        banned = ops.logical_or(banned, ops.equal(vocabulary, token_id))
    return ops.where(banned, LOWEST_SCORE, logits)


def check_banned_ids(banned_ids, vocabulary_size):
    """`banned_ids` as a sorted tuple of ints; a `ValueError` naming the bad id otherwise."""
    if banned_ids is None:
        return ()
    if isinstance(banned_ids, (int, str)) or not hasattr(banned_ids, "__iter__"):
        raise ValueError(f"`banned_ids` must be a list of token ids. Received: {banned_ids!r}")
    ids = []
    for token_id in banned_ids:
        if (isinstance(token_id, bool) or not isinstance(token_id, (int, np.integer))
                or not 0 <= token_id < vocabulary_size or token_id == END_ID):
            raise ValueError(
                f"`banned_ids` must hold ids in [0, {vocabulary_size}) other than the end id "
                f"{END_ID}. Received: {token_id!r} in banned_ids={list(banned_ids)!r}")
        ids.append(int(token_id))
    return tuple(sorted(set(ids)))


def log_probs_of(logits):
    """Float32 log-probabilities over the vocabulary, `PAD_ID` and `START_ID` excluded.

    Generated text never contains padding or a second start token, so their logits
    are masked before the softmax; `(..., V)` -> `(..., V)`.

    Example:
    >>> log_probs = log_probs_of(np.zeros((1, 6), "float32"))
    >>> np.exp(np.asarray(log_probs)).round(2).tolist()
    [[0.0, 0.25, 0.0, 0.25, 0.25, 0.25]]
    """
    return ops.log_softmax(masked_logits(logits), axis=-1)


class DecoderStep:
    """Encode a batch once, then advance the decoder one token at a time.

    Args:
        model: a `keras_transformer.Transformer`.
        encoder_token_ids: int `(B, S)` source ids, padded with `PAD_ID`.
        cache_length: int. Positions in the self-attention cache; the decoder can
            take at most this many steps.
        num_beams: int. Copies of each sequence (beam search); rows are ordered
            `b * num_beams + k`. Defaults to `1`.
        banned_ids: ids never generated, beside `PAD_ID` and `START_ID`.
        end_at: int, int32 scalar tensor or `None`. Force `END_ID` as the token of step
            `end_at - 1` (the last a search of `end_at` steps takes), as Hugging Face's
            `forced_eos_token_id` does. `None` (the default): no forced end.
        min_length: int. `END_ID` is never taken in the first `min_length` steps, so
            every output has at least that many tokens before its end (CTranslate2's
            `min_decoding_length`, fairseq's `--min-len`). Defaults to `0`.

    Attributes:
        cache: the current cache, as `Transformer.init_cache` returns it.

    Example:
    >>> from keras_transformer.models import build_transformer
    >>> model = build_transformer("tiny", vocabulary_size=20, num_layers=1)
    >>> step = DecoderStep(model, np.array([[5, 6, 3]], "int32"), cache_length=4)
    >>> log_probs, cache = step(np.array([2], "int32"), 0, step.cache)
    >>> tuple(log_probs.shape)
    (1, 20)
    """

    def __init__(self, model, encoder_token_ids, cache_length, num_beams=1, banned_ids=(),
                 end_at=None, min_length=0):
        self.model = model
        self.banned_ids = tuple(banned_ids)
        self.end_at = end_at
        self.min_length = min_length
        encoder_token_ids = ops.convert_to_tensor(encoder_token_ids, "int32")
        encoder_sequence = model.encode(encoder_token_ids, training=False)
        self.encoder_padding_mask = padding_mask(encoder_token_ids)
        # The beams of a sentence share its cross-attention cache (`B` rows, not `B * K`).
        self.cache = model.init_cache(encoder_sequence, cache_length,
                                      batch_size=ops.shape(encoder_sequence)[0] * num_beams)

    def __call__(self, token_ids, index, cache):
        """Feed `token_ids` `(B,)` at position `index`: -> (float32 log-probs `(B, V)`, cache)."""
        logits, cache = self.logits(token_ids, index, cache)
        return ops.log_softmax(logits, axis=-1), cache

    def logits(self, token_ids, index, cache):
        """As `__call__`, but `masked_logits` `(B, V)`: the log-probabilities plus a
        per-row constant (beam search ranks them within a row before normalizing)."""
        logits, cache = self.model.decode_step(
            ops.expand_dims(token_ids, 1), index, cache, self.encoder_padding_mask
        )
        logits = masked_logits(logits[:, 0, :], self.banned_ids)
        is_end = ops.arange(ops.shape(logits)[-1]) == END_ID
        if self.min_length:
            # Masked before the softmax, as CTranslate2 does (and as padding and the
            # banned ids are): the other tokens share the end token's probability.
            logits = ops.where(ops.logical_and(is_end, index < self.min_length)[None],
                               LOWEST_SCORE, logits)
        if self.end_at is not None:  # the limit wins over the minimum
            only_end = ops.where(is_end, 0.0, LOWEST_SCORE)
            logits = ops.where(index + 1 >= self.end_at, only_end[None], logits)
        return logits, cache

    @staticmethod
    def reorder(cache, rows):
        """Gather the self-attention cache rows `rows` `(B,)` (beam search).

        The cross-attention cache is left as it is: every beam of a sentence shares
        the same encoder output, and beams never move between sentences.
        """
        return {
            "self_attention": tree.map_structure(lambda c: ops.take(c, rows, axis=0),
                                                 cache["self_attention"]),
            "cross_attention": cache["cross_attention"],
        }
