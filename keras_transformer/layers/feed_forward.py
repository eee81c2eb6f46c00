"""Position-wise feed-forward network."""

import keras

from keras_transformer.layers.token_wise import apply_token_wise
from keras_transformer.validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionwiseFeedForward(keras.layers.Layer):
    """`FFN(x) = max(0, x W1 + b1) W2 + b2`, Section 3.3 of Vaswani et al. (2017).

    Args:
        intermediate_dim: int. Inner size (d_ff).
        activation: activation of the inner layer. Defaults to `"relu"` (the paper).

    Example:
    >>> tuple(PositionwiseFeedForward(intermediate_dim=16)(np.ones((2, 3, 8))).shape)
    (2, 3, 8)
    """

    def __init__(self, intermediate_dim, activation="relu", **kwargs):
        check_positive_int("intermediate_dim", intermediate_dim)
        super().__init__(**kwargs)
        self.intermediate_dim = intermediate_dim
        keras.activations.get(activation)  # an unknown name fails here, not in build
        # A name stays a name (serializing one would import TensorFlow where installed).
        self.activation = (activation if isinstance(activation, str)
                           else keras.activations.serialize(activation))

    def build(self, input_shape):
        self._intermediate_dense = keras.layers.Dense(
            self.intermediate_dim,
            activation=self.activation,
            dtype=self.dtype_policy,
            name="intermediate_dense",
        )
        self._intermediate_dense.build((None, input_shape[-1]))
        self._output_dense = keras.layers.Dense(
            input_shape[-1], dtype=self.dtype_policy, name="output_dense"
        )
        self._output_dense.build((None, self.intermediate_dim))
        self.built = True

    def call(self, inputs):
        # Dense layers see flattened tokens `(B * T, D)` (see `apply_token_wise`).
        return apply_token_wise(
            lambda tokens: self._output_dense(self._intermediate_dense(tokens)), inputs
        )

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update({"intermediate_dim": self.intermediate_dim, "activation": self.activation})
        return config
