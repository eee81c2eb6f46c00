"""Shared token embedding, also used as the pre-softmax projection."""

import math

import keras
from keras import ops

from keras_transformer.layers.token_wise import apply_token_wise
from keras_transformer.validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_transformer")
class TokenEmbedding(keras.layers.Layer):
    """Token embedding scaled by `sqrt(d_model)`, tied to the output projection.

    Section 3.4 of Vaswani et al. (2017): one weight matrix is shared by the encoder
    embedding, the decoder embedding and the pre-softmax linear layer, and embedding
    outputs are multiplied by `sqrt(d_model)`. `call(ids)` embeds; `call(x, reverse=True)`
    returns float32 logits `x E^T` (no bias, as in the paper; `output_bias=True` adds a
    fixed bias `(V,)`, as Marian's `final_logits_bias`). The projection goes through
    `call` so that functional models track the shared weights.

    Note: the paper does not give an initializer; weights are drawn from
    `N(0, d_model^-0.5)` so the scaled embeddings have unit variance.

    Args:
        vocabulary_size: int. Size of the shared vocabulary (V).
        hidden_dim: int. Embedding width (d_model).
        output_bias: bool. Add a non-trainable bias `(V,)` to the logits (imported
            Marian models; Hugging Face keeps it out of training too). Defaults to `False`.

    Example:
    >>> embedding = TokenEmbedding(vocabulary_size=10, hidden_dim=4)
    >>> tuple(embedding(np.array([[1, 2, 0]])).shape)
    (1, 3, 4)
    >>> tuple(embedding(np.zeros((1, 3, 4)), reverse=True).shape)
    (1, 3, 10)
    """

    def __init__(self, vocabulary_size, hidden_dim, output_bias=False, **kwargs):
        check_positive_int("vocabulary_size", vocabulary_size)
        check_positive_int("hidden_dim", hidden_dim)
        if not isinstance(output_bias, bool):
            raise ValueError(f"`output_bias` must be True or False. Received: {output_bias!r}")
        super().__init__(**kwargs)
        self.vocabulary_size = vocabulary_size
        self.hidden_dim = hidden_dim
        self.output_bias = output_bias

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocabulary_size, self.hidden_dim),
            initializer=keras.initializers.RandomNormal(stddev=self.hidden_dim**-0.5),
        )
        self.logits_bias = None
        if self.output_bias:
            self.logits_bias = self.add_weight(
                name="logits_bias", shape=(self.vocabulary_size,), initializer="zeros",
                trainable=False,
            )
        self.built = True

    def call(self, inputs, reverse=False):
        if reverse:
            kernel = ops.cast(self.embeddings, self.compute_dtype)
            hidden_states = ops.cast(inputs, self.compute_dtype)
            # An einsum contracting the kernel's last axis, not `matmul(x, transpose(E))`:
            # XLA on JAX copied the transposed (V, D) matrix at every decoding step
            # (about 60% of a greedy step's kernel time with a 58k vocabulary).
            logits = apply_token_wise(
                lambda tokens: ops.einsum("td,vd->tv", tokens, kernel), hidden_states
            )
            logits = ops.cast(logits, "float32")
            if self.logits_bias is not None:
                logits = logits + ops.cast(self.logits_bias, "float32")
            return logits
        token_ids = inputs
        embedded = ops.take(self.embeddings, ops.cast(token_ids, "int32"), axis=0)
        return ops.multiply(embedded, ops.cast(math.sqrt(self.hidden_dim), embedded.dtype))

    def compute_output_shape(self, input_shape, reverse=False):
        if reverse:
            return tuple(input_shape[:-1]) + (self.vocabulary_size,)
        return tuple(input_shape) + (self.hidden_dim,)

    def compute_output_spec(self, inputs, reverse=False):
        dtype = "float32" if reverse else self.compute_dtype
        return keras.KerasTensor(self.compute_output_shape(inputs.shape, reverse), dtype=dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"vocabulary_size": self.vocabulary_size, "hidden_dim": self.hidden_dim,
                       "output_bias": self.output_bias})
        return config
