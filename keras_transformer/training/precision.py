"""The global precision policy of training, on every backend."""

import keras

from keras_transformer.validation import check_choice

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")


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
