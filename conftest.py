"""Shared pytest set-up: NumPy in every doctest, the TensorFlow backend by default."""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _doctest_numpy(doctest_namespace):
    doctest_namespace["np"] = np


if os.environ["KERAS_BACKEND"] == "torch":
    import torch

    def _detached_array(self, dtype=None, copy=None):
        # NumPy's comparisons in the tests read PyTorch outputs that track gradients.
        array = self.detach().cpu().numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    torch.Tensor.__array__ = _detached_array
