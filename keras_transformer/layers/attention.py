"""Multi-head scaled dot-product attention with a static-shape key/value cache.

Where it pays, attention without a cache runs `keras.ops.dot_product_attention`
(fused: cuDNN/flash kernels on GPUs, `scaled_dot_product_attention` on PyTorch);
`set_attention_implementation` chooses (see the performance guide's figures).
"""

import math
import os

import keras
from keras import ops

from keras_transformer.layers.token_wise import apply_token_wise
from keras_transformer.numerics import FLOAT32_LOWEST
from keras_transformer.validation import check_divisible, check_positive_int, check_rate

ATTENTION_IMPLEMENTATIONS = ("auto", "fused", "explicit")
_implementation = os.environ.get("KT_ATTENTION", "auto")


def _fused_pays():
    """Where fused attention measured faster (benchmarks/backends.py, docs/results.md):
    PyTorch (1.04x training on a CPU) and JAX on GPUs (cuDNN flash attention); not JAX
    on CPUs (0.93x) nor TensorFlow (0.94x to 1.02x)."""
    backend = keras.backend.backend()
    if backend == "torch":
        return True
    if backend == "jax":
        import jax

        return jax.default_backend() == "gpu"
    return False


def set_attention_implementation(name):
    """Choose how attention without a cache is computed: `"auto"` (the default, or the
    `KT_ATTENTION` environment variable), `"fused"` (`keras.ops.dot_product_attention`)
    or `"explicit"` (einsum, float32 softmax, einsum). Attention that returns its
    weights, that drops weights out in training, or that reads a cache is always
    explicit. Takes effect for functions traced afterwards.

    Example:
    >>> set_attention_implementation("explicit"); set_attention_implementation("auto")
    'explicit'
    'auto'
    """
    global _implementation
    if name not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(f"`name` must be one of {ATTENTION_IMPLEMENTATIONS}. Received: "
                         f"name={name!r}")
    _implementation = name
    return name


