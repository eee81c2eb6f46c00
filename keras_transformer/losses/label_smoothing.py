"""Label-smoothed sparse cross-entropy that ignores padding (Section 5.4)."""

import keras
from keras import ops

from keras_transformer.special_tokens import PAD_ID
from keras_transformer.validation import check_rate


def label_smoothed_sparse_categorical_crossentropy(
    y_true, y_pred, label_smoothing=0.1, ignore_class=PAD_ID
):
    """Per-token label-smoothed cross-entropy from logits, 0 at ignored tokens.

    The target distribution is `(1 - eps) * one_hot(y) + eps / V` (the Keras
    convention), so the loss is `(1 - eps) * -log p_y + eps * mean_v(-log p_v)`. The
    constant entropy of the target distribution is *not* subtracted: with smoothing the
    minimum is that entropy, not 0. Computed in float32 whatever the logits' dtype.

    Args:
        y_true: int `(B, T)`. Target ids.
        y_pred: float `(B, T, V)`. Logits.
        label_smoothing: float. eps_ls. Defaults to `0.1` (the paper).
        ignore_class: int or `None`. Target id that contributes nothing (padding).

    Returns:
        `(losses, mask)`: float32 `(B, T)` losses, zero where ignored, and the float32
        mask of counted tokens.

    Example:
    >>> losses, mask = label_smoothed_sparse_categorical_crossentropy(
    ...     np.array([[1, 0]]), np.zeros((1, 2, 4)), label_smoothing=0.0)
    >>> np.asarray(losses, "float64").round(4).tolist(), np.asarray(mask).tolist()
    ([[1.3863, 0.0]], [[1.0, 0.0]])
    """
    check_rate("label_smoothing", label_smoothing)
    y_true = ops.cast(y_true, "int32")
    logits = ops.cast(y_pred, "float32")
    vocabulary_size = ops.shape(logits)[-1]
    targets = ops.one_hot(y_true, vocabulary_size, dtype="float32") * (1.0 - label_smoothing)
    targets = targets + label_smoothing / ops.cast(vocabulary_size, "float32")
    # One fused softmax cross-entropy (loss and gradient in one kernel on TensorFlow) is
    # faster than log_softmax + gather + mean (`python benchmarks/components.py`).
    losses = ops.categorical_crossentropy(targets, logits, from_logits=True)
    if ignore_class is None:
        mask = ops.ones_like(losses)
    else:
        mask = ops.cast(ops.not_equal(y_true, ignore_class), "float32")
    return losses * mask, mask


@keras.saving.register_keras_serializable(package="keras_transformer")
class LabelSmoothedSparseCategoricalCrossentropy(keras.losses.Loss):
    """Label-smoothed cross-entropy from logits, averaged over non-padding tokens.

    See `label_smoothed_sparse_categorical_crossentropy` for the formula. The result
    is `sum(losses) / count(real tokens)`, and 0 (not NaN) for an all-padding batch.
    Under a `tf.distribute` strategy each replica averages over its own tokens.

    Args:
        label_smoothing: float. eps_ls. Defaults to `0.1` (the paper).
        ignore_class: int or `None`. Defaults to `0` (padding).

    Example:
    >>> loss = LabelSmoothedSparseCategoricalCrossentropy(label_smoothing=0.0)
    >>> round(float(loss(np.array([[1, 0]]), np.zeros((1, 2, 4)))), 4)
    1.3863
    """

    def __init__(self, label_smoothing=0.1, ignore_class=PAD_ID, name=None, dtype=None):
        check_rate("label_smoothing", label_smoothing)
        super().__init__(
            name=name or "label_smoothed_crossentropy", reduction="sum_over_batch_size",
            dtype=dtype,
        )
        self.label_smoothing = label_smoothing
        self.ignore_class = ignore_class

    def call(self, y_true, y_pred):
        losses, mask = label_smoothed_sparse_categorical_crossentropy(
            y_true, y_pred, self.label_smoothing, self.ignore_class
        )
        # Weight real tokens by total/real so Keras' mean over all entries is the
        # mean over real tokens (the same trick Keras uses for masks).
        total = ops.cast(ops.size(mask), "float32")
        return losses * ops.divide_no_nan(total, ops.sum(mask))

    def get_config(self):
        return {"name": self.name, "label_smoothing": self.label_smoothing,
                "ignore_class": self.ignore_class}
