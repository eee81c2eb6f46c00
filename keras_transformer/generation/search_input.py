"""The search's input policy, in one place: how a batch of sources is shaped for decoding.

XLA compiles one program per input shape, so to limit recompilation a batch is padded
to a power-of-two number of rows and a multiple of `LENGTH_BUCKET` columns, and the
output buffer to a multiple of `LENGTH_BUCKET`. The paper's output limit ("input length
+ 50", Section 6.1) is a loop bound, not a shape. A learned position embedding has no
positions past the model's `max_sequence_length`, so every length is capped there.

The functions are written once, with `keras.ops`: the SavedModel export calls them
inside its TensorFlow graph, where the batch's shape is only known at run time, and
`generate` runs the same code on the host with `ops=HOST_OPS` (NumPy), since a few dozen
eager backend ops would cost milliseconds per call. `search_buffer_length` alone is static
(a Python int), because the buffer is a shape of the compiled loop.

Example:
>>> from keras_transformer.models import build_transformer
>>> model = build_transformer("tiny", vocabulary_size=30)
>>> padded = pad_sources(np.array([[5, 6, 3], [7, 3, 0], [8, 3, 0]]), model)
>>> tuple(padded.shape), int(padded[3, 0])  # filler row: an empty sentence
((4, 16), 3)
>>> int(output_limit(source_lengths(padded), max_length=None, model=model))
53
"""

import types

import numpy as np
from keras import ops

from keras_transformer.special_tokens import END_ID, PAD_ID

# Output and source lengths are padded to multiples of this to limit retracing.
LENGTH_BUCKET = 16
# Section 6.1: "maximum output length to input length + 50".
MAX_LENGTH_OFFSET = 50
# The first search of a shrinking batch stops this many tokens past its longest source
# (rounded up to a buffer of 16s); the few sentences still running are searched again
# with the whole buffer. A shorter buffer makes every step cheaper: the cache that beam
# search reorders and that attention reads is as long as the buffer.
FIRST_SEARCH_SLACK = 8
# No output ends before this many tokens: an empty translation of a non-empty source is
# never what a user wants, even where a weak model's beam search ranks it first
# (CTranslate2 and fairseq also default to 1).
DEFAULT_MIN_LENGTH = 1


# The NumPy functions of the `keras.ops` names used here, for `ops=HOST_OPS`.
HOST_OPS = types.SimpleNamespace(
    **{name: getattr(np, name) for name in (
        "arange", "bitwise_or", "concatenate", "equal", "expand_dims", "logical_and", "max",
        "maximum", "minimum", "not_equal", "reshape", "right_shift", "shape", "sum", "where",
        "zeros")},
    cast=lambda x, dtype: np.asarray(x).astype(dtype),
    pad=lambda x, pad_width, constant_values=0: np.pad(x, pad_width,
                                                       constant_values=constant_values),
)


def round_up(value, multiple):
    """`value` rounded up to a multiple of `multiple` (Python ints or int tensors)."""
    return -(-value // multiple) * multiple


def next_power_of_two(value, ops=ops):
    """The smallest power of two >= `value` (and >= 1), for ints or int32 tensors.

    Example:
    >>> [int(next_power_of_two(n)) for n in (0, 1, 3, 4, 5, 33)]
    [1, 1, 4, 4, 8, 64]
    """
    bits = ops.maximum(value, 1) - 1
    for shift in (1, 2, 4, 8, 16):  # smear the highest set bit into every lower bit
        bits = ops.bitwise_or(bits, ops.right_shift(bits, shift))
    return bits + 1


def source_lengths(token_ids, ops=ops):
    """The non-pad length of each sequence `(...)` of `token_ids` `(..., L)`."""
    return ops.sum(ops.cast(ops.not_equal(token_ids, PAD_ID), "int32"), axis=-1)


def output_limit(lengths, max_length, model, offset=MAX_LENGTH_OFFSET, ops=ops):
    """Most output tokens for a batch: `min(longest source + offset, max_length)`.

    Args:
        lengths: int `(B,)` source lengths (`source_lengths`); an empty batch counts 0.
        max_length: int, int tensor or `None` (no explicit cap).
        model: the `Transformer` (a learned position embedding caps the limit).
        offset: int. The paper's `+ 50`.
    """
    limit = max_or_zero(lengths, ops=ops) + offset
    if max_length is not None:
        limit = ops.minimum(limit, max_length)
    if model.position_embedding == "learned":
        limit = ops.minimum(limit, model.max_sequence_length)
    return limit


def search_buffer_length(limit, model):
    """The static output buffer for an output `limit` (a Python int): a multiple of 16.

    Example:
    >>> from keras_transformer.models import build_transformer
    >>> search_buffer_length(53, build_transformer("tiny", vocabulary_size=30))
    64
    """
    length = round_up(int(limit), LENGTH_BUCKET)
    if model.position_embedding == "learned":
        length = min(length, model.max_sequence_length)
    return length


def pad_sources(encoder_token_ids, model, ops=ops):
    """Sources `(B, S)` padded to `(B', S')` for the search: `B'` a power of two, `S'` a
    multiple of 16 (capped for learned positions); filler rows are empty sentences."""
    shape = ops.shape(encoder_token_ids)
    batch_size, source_length = shape[0], shape[1]
    rows = next_power_of_two(batch_size, ops=ops)
    columns = ops.maximum(round_up(source_length, LENGTH_BUCKET), 1)
    if model.position_embedding == "learned":
        columns = ops.maximum(ops.minimum(columns, model.max_sequence_length), source_length)
    padded = ops.pad(ops.cast(encoder_token_ids, "int32"),
                     [[0, rows - batch_size], [0, columns - source_length]],
                     constant_values=PAD_ID)
    filler = ops.logical_and(ops.expand_dims(ops.arange(rows) >= batch_size, 1),
                             ops.expand_dims(ops.equal(ops.arange(columns), 0), 0))
    return ops.where(filler, END_ID, padded)


def longest_output(token_ids, ops=ops):
    """The longest non-pad output of `token_ids` `(..., L)`, at least 1: where the search's
    outputs are cut."""
    lengths = ops.reshape(source_lengths(token_ids, ops=ops), (-1,))
    return ops.maximum(max_or_zero(lengths, ops=ops), 1)


def max_or_zero(values, ops=ops):
    """The largest of the int `values` `(N,)`, 0 when there are none."""
    return ops.max(ops.concatenate([ops.cast(values, "int32"), ops.zeros((1,), "int32")]))
