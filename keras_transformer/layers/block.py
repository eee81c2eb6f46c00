"""What the encoder and decoder layers share: arguments and the residual connection."""

import keras

from keras_transformer.validation import check_positive_int, check_rate


def residual_block(inputs, sublayer, normalization, dropout, normalize_first, training=None):
    """Post-LN `LayerNorm(x + Dropout(Sublayer(x)))` or pre-LN `x + Dropout(Sublayer(LN(x)))`.

    Sections 3.1 and 5.4 of the paper. `sublayer` maps the (normalized) input to
    `(output, extras)`; the extras (attention weights, an updated cache) pass through.
    """
    normalized = normalization(inputs) if normalize_first else inputs
    output, extras = sublayer(normalized)
    output = inputs + dropout(output, training=training)
    if not normalize_first:
        output = normalization(output)
    return output, extras


class TransformerBlock(keras.layers.Layer):
    """Base of `TransformerEncoderBlock` and `TransformerDecoderBlock` (not used alone).

    Note: `normalize_first=True` gives the pre-LN variant `x + Dropout(Sublayer(LN(x)))`,
    which trains more stably without warm-up; the model then adds a final LayerNorm.
    """

    def __init__(
        self,
        intermediate_dim,
        num_heads,
        dropout=0.1,
        attention_dropout=0.0,
        activation="relu",
        layer_norm_epsilon=1e-6,
        normalize_first=False,
        **kwargs,
    ):
        check_positive_int("intermediate_dim", intermediate_dim)
        check_positive_int("num_heads", num_heads)
        check_rate("dropout", dropout)
        check_rate("attention_dropout", attention_dropout)
        super().__init__(**kwargs)
        self.intermediate_dim = intermediate_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.normalize_first = normalize_first

    def _sublayer_parts(self, name, input_shape):
        """A built LayerNorm and a residual Dropout for the sub-layer `name`."""
        norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=f"{name}_norm"
        )
        norm.build(input_shape)
        return norm, keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "intermediate_dim": self.intermediate_dim,
                "num_heads": self.num_heads,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "activation": self.activation,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "normalize_first": self.normalize_first,
            }
        )
        return config
