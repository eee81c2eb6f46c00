"""Training helpers."""

from keras_transformer.training.compile import compile_transformer

__all__ = ["compile_transformer"]