def uses_fused_attention():
    """Whether attention without a cache runs fused on the running backend now.

    Example:
    >>> uses_fused_attention() == (keras.backend.backend() == "torch")  # on a CPU
    True
    """
    if _implementation == "auto":
        return _fused_pays()
    return _implementation == "fused"


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention, Section 3.2.2 (Figure 2, right) of Vaswani et al. (2017).

    `MultiHead(Q, K, V) = Concat(head_1..head_h) W^O` with
    `head_i = softmax(Q W_i^Q (K W_i^K)^T / sqrt(d_k)) V W_i^V` and
    `d_k = d_v = hidden_dim // num_heads`. Weights have the same shapes and order as
    `keras.layers.MultiHeadAttention(num_heads, key_dim=hidden_dim // num_heads)`.

    The softmax runs in float32 under mixed precision. Masked logits get the lowest
    float32 value and masked weights are then zeroed, so a query whose keys are all
    masked (a fully padded row) returns zeros, never NaN. Fused attention (the
    default on PyTorch and on JAX GPUs, see `set_attention_implementation`) gives the same
    outputs within float rounding, except in such rows, where it averages the values;
    those rows are padding, which nothing downstream reads.

    Key/value cache: `compute_cache(value)` returns a `(keys, values)` pair of
    `(B, N, S, H)` tensors, heads before positions so that the per-head products need
    no transpose of the cache at each decoding step. Two tensors rather than one: XLA
    copied the keys and the values out of a stacked `(B, 2, N, S, H)` cache at every
    step (1.12x-1.15x beam 4 and greedy at batch 32 without the copies). A stacked
    tensor is still accepted, and an updated cache comes back in the form it was given.

    - `cache` with `cache_update_index=None` is used as it is (cross-attention during
      generation). It may have fewer rows than the query, `B` against `B * G`: query
      rows `b * G .. b * G + G - 1` then share cache row `b` (the beams of one sentence
      in beam search), and the attention mask, if any, has `B` rows too.
    - A preallocated `cache` with an integer `cache_update_index` gets this call's keys
      and values written at that position with `ops.slice_update`, and the query
      attends over the whole cache (incremental self-attention; the shape never
      changes, which XLA needs).

    Args:
        num_heads: int. Number of heads (h).
        hidden_dim: int. Model width (d_model); inferred from the query when `None`.
        dropout: float. Dropout on the attention weights. Defaults to `0.0` (the paper
            applies dropout only to sub-layer outputs).

    Call arguments:
        query: `(B, T, D)`.
        value: `(B, S, D)`, defaults to `query`.
        key: defaults to `value`.
        attention_mask: boolean keep-mask broadcastable to `(B, T, S)`.
        cache: the key/value cache (see above).
        cache_update_index: int or `None` (see above).
        return_attention_scores: bool. Also return the weights `(B, N, T, S)`.

    Returns:
        `output`, then the weights if requested, then the updated cache if one was given.

    Example:
    >>> attention = MultiHeadAttention(num_heads=2)
    >>> tuple(attention(np.ones((1, 3, 8)), np.ones((1, 5, 8))).shape)
    (1, 3, 8)
    """

    def __init__(self, num_heads, hidden_dim=None, dropout=0.0, **kwargs):
        check_positive_int("num_heads", num_heads)
        if hidden_dim is not None:
            check_positive_int("hidden_dim", hidden_dim)
            check_divisible(hidden_dim, num_heads)
        check_rate("dropout", dropout)
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.dropout = dropout

    def build(self, query_shape, value_shape=None, key_shape=None):
        hidden_dim = self.hidden_dim or query_shape[-1]
        if query_shape[-1] != hidden_dim:
            raise ValueError(
                f"The query's last dimension ({query_shape[-1]}) must equal `hidden_dim` "
                f"({hidden_dim}). Received: query_shape={tuple(query_shape)}"
            )
        check_divisible(hidden_dim, self.num_heads)
        self._hidden_dim = hidden_dim
        self._head_dim = hidden_dim // self.num_heads
        value_dim = hidden_dim if value_shape is None else value_shape[-1]
        key_dim = value_dim if key_shape is None else key_shape[-1]

        # Projections run on flattened tokens `(B * T, D)` (see `apply_token_wise`).
        def projection(name, input_dim):
            layer = keras.layers.EinsumDense(
                "ad,dnh->anh",
                output_shape=(self.num_heads, self._head_dim),
                bias_axes="nh",
                kernel_initializer="glorot_uniform",
                dtype=self.dtype_policy,
                name=name,
            )
            layer.build((None, input_dim))
            return layer

        self._query_dense = projection("query", hidden_dim)
        self._key_dense = projection("key", key_dim)
        self._value_dense = projection("value", value_dim)
        self._output_dense = keras.layers.EinsumDense(
            "anh,nhd->ad",
            output_shape=(hidden_dim,),
            bias_axes="d",
            kernel_initializer="glorot_uniform",
            dtype=self.dtype_policy,
            name="attention_output",
        )
        self._output_dense.build((None, self.num_heads, self._head_dim))
        self._dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def compute_cache(self, value, key=None):
        """Project `value` (and `key`, default `value`) once: `(keys, values)`, each
        `(B, N, S, H)`."""
        key = value if key is None else key
        return (ops.transpose(_project(self._key_dense, key), (0, 2, 1, 3)),
                ops.transpose(_project(self._value_dense, value), (0, 2, 1, 3)))

    def call(
        self,
        query,
        value=None,
        key=None,
        attention_mask=None,
        cache=None,
        cache_update_index=None,
        return_attention_scores=False,
        training=None,
    ):
        value = query if value is None else value
        # Keys and values are (B, S, N, H) without a cache, (B, N, S, H) from one.
        key_layout = "bsnh" if cache is None else "bnsh"
        if cache is None:
            keys = _project(self._key_dense, value if key is None else key)
            values = _project(self._value_dense, value)
        else:
            stacked = not isinstance(cache, (tuple, list))
            keys, values = (cache[:, 0], cache[:, 1]) if stacked else cache
            if cache_update_index is not None:
                start = [0, 0, cache_update_index, 0]
                new_keys, new_values = self.compute_cache(value, key)
                keys = ops.slice_update(keys, start, ops.cast(new_keys, keys.dtype))
                values = ops.slice_update(values, start, ops.cast(new_values, values.dtype))
                cache = ops.stack([keys, values], axis=1) if stacked else (keys, values)

        queries = _project(self._query_dense, query)
        if (cache is None and not return_attention_scores and uses_fused_attention()
                and not (training and self.dropout > 0)):
            mask = None
            if attention_mask is not None:
                mask = ops.expand_dims(ops.cast(attention_mask, "bool"), 1)  # (B, 1, T, S)
            attended = ops.dot_product_attention(queries, keys, values, mask=mask,
                                                 scale=1.0 / math.sqrt(self._head_dim))
            return apply_token_wise(self._output_dense, attended)
        queries = ops.multiply(queries, ops.cast(1.0 / math.sqrt(self._head_dim), queries.dtype))
        shared = cache is not None and cache_update_index is None
        if shared:
            # Fold the G query rows of each cache row into its time axis: (B, G * T, N, H).
            query_shape, rows = ops.shape(queries), ops.shape(keys)[0]
            queries = ops.reshape(queries, (rows, -1, self.num_heads, self._head_dim))
        scores = ops.einsum(f"btnh,{key_layout}->bnts", queries, keys)  # (B, N, T, S)
        scores = ops.cast(scores, "float32")
        if attention_mask is not None:
            keep = ops.expand_dims(ops.cast(attention_mask, "bool"), 1)  # (B, 1, T, S)
            scores = ops.where(keep, scores, ops.cast(FLOAT32_LOWEST, "float32"))
            weights = ops.where(keep, _softmax(scores), 0.0)
        else:
            weights = _softmax(scores)
        weights = ops.cast(weights, self.compute_dtype)
        dropped = self._dropout_layer(weights, training=training)
        attended = ops.einsum(f"bnts,{key_layout}->btnh", dropped, values)
        if shared:
            attended = ops.reshape(attended, query_shape)
        if shared and return_attention_scores:
            key_length = ops.shape(keys)[2]
            weights = ops.reshape(weights, (rows, self.num_heads, -1, query_shape[1],
                                            key_length))
            weights = ops.reshape(ops.transpose(weights, (0, 2, 1, 3, 4)),
                                  (-1, self.num_heads, query_shape[1], key_length))
        output = apply_token_wise(self._output_dense, attended)

        outputs = (output,)
        if return_attention_scores:
            outputs += (weights,)
        if cache is not None:
            outputs += (cache,)
        return outputs[0] if len(outputs) == 1 else outputs

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        return tuple(query_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {"num_heads": self.num_heads, "hidden_dim": self.hidden_dim, "dropout": self.dropout}
        )
        return config


def _project(dense, inputs):
    """`apply_token_wise(dense, inputs)` for a query, key or value projection `(B, T, D)`.

    A single token (greedy decoding at batch 1) is projected as two copies of itself:
    XLA on the CPU emits a one-row product against the `(D, N, H)` kernel as a plain
    loop, about 10x slower than the product of two rows (55 against 5.7 us for `D = 256`
    in a compiled loop); with two rows, greedy decoding at batch 1 runs 1.4x to 2x faster
    (the `small` preset, the same tokens). Not in `apply_token_wise`: doubling every
    projection there made the tied output projection about 2x slower and the whole
    greedy step no faster.
    """
    if inputs.shape[0] == 1 and inputs.shape[1] == 1:
        doubled = apply_token_wise(dense, ops.concatenate([inputs, inputs], axis=1))
        return doubled[:, :1]
    return apply_token_wise(dense, inputs)


def _softmax(scores):
    """Softmax over the keys; over a single key every weight is 1 (without Keras' warning
    that such a softmax is constant, which the first decoding step would trigger)."""
    if scores.shape[-1] == 1:
        return ops.ones_like(scores)
    return ops.softmax(scores, axis=-1)
