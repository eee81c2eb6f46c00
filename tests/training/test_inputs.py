"""`train`'s data stage: TensorFlow's `tf.data` batches equal JAX's NumPy batches, and a
run started at step `s` gets the batches an uninterrupted run gets from step `s` on."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from keras_transformer.training.config import TrainingConfig
from keras_transformer.training.distribution import select_distribution
from keras_transformer.training.inputs import training_data

CONFIG = dict(tokens_per_batch=96, max_sequence_length=16, seed=3)

# Writes the first two epochs of JAX's training batches to an .npz file.
JAX_BATCHES = textwrap.dedent("""
    import sys
    import numpy as np
    from keras_transformer.training.config import TrainingConfig
    from keras_transformer.training.distribution import select_distribution
    from keras_transformer.training.inputs import training_data

    data_dir, path, tokens, length, seed = sys.argv[1:]
    config = TrainingConfig(tokens_per_batch=int(tokens), max_sequence_length=int(length),
                            seed=int(seed))
    data = training_data(data_dir, config, select_distribution("one_device"))
    arrays = {}
    for step, (features, labels) in zip(range(2 * data.batches_per_epoch), data.batches(0)):
        arrays[f"{step}/labels"] = labels
        for key, value in features.items():
            arrays[f"{step}/{key}"] = value
    np.savez(path, **arrays)
""")


def tensorflow_batches(data_dir, start, count):
    data = training_data(data_dir, TrainingConfig(**CONFIG), select_distribution("one_device"))
    batches = []
    for features, labels in data.batches(start).take(count):
        batches.append(({key: value.numpy() for key, value in features.items()},
                        labels.numpy()))
    return data, batches


def assert_equal_but_padding(jax_ids, ids):
    """JAX pads to the bucket's longest length and batch size, TensorFlow to the batch's
    longest length and pairs."""
    rows, width = ids.shape
    np.testing.assert_array_equal(jax_ids[:rows, :width], ids)
    assert not jax_ids[rows:].any() and not jax_ids[:, width:].any()


def test_a_run_started_at_any_step_gets_the_uninterrupted_runs_batches(tiny_data_dir):
    data, uninterrupted = tensorflow_batches(tiny_data_dir, 0, 40)
    assert data.batches_per_epoch < 20  # so the starts below fall in the second epoch too
    for start in (3, data.batches_per_epoch + 2):
        _, resumed = tensorflow_batches(tiny_data_dir, start, 40 - start)
        for (features, labels), (expected_features, expected_labels) in zip(
                resumed, uninterrupted[start:], strict=True):
            np.testing.assert_array_equal(labels, expected_labels)
            for key, value in features.items():
                np.testing.assert_array_equal(value, expected_features[key])


@pytest.mark.slow
def test_tensorflow_and_jax_train_on_the_same_batches_in_the_same_order(tiny_data_dir,
                                                                        tmp_path):
    pytest.importorskip("jax")
    path = str(tmp_path / "jax.npz")
    subprocess.run([sys.executable, "-c", JAX_BATCHES, tiny_data_dir, path,
                    *(str(CONFIG[key]) for key in ("tokens_per_batch",
                                                   "max_sequence_length", "seed"))],
                   env={**os.environ, "KERAS_BACKEND": "jax"}, check=True, timeout=300)
    jax = np.load(path)
    steps = len(jax.files) // 3
    data, tensorflow = tensorflow_batches(tiny_data_dir, 0, steps)
    assert steps == 2 * data.batches_per_epoch
    for step, (features, labels) in enumerate(tensorflow):
        assert_equal_but_padding(jax[f"{step}/labels"], labels)
        for key, value in features.items():
            assert_equal_but_padding(jax[f"{step}/{key}"], value)
