"""The fixed token ids every part of the package agrees on, and where they are added.

The tokenizer reserves them, the model treats `PAD_ID` as padding, and generation
starts from `START_ID` and stops at `END_ID`. `with_end` is the one place a sequence of
pieces gets its end token.
"""

import numpy as np

PAD_ID = 0
"""Padding: masked out of attention, the loss and the metrics."""
UNK_ID = 1
"""A piece the tokenizer does not know."""
START_ID = 2
"""The first decoder input; generation starts from it."""
END_ID = 3
"""Ends every source and every output; generation stops at it."""


def with_end(pieces, max_sequence_length=None):
    """Sequence ids as the model reads them: at most `max_sequence_length - 1` pieces, then
    `END_ID` (a source for the encoder, or the labels of a target).

    Args:
        pieces: one sequence of piece ids (a list or a 1-D tensor), a batch of them (a
            list of lists), or a `tf.RaggedTensor` `(B, None)`.
        max_sequence_length: int or `None` (no cut). The longest result, `END_ID`
            included.

    Returns:
        The same kind as `pieces`: a list, a list of lists or a ragged tensor; a 1-D
        tensor becomes an int32 tensor.

    Example:
    >>> with_end([5, 6, 7], max_sequence_length=3)
    [5, 6, 3]
    >>> with_end([[5], []])
    [[5, 3], [3]]
    """
    limit = None if max_sequence_length is None else max_sequence_length - 1
    if isinstance(pieces, np.ndarray):
        pieces = pieces.tolist()
    if isinstance(pieces, (list, tuple)):
        if pieces and not isinstance(pieces[0], (int, np.integer)):
            return [with_end(row, max_sequence_length) for row in pieces]
        return list(pieces)[:limit] + [END_ID]
    import tensorflow as tf  # a tensor of pieces comes from the in-graph tokenizer

    pieces = tf.cast(pieces, tf.int32)
    if isinstance(pieces, tf.RaggedTensor):
        ends = tf.fill([pieces.nrows(), 1], END_ID)
        return tf.concat([pieces[:, :limit], ends], axis=1)
    return tf.concat([pieces[:limit], [END_ID]], axis=0)
