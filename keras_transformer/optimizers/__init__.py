"""Optimizer pieces: the paper's learning-rate schedule."""

from keras_transformer.optimizers.schedules import TransformerSchedule

__all__ = ["TransformerSchedule"]
