"""Token metrics that ignore padding."""

from keras_transformer.metrics.masked import MaskedAccuracy, Perplexity

__all__ = ["MaskedAccuracy", "Perplexity"]
