"""Compile a model the paper's way (Section 5.3 and 5.4)."""

import keras

from keras_transformer.losses.label_smoothing import LabelSmoothedSparseCategoricalCrossentropy
from keras_transformer.metrics.masked import MaskedAccuracy, Perplexity
from keras_transformer.optimizers.schedules import TransformerSchedule


def transformer_metrics():
    """The token metrics a Transformer reports in training: accuracy and perplexity."""
    return [MaskedAccuracy(), Perplexity()]


def compile_transformer(
    model,
    warmup_steps=4000,
    learning_rate_scale=1.0,
    label_smoothing=0.1,
    jit_compile="auto",
    **compile_kwargs,
):
    """Adam (0.9, 0.98, 1e-9) on `TransformerSchedule`, label-smoothed loss, token metrics.

    Example:
    >>> from keras_transformer.models import build_transformer
    >>> model = compile_transformer(build_transformer("tiny", vocabulary_size=20))
    >>> float(model.optimizer.beta_2)
    0.98
    """
    schedule = TransformerSchedule(model.hidden_dim, warmup_steps, learning_rate_scale)
    optimizer = keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    model.compile(
        optimizer=optimizer,
        loss=LabelSmoothedSparseCategoricalCrossentropy(label_smoothing),
        metrics=transformer_metrics(),
        jit_compile=jit_compile,
        **compile_kwargs,
    )
    return model
