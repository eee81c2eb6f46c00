"""Token-level metrics that ignore padding: accuracy and perplexity."""

import keras
from keras import ops

from keras_transformer.special_tokens import PAD_ID


class _MaskedTokenMean(keras.metrics.Metric):
    """Running `sum(value) / count(real tokens)` over batches.

    `token_sums` and `result_of` are the metric's math on sums, so that a loop that
    adds sums over replicas (`training/custom_loop.py`) reports what `fit` reports.
    """

    def __init__(self, ignore_class=PAD_ID, name=None, dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.ignore_class = ignore_class
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def _values(self, y_true, y_pred):
        raise NotImplementedError

    def _mask(self, y_true):
        """float32 1 at counted tokens, 0 at `ignore_class` (every token counts if `None`)."""
        if self.ignore_class is None:
            return ops.ones_like(y_true, dtype="float32")
        return ops.cast(ops.not_equal(y_true, self.ignore_class), "float32")

    def token_sums(self, y_true, y_pred, sample_weight=None):
        """`(sum of the values over real tokens, number of real tokens)` of one batch."""
        values, mask = self._values(y_true, y_pred)
        if sample_weight is not None:
            mask = mask * ops.cast(sample_weight, "float32")
        return ops.sum(values * mask), ops.sum(mask)

    def result_of(self, total, count):
        """The metric's value for summed values `total` over `count` tokens."""
        raise NotImplementedError

    def update_state(self, y_true, y_pred, sample_weight=None):
        total, count = self.token_sums(y_true, y_pred, sample_weight)
        self.total.assign_add(total)
        self.count.assign_add(count)

    def result(self):
        return self.result_of(self.total, self.count)

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        return {"name": self.name, "ignore_class": self.ignore_class}


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedAccuracy(_MaskedTokenMean):
    """Share of non-padding target tokens whose arg-max logit is right.

    Example:
    >>> metric = MaskedAccuracy()
    >>> metric.update_state(np.array([[1, 2, 0]]), np.eye(4)[[[1, 3, 0]]])
    >>> float(metric.result())
    0.5
    """

    def __init__(self, ignore_class=PAD_ID, name="accuracy", dtype=None):
        super().__init__(ignore_class, name, dtype)

    def _values(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        correct = ops.cast(ops.equal(ops.argmax(y_pred, axis=-1), y_true), "float32")
        return correct, self._mask(y_true)

    def result_of(self, total, count):
        return ops.divide_no_nan(total, count)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Perplexity(_MaskedTokenMean):
    """`exp` of the mean negative log-likelihood of non-padding tokens (no smoothing).

    Example:
    >>> metric = Perplexity()
    >>> metric.update_state(np.array([[1, 0]]), np.zeros((1, 2, 4)))
    >>> round(float(metric.result()), 4)
    4.0
    """

    def __init__(self, ignore_class=PAD_ID, name="perplexity", dtype=None):
        super().__init__(ignore_class, name, dtype)

    def _values(self, y_true, y_pred):
        # -log p_y = logsumexp(z) - z_y: a metric needs no gradient, so this skips the
        # fused cross-entropy's one-hot targets and its backprop output, which cost as
        # much as the loss itself (`python benchmarks/training_profile.py`).
        y_true = ops.cast(y_true, "int32")
        logits = ops.cast(y_pred, "float32")
        picked = ops.take_along_axis(logits, ops.expand_dims(y_true, -1), axis=-1)
        values = ops.logsumexp(logits, axis=-1) - ops.squeeze(picked, -1)
        return values, self._mask(y_true)

    def result_of(self, total, count):
        return ops.exp(ops.divide_no_nan(total, count))
