"""One decoder layer, with the key/value cache used by incremental decoding."""

import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.block import TransformerBlock, residual_block
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.masking import attention_mask, causal_mask
from keras_transformer.validation import check_divisible


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerDecoderBlock(TransformerBlock):
    """One decoder layer: masked self-attention, cross-attention, feed-forward.

    Section 3.1 and Figure 1 (right) of Vaswani et al. (2017). Each sub-layer is
    `LayerNorm(x + Dropout(Sublayer(x)))` (post-LN, as in the paper). Self-attention
    always applies the causal mask, also in training mode with dropout.

    Args:
        intermediate_dim: int. Inner size of the feed-forward network (d_ff).
        num_heads: int. Number of attention heads (h); must divide `hidden_dim`.
        dropout: float. Dropout rate (P_drop). Defaults to `0.1`.
        attention_dropout: float. Dropout on attention weights. Defaults to `0.0`.
        activation: feed-forward activation. Defaults to `"relu"`.
        layer_norm_epsilon: float. Defaults to `1e-6`.
        normalize_first: bool. Pre-LN instead of the paper's post-LN. Defaults to `False`.

    Call arguments:
        decoder_sequence: float tensor `(B, T, hidden_dim)`.
        encoder_sequence: float tensor `(B, S, hidden_dim)`; unused when
            `cross_attention_cache` is given.
        decoder_padding_mask: boolean `(B, T)`; ignored when decoding with a cache.
        encoder_padding_mask: boolean `(B, S)`.
        self_attention_cache: preallocated `(keys, values)` of the prefix, each
            `(B, N, L, H)` (or one stacked `(B, 2, N, L, H)` tensor); needs
            `cache_update_index`, the position of the first query.
        cross_attention_cache: `(keys, values)` from `compute_cross_attention_cache`.
        return_attention_scores: bool. Also return
            `{"self_attention": (B, N, T, T or L), "cross_attention": (B, N, T, S)}`.

    Returns:
        Float tensor `(B, T, hidden_dim)`, then the weights if requested, then the
        updated self-attention cache if one was given.

    Example:
    >>> block = TransformerDecoderBlock(intermediate_dim=64, num_heads=4)
    >>> tuple(block(np.zeros((2, 5, 32)), np.zeros((2, 7, 32))).shape)
    (2, 5, 32)
    """

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        hidden_dim = decoder_sequence_shape[-1]
        check_divisible(hidden_dim, self.num_heads)
        policy = self.dtype_policy
        self._self_attention = MultiHeadAttention(
            self.num_heads, hidden_dim, self.attention_dropout, dtype=policy,
            name="self_attention",
        )
        self._self_attention.build(decoder_sequence_shape)
        self._self_attention_norm, self._self_attention_dropout = self._sublayer_parts(
            "self_attention", decoder_sequence_shape
        )
        self._cross_attention = MultiHeadAttention(
            self.num_heads, hidden_dim, self.attention_dropout, dtype=policy,
            name="cross_attention",
        )
        self._cross_attention.build(decoder_sequence_shape, decoder_sequence_shape)
        self._cross_attention_norm, self._cross_attention_dropout = self._sublayer_parts(
            "cross_attention", decoder_sequence_shape
        )
        self._feed_forward = PositionwiseFeedForward(
            self.intermediate_dim, self.activation, dtype=policy, name="feed_forward"
        )
        self._feed_forward.build(decoder_sequence_shape)
        self._feed_forward_norm, self._feed_forward_dropout = self._sublayer_parts(
            "feed_forward", decoder_sequence_shape
        )
        self.built = True

    def compute_cross_attention_cache(self, encoder_sequence):
        """Keys and values of the encoder output, computed once: a pair of `(B, N, S, H)`."""
        return self._cross_attention.compute_cache(encoder_sequence)

    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        encoder_padding_mask=None,
        self_attention_cache=None,
        cross_attention_cache=None,
        cache_update_index=None,
        return_attention_scores=False,
        training=None,
    ):
        use_cache = self_attention_cache is not None
        if use_cache and cache_update_index is None:
            raise ValueError(
                "`cache_update_index` is required with `self_attention_cache`: pass the "
                "position of the first query token."
            )
        query_length = keras.ops.shape(decoder_sequence)[1]
        if use_cache:
            # The keys of a (keys, values) pair, or the stacked tensor: L is next to last.
            keys = keras.tree.flatten(self_attention_cache)[0]
            cache_length = keras.ops.shape(keys)[-2]
            self_mask = keras.ops.expand_dims(
                causal_mask(query_length, cache_length, cache_update_index), 0
            )
        else:
            self_mask = attention_mask(decoder_padding_mask, causal=True,
                                       query_length=query_length)
        cross_mask = attention_mask(encoder_padding_mask)
        weights = {}

        def self_attention(x):
            result = self._self_attention(
                x, attention_mask=self_mask, cache=self_attention_cache,
                cache_update_index=cache_update_index if use_cache else None,
                return_attention_scores=return_attention_scores, training=training,
            )
            result = result if isinstance(result, tuple) else (result,)
            if return_attention_scores:
                weights["self_attention"] = result[1]
            return result[0], (result[-1] if use_cache else None)

        def cross_attention(x):
            result = self._cross_attention(
                x, encoder_sequence, attention_mask=cross_mask, cache=cross_attention_cache,
                return_attention_scores=return_attention_scores, training=training,
            )
            result = result if isinstance(result, tuple) else (result,)
            if return_attention_scores:
                weights["cross_attention"] = result[1]
            return result[0], None

        x, new_cache = residual_block(
            decoder_sequence, self_attention, self._self_attention_norm,
            self._self_attention_dropout, self.normalize_first, training,
        )
        x, _ = residual_block(
            x, cross_attention, self._cross_attention_norm,
            self._cross_attention_dropout, self.normalize_first, training,
        )
        x, _ = residual_block(
            x, lambda y: (self._feed_forward(y), None), self._feed_forward_norm,
            self._feed_forward_dropout, self.normalize_first, training,
        )
        outputs = (x,)
        if return_attention_scores:
            outputs += (weights,)
        if use_cache:
            outputs += (new_cache,)
        return outputs[0] if len(outputs) == 1 else outputs
