"""The learning-rate schedule of Section 5.3."""

import keras
from keras import ops

from keras_transformer.validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)`.

    Section 5.3 (Equation 3) of Vaswani et al. (2017): linear warm-up for
    `warmup_steps`, then decay with the inverse square root of the step. Step 0
    (Keras optimizers count from 0) is treated as step 1, so the rate is never 0.

    Args:
        hidden_dim: int. d_model.
        warmup_steps: int. Defaults to `4000` (the paper).
        scale: float. Multiplier on the whole formula. Defaults to `1.0` (the paper).

    Example:
    >>> schedule = TransformerSchedule(hidden_dim=512, warmup_steps=4000)
    >>> round(float(schedule(4000)), 7)
    0.0006988
    """

    def __init__(self, hidden_dim, warmup_steps=4000, scale=1.0):
        check_positive_int("hidden_dim", hidden_dim)
        check_positive_int("warmup_steps", warmup_steps)
        if scale <= 0:
            raise ValueError(f"`scale` must be positive. Received: scale={scale!r}")
        self.hidden_dim = hidden_dim
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        step = ops.maximum(ops.cast(step, "float32"), 1.0)
        warmup = ops.cast(self.warmup_steps, "float32")
        rate = ops.minimum(ops.rsqrt(step), step * warmup**-1.5)
        return self.scale * self.hidden_dim**-0.5 * rate

    def plot(self, steps=None, ax=None):
        """Draw the schedule over `steps` (default `10 * warmup_steps`) with matplotlib."""
        import matplotlib.pyplot as plt
        import numpy as np

        steps = np.arange(1, steps or 10 * self.warmup_steps)
        ax = ax or plt.gca()
        ax.plot(steps, np.asarray(self(steps)))
        ax.set(xlabel="step", ylabel="learning rate",
               title=f"d_model={self.hidden_dim}, warmup_steps={self.warmup_steps}")
        return ax

    def get_config(self):
        return {"hidden_dim": self.hidden_dim, "warmup_steps": self.warmup_steps,
                "scale": self.scale}
