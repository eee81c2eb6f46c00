"""Positional encodings: the paper's sinusoids (default) and learned embeddings."""

import keras
from keras import ops

from keras_transformer.validation import check_choice, check_positive_int

SINUSOID_LAYOUTS = ("interleaved", "halves")


def sinusoids(positions, hidden_dim, max_wavelength=10000.0, layout="interleaved"):
    """The encoding of Section 3.5 for integer `positions` `(T,)` -> `(T, hidden_dim)`.

    `PE(pos, 2i) = sin(pos / 10000^(2i/d))` and `PE(pos, 2i+1) = cos(...)`, with
    sines and cosines interleaved as in the formula (`layout="interleaved"`), or every
    sine first and every cosine after them (`"halves"`: tensor2tensor, Marian, OPUS-MT).

    Example:
    >>> np.asarray(sinusoids(np.array([0, 1]), 4), "float64").round(3).tolist()
    [[0.0, 1.0, 0.0, 1.0], [0.841, 0.54, 0.01, 1.0]]
    >>> np.asarray(sinusoids(np.array([1]), 4, layout="halves"), "float64").round(3).tolist()
    [[0.841, 0.01, 0.54, 1.0]]
    """
    positions = ops.cast(positions, "float32")
    even_dims = ops.arange(0, hidden_dim, 2, dtype="float32")
    inverse_frequencies = ops.power(max_wavelength, -even_dims / hidden_dim)
    angles = ops.expand_dims(positions, -1) * inverse_frequencies  # (T, D/2)
    if layout == "halves":
        # An odd width gets one more sine than cosines, as Marian's table has.
        sines = ops.sin(angles)
        cosines = ops.cos(angles)[:, : hidden_dim // 2]
        return ops.concatenate([sines, cosines], axis=-1)
    interleaved = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)  # (T, D/2, 2)
    encoding = ops.reshape(interleaved, (-1, 2 * ops.shape(even_dims)[0]))
    return encoding[:, :hidden_dim]


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """Fixed sinusoidal position encoding, Section 3.5 of Vaswani et al. (2017).

    Returns the encoding `(1, T, D)` for the positions `start_index .. start_index+T-1`
    of `inputs` `(B, T, D)`, to be added to the embeddings. It has no weights and no
    length limit.

    Args:
        max_wavelength: float. The `10000` of the formula.
        layout: `"interleaved"` (the paper's formula, the default) or `"halves"`
            (sines then cosines: Marian and OPUS-MT; see `sinusoids`).

    Example:
    >>> tuple(SinusoidalPositionEncoding()(np.zeros((2, 5, 8))).shape)
    (1, 5, 8)
    """

    def __init__(self, max_wavelength=10000.0, layout="interleaved", **kwargs):
        check_choice("layout", layout, SINUSOID_LAYOUTS)
        super().__init__(**kwargs)
        self.max_wavelength = max_wavelength
        self.layout = layout

    def call(self, inputs, start_index=0):
        length, hidden_dim = ops.shape(inputs)[1], inputs.shape[-1]
        positions = ops.arange(length) + start_index
        encoding = sinusoids(positions, hidden_dim, self.max_wavelength, self.layout)
        return ops.expand_dims(ops.cast(encoding, self.compute_dtype), 0)

    def compute_output_shape(self, input_shape):
        return (1,) + tuple(input_shape[1:])

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength, "layout": self.layout})
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class LearnedPositionEmbedding(keras.layers.Layer):
    """Learned position embeddings (Table 3, row E of the paper), up to a maximum length.

    Args:
        max_sequence_length: int. Number of positions that have an embedding.

    Example:
    >>> tuple(LearnedPositionEmbedding(max_sequence_length=16)(np.zeros((2, 5, 8))).shape)
    (1, 5, 8)
    """

    def __init__(self, max_sequence_length, **kwargs):
        check_positive_int("max_sequence_length", max_sequence_length)
        super().__init__(**kwargs)
        self.max_sequence_length = max_sequence_length

    def build(self, input_shape):
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(self.max_sequence_length, input_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
        )
        self.built = True

    def call(self, inputs, start_index=0):
        positions = ops.arange(ops.shape(inputs)[1]) + start_index
        return ops.expand_dims(ops.take(self.position_embeddings, positions, axis=0), 0)

    def compute_output_shape(self, input_shape):
        return (1,) + tuple(input_shape[1:])

    def get_config(self):
        config = super().get_config()
        config.update({"max_sequence_length": self.max_sequence_length})
        return config
