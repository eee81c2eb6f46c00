"""Choosing a `tf.distribute` strategy (TensorFlow-specific).

The same training code runs on one CPU, one multi-GPU machine or several machines:
only the strategy changes. For tests without GPUs, `split_cpu(n)` splits the CPU into
`n` logical devices so `MirroredStrategy` has replicas to mirror.
"""

import json
import os

from keras_transformer.backend import require_tensorflow
from keras_transformer.training.config import STRATEGIES
from keras_transformer.training.precision import PRECISIONS, set_precision  # noqa: F401
from keras_transformer.validation import check_choice, check_positive_int

tf = require_tensorflow("`tf.distribute` training (`select_strategy`)")



def split_cpu(devices):
    """Split the CPU into `devices` logical devices; call before TensorFlow starts.

    Raises:
        RuntimeError: TensorFlow already initialized its devices in this process.

    Example (too late: listing the devices initializes TensorFlow):
    >>> len(tf.config.list_logical_devices("CPU")) >= 1
    True
    >>> split_cpu(7)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    RuntimeError: Cannot split the CPU into 7 devices: TensorFlow is already initialized...
    """
    check_positive_int("devices", devices)
    cpu = tf.config.list_physical_devices("CPU")[0]
    configured = tf.config.get_logical_device_configuration(cpu)
    if configured and len(configured) == devices:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(devices)]
        )
    except RuntimeError as error:
        raise RuntimeError(
            f"Cannot split the CPU into {devices} devices: TensorFlow is already "
            "initialized in this process. Call `split_cpu` (or pass `--devices`) first."
        ) from error


def select_strategy(name="auto", devices=None):
    """Return the `tf.distribute.Strategy` for `name`.

    - `"auto"`: `MirroredStrategy` over all GPUs when there are several, else over the
      logical CPUs when `devices > 1`, else TensorFlow's default strategy.
    - `"one_device"`: the first GPU, or the CPU.
    - `"mirrored"`: `MirroredStrategy` over every GPU (or every logical CPU).
    - `"multi_worker"`: `MultiWorkerMirroredStrategy` configured by `TF_CONFIG`.

    Args:
        name: one of `STRATEGIES`.
        devices: int. Split the CPU into this many logical devices first (testing and
            demonstrating data parallelism without GPUs).

    Example:
    >>> select_strategy("one_device").num_replicas_in_sync
    1
    """
    check_choice("strategy", name, STRATEGIES)
    if devices is not None and devices > 1:
        split_cpu(devices)
    if name == "multi_worker":
        # Collective ops must be configured before TensorFlow initializes its devices, so
        # nothing here may list devices first.
        if "TF_CONFIG" not in os.environ:
            raise ValueError(
                "`strategy='multi_worker'` needs the TF_CONFIG environment variable "
                "(cluster and task of this worker); see docs/guides/training.md."
            )
        try:
            json.loads(os.environ["TF_CONFIG"])
        except json.JSONDecodeError as error:
            raise ValueError(f"TF_CONFIG is not valid JSON: {error}") from error
        return tf.distribute.MultiWorkerMirroredStrategy()
    gpus = tf.config.list_logical_devices("GPU")
    cpus = tf.config.list_logical_devices("CPU")
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else cpus[0].name)
    replicas = gpus if gpus else cpus
    if name == "mirrored" or (name == "auto" and len(replicas) > 1):
        return tf.distribute.MirroredStrategy([device.name for device in replicas])
    return tf.distribute.get_strategy()


def is_chief(strategy):
    """Whether this process writes the model folder: always, except on non-chief workers.

    Under `MultiWorkerMirroredStrategy` the chief is the `"chief"` task, or worker 0 when
    `TF_CONFIG` names no chief; the other workers write to temporary folders.

    Example:
    >>> is_chief(select_strategy("one_device"))
    True
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    return (resolver.task_type == "worker" and resolver.task_id == 0
            and "chief" not in resolver.cluster_spec().as_dict())
