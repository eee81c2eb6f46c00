"""Shared token embedding, also used as the pre-softmax projection."""

import math

import keras
import numpy as np
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

    `quantize("int8")` (also called by `model.quantize("int8")`) replaces the table by
    per-row int8 values and float32 scales, stored transposed `(D, V)` for the output
    projection, which then multiplies int8 by int8 (the hidden states quantized per
    token, as Keras's int8 `Dense` does) into int32. Decoding only: a quantized layer
    does not train.

    Args:
        vocabulary_size: int. Size of the shared vocabulary (V).
        hidden_dim: int. Embedding width (d_model).
        output_bias: bool. Add a non-trainable bias `(V,)` to the logits (imported
            Marian models; Hugging Face keeps it out of training too). Defaults to `False`.
        quantization: `None` or `"int8"` (a layer saved after `quantize("int8")`).

    Example:
    >>> embedding = TokenEmbedding(vocabulary_size=10, hidden_dim=4)
    >>> tuple(embedding(np.array([[1, 2, 0]])).shape)
    (1, 3, 4)
    >>> tuple(embedding(np.zeros((1, 3, 4)), reverse=True).shape)
    (1, 3, 10)
    """

    def __init__(self, vocabulary_size, hidden_dim, output_bias=False, quantization=None,
                 **kwargs):
        check_positive_int("vocabulary_size", vocabulary_size)
        check_positive_int("hidden_dim", hidden_dim)
        if not isinstance(output_bias, bool):
            raise ValueError(f"`output_bias` must be True or False. Received: {output_bias!r}")
        _check_quantization(quantization, allow_none=True)
        super().__init__(**kwargs)
        self.vocabulary_size = vocabulary_size
        self.hidden_dim = hidden_dim
        self.output_bias = output_bias
        self.quantization = quantization

    def build(self, input_shape=None):
        self.embeddings = None
        if self.quantization == "int8":
            self._build_int8()
        else:
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

    def _build_int8(self):
        self.quantized_kernel = self.add_weight(
            name="quantized_kernel", shape=(self.hidden_dim, self.vocabulary_size),
            initializer="zeros", dtype="int8", trainable=False)
        self.kernel_scale = self.add_weight(
            name="kernel_scale", shape=(self.vocabulary_size,), initializer="ones",
            dtype="float32", trainable=False)

    def quantize(self, mode=None, type_check=True, config=None):
        """Replace the float table by per-row int8 values and scales (`mode="int8"`).

        Each row `E[v]` becomes `round(E[v] / s[v])` with `s[v] = max|E[v]| / 127`.
        """
        _check_quantization(mode)
        if self.quantization is not None:
            raise ValueError(f"The layer {self.name!r} is already quantized "
                             f"({self.quantization}).")
        table = ops.convert_to_numpy(self.embeddings).astype("float32")
        scale = np.abs(table).max(axis=1) / 127.0
        scale = np.where(scale > 0, scale, 1.0).astype("float32")
        values = np.clip(np.round(table / scale[:, None]), -127, 127).astype("int8")
        del self.embeddings  # untracks the float table
        self.embeddings = None
        self._tracker.unlock()
        self._build_int8()
        self._tracker.lock()
        self.quantized_kernel.assign(values.T)
        self.kernel_scale.assign(scale)
        self.quantization = mode

    def call(self, inputs, reverse=False):
        if self.quantization == "int8":
            return self._int8_call(inputs, reverse)
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

    def _int8_call(self, inputs, reverse):
        if reverse:
            hidden_states = ops.cast(inputs, "float32")

            def project(tokens):  # (T, D) -> (T, V): int8 x int8 -> int32, then scaled
                token_scale = ops.max(ops.abs(tokens), axis=-1, keepdims=True) / 127.0
                token_scale = ops.where(token_scale > 0, token_scale, 1.0)
                quantized = ops.cast(ops.clip(ops.round(tokens / token_scale), -127, 127),
                                     "int8")
                products = ops.matmul(quantized, self.quantized_kernel)
                return ops.cast(products, "float32") * token_scale * self.kernel_scale

            logits = apply_token_wise(project, hidden_states)
            if self.logits_bias is not None:
                logits = logits + ops.cast(self.logits_bias, "float32")
            return logits
        token_ids = ops.cast(inputs, "int32")
        columns = ops.take(self.quantized_kernel, token_ids, axis=1)  # (D, *ids)
        rows = ops.moveaxis(columns, 0, -1)
        scale = ops.take(self.kernel_scale, token_ids, axis=0)[..., None]
        embedded = ops.cast(rows, "float32") * (scale * math.sqrt(self.hidden_dim))
        return ops.cast(embedded, self.compute_dtype)

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
        if self.quantization is not None:
            config["quantization"] = self.quantization
        return config


QUANTIZATIONS = ("int8",)


def _check_quantization(mode, allow_none=False):
    if (mode is None and allow_none) or mode in QUANTIZATIONS:
        return
    raise ValueError(f"`quantization` must be one of {QUANTIZATIONS}"
                     f"{' or None' if allow_none else ''}. Received: {mode!r}")
