"""`no_repeat_ngram_size`: forbid a token that would repeat an n-gram of the output.

The remedy for looping outputs ("as this matter as this matter as ...") that fairseq
(`--no-repeat-ngram-size`) and Hugging Face (`no_repeat_ngram_size`) offer. It is not in
the paper, so it is off by default. With size `n`, a token is banned at a step when the
last `n - 1` tokens followed by it form an n-gram that already occurs in the output.
"""

from keras import ops

from keras_transformer.numerics import LOWEST_SCORE


def check_no_repeat_ngram_size(no_repeat_ngram_size):
    """Raise a `ValueError` naming the argument unless it is `None` or an int >= 0."""
    value = no_repeat_ngram_size
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                              or value < 0):
        raise ValueError(
            "`no_repeat_ngram_size` must be an int >= 0 (0 or None: off). "
            f"Received: no_repeat_ngram_size={value!r}"
        )


def block_repeated_ngrams(log_probs, tokens, index, size):
    """`log_probs` with `LOWEST_SCORE` for each token that would repeat an n-gram.

    Args:
        log_probs: float32 `(R, V)`, the scores of the token at position `index + 1`.
        tokens: int32 `(R, W)`, each row's tokens so far at positions `0..index` (the
            start token at 0; later positions are ignored).
        index: int or int32 scalar tensor. The position of the last token so far.
        size: int. `n`; `0` or `None` returns `log_probs` unchanged.

    Example (the output "5 6 5" must not continue with 6, which would repeat "5 6"):
    >>> import numpy as np
    >>> out = block_repeated_ngrams(np.zeros((1, 8), "float32"),
    ...                             np.array([[2, 5, 6, 5, 0]], "int32"), 3, 2)
    >>> np.asarray(out)[0].tolist()
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1000000000.0, 0.0]
    """
    if not size:
        return log_probs
    rows, vocabulary_size = ops.shape(log_probs)
    width = tokens.shape[1]
    starts = width - size + 1  # where an earlier n-gram can start: 0..starts-1
    if starts < 1:
        return log_probs
    index = ops.convert_to_tensor(index, "int32")
    # An n-gram starting at j is complete in the output when j + n - 1 <= index; it is
    # repeated by the next token when its first n - 1 tokens are the last n - 1 ones.
    matches = ops.arange(starts, dtype="int32")[None] + (size - 1) <= index
    for offset in range(size - 1):
        last = ops.take(tokens, ops.maximum(index - (size - 2) + offset, 0), axis=1)
        matches = matches & ops.equal(tokens[:, offset:offset + starts], last[:, None])
    # Banned tokens go to their column; the others to a spare column that is cut off.
    banned = ops.where(matches, tokens[:, size - 1:size - 1 + starts], vocabulary_size)
    row_ids = ops.broadcast_to(ops.arange(rows, dtype="int32")[:, None], (rows, starts))
    indices = ops.stack([ops.reshape(row_ids, (-1,)), ops.reshape(banned, (-1,))], axis=1)
    padded = ops.concatenate([log_probs, ops.zeros((rows, 1), log_probs.dtype)], axis=1)
    lowest = ops.full((rows * starts,), LOWEST_SCORE, log_probs.dtype)
    return ops.scatter_update(padded, indices, lowest)[:, :vocabulary_size]
