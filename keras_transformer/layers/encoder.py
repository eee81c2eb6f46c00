"""One encoder layer."""

import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.block import TransformerBlock, residual_block
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.masking import attention_mask
from keras_transformer.validation import check_divisible


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerEncoderBlock(TransformerBlock):
    """One encoder layer: self-attention, then feed-forward.

    Section 3.1 and Figure 1 (left) of Vaswani et al. (2017). Each sub-layer is
    `LayerNorm(x + Dropout(Sublayer(x)))` (post-LN, as in the paper).

    Args:
        intermediate_dim: int. Inner size of the feed-forward network (d_ff).
        num_heads: int. Number of attention heads (h); must divide the input width.
        dropout: float. Residual dropout (P_drop). Defaults to `0.1`.
        attention_dropout: float. Dropout on attention weights. Defaults to `0.0`.
        activation: feed-forward activation. Defaults to `"relu"`.
        layer_norm_epsilon: float. Defaults to `1e-6`.
        normalize_first: bool. Pre-LN instead of the paper's post-LN. Defaults to `False`.

    Call arguments:
        encoder_sequence: float tensor `(B, S, D)`.
        padding_mask: boolean `(B, S)`, `True` at real tokens.
        return_attention_scores: bool. Also return the weights `(B, N, S, S)`.

    Returns:
        Float tensor `(B, S, D)` (and the weights if requested).

    Example:
    >>> block = TransformerEncoderBlock(intermediate_dim=64, num_heads=4)
    >>> tuple(block(np.zeros((2, 7, 32))).shape)
    (2, 7, 32)
    """

    def build(self, input_shape):
        hidden_dim = input_shape[-1]
        check_divisible(hidden_dim, self.num_heads)
        self._self_attention = MultiHeadAttention(
            self.num_heads, hidden_dim, self.attention_dropout,
            dtype=self.dtype_policy, name="self_attention",
        )
        self._self_attention.build(input_shape)
        self._self_attention_norm, self._self_attention_dropout = self._sublayer_parts(
            "self_attention", input_shape
        )
        self._feed_forward = PositionwiseFeedForward(
            self.intermediate_dim, self.activation, dtype=self.dtype_policy, name="feed_forward"
        )
        self._feed_forward.build(input_shape)
        self._feed_forward_norm, self._feed_forward_dropout = self._sublayer_parts(
            "feed_forward", input_shape
        )
        self.built = True

    def call(self, encoder_sequence, padding_mask=None, return_attention_scores=False,
             training=None):
        mask = attention_mask(padding_mask)

        def self_attention(x):
            result = self._self_attention(
                x, attention_mask=mask, return_attention_scores=return_attention_scores,
                training=training,
            )
            return result if return_attention_scores else (result, None)

        x, weights = residual_block(
            encoder_sequence, self_attention, self._self_attention_norm,
            self._self_attention_dropout, self.normalize_first, training,
        )
        x, _ = residual_block(
            x, lambda y: (self._feed_forward(y), None), self._feed_forward_norm,
            self._feed_forward_dropout, self.normalize_first, training,
        )
        return (x, weights) if return_attention_scores else x
