"""Attention masks: the only place in the package where masks are made.

Every mask is a boolean *keep*-mask: `True` means "may attend". Additive `-1e9`
masks are never used because they overflow in float16.

Section 3.2.3 of Vaswani et al. (2017): keys at padded positions get no weight in
every attention, and the decoder's self-attention also hides future positions.
"""

from keras import ops

from keras_transformer.special_tokens import PAD_ID


def padding_mask(token_ids, pad_id=PAD_ID):
    """Keep-mask `(B, S)` that is `False` where `token_ids == pad_id`.

    Example:
    >>> np.asarray(padding_mask(np.array([[5, 7, 0]]))).tolist()
    [[True, True, False]]
    """
    return ops.not_equal(token_ids, pad_id)


def causal_mask(query_length, key_length=None, start_index=0):
    """Keep-mask `(T, S)` letting query `i` see keys `j <= i + start_index`.

    `start_index` is the absolute position of the first query; incremental
    decoding passes the current step so a single query sees the whole prefix.

    Example:
    >>> np.asarray(causal_mask(3)).astype(int).tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    >>> np.asarray(causal_mask(1, 4, start_index=2)).astype(int).tolist()
    [[1, 1, 1, 0]]
    """
    key_length = query_length if key_length is None else key_length
    rows = ops.expand_dims(ops.arange(query_length) + start_index, 1)
    columns = ops.expand_dims(ops.arange(key_length), 0)
    return ops.greater_equal(rows, columns)


def attention_mask(key_padding_mask=None, causal=False, query_length=None, start_index=0):
    """Combine a key padding mask `(B, S)` and/or the causal mask into `(B, T, S)`.

    Returns `None` when there is nothing to mask. Without `causal` the result is
    `(B, 1, S)`, which broadcasts over every query.

    Example:
    >>> keep = attention_mask(np.array([[True, True, False]]), causal=True)
    >>> np.asarray(keep).astype(int).tolist()
    [[[1, 0, 0], [1, 1, 0], [1, 1, 0]]]
    """
    mask = None
    if key_padding_mask is not None:
        mask = ops.expand_dims(ops.cast(key_padding_mask, "bool"), 1)
    if causal:
        if query_length is None:
            if key_padding_mask is None:
                raise ValueError(
                    "`query_length` is required for a causal mask without a padding mask."
                )
            query_length = ops.shape(key_padding_mask)[1]
        key_length = None if key_padding_mask is None else ops.shape(key_padding_mask)[1]
        future = ops.expand_dims(causal_mask(query_length, key_length, start_index), 0)
        mask = future if mask is None else ops.logical_and(mask, future)
    return mask
