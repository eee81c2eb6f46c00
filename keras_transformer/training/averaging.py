"""Checkpoint averaging (Section 6.1: the base model averages its last 5 checkpoints)."""

import numpy as np

from keras_transformer.training.callbacks import list_checkpoints


def average_checkpoints(model, directory, last=5):
    """Set `model`'s weights to the mean of the last `last` checkpoints in `directory`.

    Returns the steps that were averaged. Non-float weights (counters) keep the value
    of the newest checkpoint.

    Example:
    >>> import os, tempfile, keras
    >>> model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False)])
    >>> folder = tempfile.mkdtemp()
    >>> for step, value in ((1, 1.0), (2, 2.0), (3, 6.0)):
    ...     model.set_weights([np.array([[value]])])
    ...     model.save_weights(os.path.join(folder, f"ckpt-{step:08d}.weights.h5"))
    >>> average_checkpoints(model, folder, last=2)
    [2, 3]
    >>> model.get_weights()[0].tolist()
    [[4.0]]
    """
    if not isinstance(last, int) or last < 1:
        raise ValueError(f"`last` must be a positive integer. Received: last={last!r}")
    checkpoints = list_checkpoints(directory)[-last:]
    if not checkpoints:
        raise FileNotFoundError(
            f"No checkpoints (ckpt-*.weights.h5) in `{directory}`: train with checkpoints "
            "enabled first (`keras-transformer train` writes them under MODEL_DIR/checkpoints)."
        )
    sums = None
    for _, path in checkpoints:
        model.load_weights(path)
        weights = model.get_weights()
        if sums is None:
            sums = [np.array(w, dtype="float64") if _is_float(w) else w for w in weights]
        else:
            sums = [s + w if _is_float(w) else w for s, w in zip(sums, weights, strict=True)]
    count = len(checkpoints)
    model.set_weights([
        (s / count).astype(w.dtype) if _is_float(w) else w
        for s, w in zip(sums, model.get_weights(), strict=True)
    ])
    return [step for step, _ in checkpoints]


def _is_float(array):
    return np.issubdtype(np.asarray(array).dtype, np.floating)
