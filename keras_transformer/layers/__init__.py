"""Keras layers of the Transformer, in the order of Section 3 of the paper."""

from keras_transformer.layers import masking
from keras_transformer.layers.attention import (
    MultiHeadAttention,
    set_attention_implementation,
    uses_fused_attention,
)
from keras_transformer.layers.decoder import TransformerDecoderBlock
from keras_transformer.layers.embedding import TokenEmbedding
from keras_transformer.layers.encoder import TransformerEncoderBlock
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.position_embedding import (
    LearnedPositionEmbedding,
    SinusoidalPositionEncoding,
    sinusoids,
)
from keras_transformer.layers.token_wise import apply_token_wise

__all__ = [
    "set_attention_implementation",
    "uses_fused_attention",
    "LearnedPositionEmbedding",
    "MultiHeadAttention",
    "PositionwiseFeedForward",
    "SinusoidalPositionEncoding",
    "TokenEmbedding",
    "TransformerDecoderBlock",
    "TransformerEncoderBlock",
    "apply_token_wise",
    "masking",
    "sinusoids",
]
