import os
from types import SimpleNamespace

import keras
import pytest

from keras_transformer.training import is_chief, select_strategy, set_precision


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


def _with_task(task_type, task_id, cluster):
    resolver = SimpleNamespace(task_type=task_type, task_id=task_id,
                               cluster_spec=lambda: SimpleNamespace(as_dict=lambda: cluster))
    return SimpleNamespace(cluster_resolver=resolver)


def test_chief_is_the_chief_task_or_else_worker_zero():
    workers = {"worker": ["a:1", "b:1"]}
    assert is_chief(_with_task("worker", 0, workers))
    assert not is_chief(_with_task("worker", 1, workers))
    with_chief = {"chief": ["c:1"], **workers}
    assert is_chief(_with_task("chief", 0, with_chief))
    assert not is_chief(_with_task("worker", 0, with_chief))
    assert is_chief(select_strategy("one_device"))
