"""Data parallelism for `train` on each backend, behind one interface.

- TensorFlow: a `tf.distribute` strategy (`select_strategy`), including multi-worker.
- JAX: Keras' own `keras.distribution.DataParallel` over the local devices. On a CPU,
  `devices=N` makes N virtual devices (`XLA_FLAGS=--xla_force_host_platform_device_count`)
  when JAX has not started yet.
- PyTorch: one device (Keras has no PyTorch data parallelism).

Example:
>>> distribution = select_distribution("one_device")
>>> distribution.replicas, distribution.chief
(1, True)
"""

import contextlib
import os

import keras

from keras_transformer.backend import backend
from keras_transformer.training.config import STRATEGIES
from keras_transformer.validation import check_choice, check_positive_int


class Distribution:
    """How `train` spreads its work: `replicas`, whether this process is the `chief`
    and runs `multi_worker`, and `scope()` (enter it to build the model and to fit)."""

    def __init__(self, scope=None, replicas=1, multi_worker=False, chief=True, engine=None,
                 fit_in_scope=False):
        self._scope = scope
        self._fit_in_scope = fit_in_scope
        self.replicas = replicas
        self.multi_worker = multi_worker
        self.chief = chief
        self.engine = engine  # the tf.distribute strategy or keras.distribution object

    def scope(self):
        return self._scope() if self._scope is not None else contextlib.nullcontext()

    def fit_scope(self):
        """The scope `fit` runs in (`keras.distribution` reads it when batches arrive)."""
        return self.scope() if self._fit_in_scope else contextlib.nullcontext()


def _jax_devices(count):
    import jax

    if count is not None and count > 1:
        flag = f"--xla_force_host_platform_device_count={count}"
        started = getattr(jax._src.xla_bridge, "_backends", None)
        if not started and flag not in os.environ.get("XLA_FLAGS", ""):
            os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
    devices = jax.devices()
    if count is not None and count > len(devices):
        raise RuntimeError(
            f"`devices={count}`, but JAX sees {len(devices)} device(s) ({devices[0].platform}) "
            f"and has already started. For virtual CPU devices start the process with "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={count}."
        )
    return devices[:count] if count else devices


def select_distribution(name="auto", devices=None):
    """The `Distribution` for strategy `name` on the running backend.

    Args:
        name: one of `STRATEGIES`. `"auto"` uses every local device where there are
            several; `"one_device"` one; `"mirrored"` all of them; `"multi_worker"`
            (TensorFlow only) the workers of `TF_CONFIG`.
        devices: int or `None`. On TensorFlow, split the CPU into this many logical
            devices; on JAX, use this many devices (virtual ones on a CPU).

    Example:
    >>> select_distribution("auto").replicas >= 1
    True
    """
    check_choice("strategy", name, STRATEGIES)
    if devices is not None:
        check_positive_int("devices", devices)
    current = backend()
    if current == "tensorflow":
        import tensorflow as tf

        from keras_transformer.training.strategy import is_chief, select_strategy

        strategy = select_strategy(name, devices)
        return Distribution(strategy.scope, strategy.num_replicas_in_sync,
                            isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy),
                            is_chief(strategy), strategy)
    if name == "multi_worker":
        raise ValueError(
            f"`strategy='multi_worker'` is a tf.distribute strategy: run it with "
            f"KERAS_BACKEND=tensorflow. Current backend: {current!r}"
        )
    if current == "jax":
        if name == "one_device":
            return Distribution()
        local = _jax_devices(devices)
        if len(local) == 1:
            return Distribution()
        data_parallel = keras.distribution.DataParallel(devices=local)
        return Distribution(data_parallel.scope, len(local), engine=data_parallel,
                            fit_in_scope=True)
    if name == "mirrored" or (devices or 1) > 1:
        raise ValueError(
            f"Training on {current!r} runs on one device. For data parallelism use "
            f"KERAS_BACKEND=jax (keras.distribution) or tensorflow (tf.distribute). "
            f"Received: strategy={name!r}, devices={devices!r}"
        )
    return Distribution()
