"""The global precision policy of training, on every backend, and `--precision auto`."""

import logging
import statistics
import time

import keras

from keras_transformer.validation import check_choice

logger = logging.getLogger(__name__)

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
AUTO = "auto"
# Mixed precision must win by this much: float32 is the exact one, so a tie goes to it.
MIXED_MARGIN = 1.05


def set_precision(precision="float32"):
    """Set Keras' global dtype policy: `"float32"`, `"mixed_bfloat16"` or `"mixed_float16"`.

    Under mixed precision the loss and the attention softmax still run in float32,
    and Keras' optimizer applies dynamic loss scaling for float16.

    Example:
    >>> set_precision("float32")
    'float32'
    """
    check_choice("precision", precision, PRECISIONS)
    keras.mixed_precision.set_global_policy(precision)
    return precision


def precision_candidates():
    """What `--precision auto` times: float32 and mixed_bfloat16, and mixed_float16 where
    a GPU is visible (GPUs without bfloat16 units run float16 fast)."""
    backend = keras.backend.backend()
    gpu = False
    if backend == "tensorflow":
        import tensorflow as tf

        gpu = bool(tf.config.list_physical_devices("GPU"))
    elif backend == "jax":
        import jax

        gpu = jax.default_backend() == "gpu"
    elif backend == "torch":
        import torch

        gpu = torch.cuda.is_available()
    return PRECISIONS if gpu else PRECISIONS[:2]


class _StepTimer(keras.callbacks.Callback):
    """Seconds of each train step after the first `skip` (tracing and compiling)."""

    def __init__(self, skip):
        super().__init__()
        self.skip, self.seconds, self._start = skip, [], None

    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if logs and "loss" in logs:
            float(logs["loss"])  # wait for the step itself, not only its dispatch
        if batch >= self.skip:
            self.seconds.append(time.perf_counter() - self._start)


def choose_precision(fit_steps, candidates=None, steps=4, warmup=2):
    """Time a few train steps in each precision and return the fastest, with the timings.

    `fit_steps(precision, steps, callback)` must build and compile a fresh model under
    that global policy and fit it for `steps` steps on the same batches each time.
    Mixed precision is chosen only when it is at least 5% faster than float32.

    Returns `(precision, {precision: median seconds per step})`; the global policy is
    left at the chosen precision.

    Example (the timing is a stand-in here):
    >>> def fit_steps(precision, steps, callback):
    ...     callback.seconds = [1.0 if precision == "float32" else 0.5] * steps
    >>> choose_precision(fit_steps, candidates=("float32", "mixed_bfloat16"))
    ('mixed_bfloat16', {'float32': 1.0, 'mixed_bfloat16': 0.5})
    >>> set_precision("float32")
    'float32'
    """
    candidates = tuple(candidates or precision_candidates())
    timings = {}
    for precision in candidates:
        set_precision(precision)
        timer = _StepTimer(skip=warmup)
        fit_steps(precision, warmup + steps, timer)
        if not timer.seconds:
            raise RuntimeError(f"--precision auto: no train step of {precision} was timed.")
        timings[precision] = statistics.median(timer.seconds)
        logger.info("--precision auto: %s %.3f s/step", precision, timings[precision])
    fastest = min(timings, key=timings.get)
    if "float32" in timings and timings[fastest] * MIXED_MARGIN > timings["float32"]:
        fastest = "float32"
    set_precision(fastest)
    return fastest, timings
