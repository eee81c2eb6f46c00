import keras
import numpy as np
import pytest

from keras_transformer.generation.search_input import (
    HOST_OPS,
    longest_output,
    next_power_of_two,
    output_limit,
    pad_sources,
    source_lengths,
)
from keras_transformer.models import build_transformer
from keras_transformer.special_tokens import END_ID, PAD_ID


def _numpy(value):
    return np.asarray(keras.ops.convert_to_numpy(value))


@pytest.mark.parametrize("position_embedding", ["sinusoidal", "learned"])
def test_the_host_policy_is_the_backend_policy(position_embedding):
    """`generate` runs the policy with NumPy (`HOST_OPS`), the SavedModel with the backend."""
    model = build_transformer("tiny", vocabulary_size=30, max_sequence_length=40,
                              position_embedding=position_embedding)
    rng = np.random.default_rng(0)
    for batch_size, width in [(1, 1), (3, 5), (5, 17), (8, 40), (9, 33)]:
        ids = rng.integers(4, 30, size=(batch_size, width)).astype("int32")
        for row, length in enumerate(rng.integers(0, width + 1, size=batch_size)):
            ids[row, length:] = PAD_ID
        host = pad_sources(ids, model, ops=HOST_OPS)
        np.testing.assert_array_equal(host, _numpy(pad_sources(ids, model)))
        assert host.shape[0] == next_power_of_two(batch_size, ops=HOST_OPS)
        assert host.shape[1] >= width
        assert (host[batch_size:, 0] == END_ID).all()
        for max_length in (None, 7, 100):
            lengths = source_lengths(ids, ops=HOST_OPS)
            assert int(output_limit(lengths, max_length, model, ops=HOST_OPS)) == int(
                _numpy(output_limit(source_lengths(ids), max_length, model)))
        assert int(longest_output(ids, ops=HOST_OPS)) == int(_numpy(longest_output(ids)))
