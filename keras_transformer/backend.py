"""Which Keras backend runs, and the one way TensorFlow-only features load TensorFlow.

The layers, models, losses, metrics, schedule, generation and `Translator` run on every
Keras backend (TensorFlow, JAX, PyTorch). The `tf.data` pipeline, the in-graph
tokenizer ops, SavedModel export and `tf.distribute` need TensorFlow; they call
`require_tensorflow` when used, so `import keras_transformer` under
`KERAS_BACKEND=jax` or `torch` imports no TensorFlow module.

Example:
>>> backend() in BACKENDS
True
"""

import importlib
import importlib.util
import sys

import keras

BACKENDS = ("tensorflow", "jax", "torch")


class TensorFlowRequiredError(RuntimeError):
    """A TensorFlow-only feature was used where TensorFlow cannot be imported."""


def backend():
    """The name of the running Keras backend: `"tensorflow"`, `"jax"` or `"torch"`."""
    return keras.backend.backend()


def has_tensorflow():
    """Whether TensorFlow is installed (without importing it).

    Example:
    >>> isinstance(has_tensorflow(), bool)
    True
    """
    return importlib.util.find_spec("tensorflow") is not None


def require_tensorflow(feature, module="tensorflow"):
    """Import and return `module` for `feature`, or raise an error naming the fix.

    Args:
        feature: str. What needs TensorFlow, as the user knows it (e.g. "SavedModel
            export").
        module: str. The module to import: `"tensorflow"` or `"tensorflow_text"`.

    Raises:
        TensorFlowRequiredError: the module cannot be imported.

    Example:
    >>> require_tensorflow("the tf.data pipeline").__name__
    'tensorflow'
    """
    if sys.modules.get(module) is not None:  # no import machinery inside traced functions
        return sys.modules[module]
    try:
        return importlib.import_module(module)
    except ImportError as error:
        package = module.replace("_", "-")
        raise TensorFlowRequiredError(
            f"{feature} needs TensorFlow, and `{module}` cannot be imported here ({error}). "
            f"Install it with `pip install {package}` (or `pip install keras-transformer`, "
            f"which brings TensorFlow), or use what runs on every backend: `Translator` and "
            f"`generate` for translation, `keras-transformer train` (its NumPy batcher) for "
            f"training under KERAS_BACKEND=jax or torch."
        ) from None
