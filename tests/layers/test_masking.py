import keras
import numpy as np

from keras_transformer.layers.masking import attention_mask, causal_mask, padding_mask


def test_padding_mask_marks_pad_id_zero():
    np.testing.assert_array_equal(padding_mask(np.array([[4, 5, 0, 0]])), [[1, 1, 0, 0]])


def test_causal_mask_is_lower_triangular():
    np.testing.assert_array_equal(causal_mask(4), np.tril(np.ones((4, 4), bool)))


def test_causal_mask_with_offset_for_incremental_decoding():
    np.testing.assert_array_equal(causal_mask(2, 5, start_index=2), [[1, 1, 1, 0, 0],
                                                                    [1, 1, 1, 1, 0]])


def test_combined_mask_is_padding_and_causal():
    keep = np.array([[True, True, True, False]])
    combined = keras.ops.convert_to_numpy(attention_mask(keep, causal=True))
    expected = np.tril(np.ones((4, 4), bool)) & keep[:, None, :]
    np.testing.assert_array_equal(combined, expected)


def test_padding_only_mask_broadcasts_over_queries():
    assert tuple(attention_mask(np.ones((2, 6), bool)).shape) == (2, 1, 6)
    assert attention_mask(None) is None
