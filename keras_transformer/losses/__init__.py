"""The training loss."""

from keras_transformer.losses.label_smoothing import (
    LabelSmoothedSparseCategoricalCrossentropy,
    label_smoothed_sparse_categorical_crossentropy,
)

__all__ = [
    "LabelSmoothedSparseCategoricalCrossentropy",
    "label_smoothed_sparse_categorical_crossentropy",
]
