import os

import keras
import pytest

from keras_transformer.training import select_strategy, set_precision


def test_auto_on_one_cpu_is_the_default_strategy():
    assert select_strategy("auto").num_replicas_in_sync == 1


def test_unknown_strategy_and_precision_name_the_argument():
    with pytest.raises(ValueError, match="Received: strategy='tpu'"):
        select_strategy("tpu")
    with pytest.raises(ValueError, match="Received: precision='int8'"):
        set_precision("int8")


def test_multi_worker_needs_tf_config(monkeypatch):
    monkeypatch.delitem(os.environ, "TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="TF_CONFIG"):
        select_strategy("multi_worker")


def test_precision_sets_the_global_policy():
    try:
        set_precision("mixed_bfloat16")
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    finally:
        set_precision("float32")
