"""The Transformer model and its presets."""

from keras_transformer.models.presets import PRESETS
from keras_transformer.models.transformer import Transformer, build_transformer

__all__ = ["PRESETS", "Transformer", "build_transformer"]
