"""Training: compile the paper's way, choose a strategy and precision, run and resume.

`TrainingConfig` (every setting of `train`), `compile_transformer`, the callbacks,
averaging, the precision policy and `train` run on every backend; `select_strategy`,
`split_cpu`, `is_chief` and `fit_with_custom_loop` are `tf.distribute` tools and load
TensorFlow when first used.
"""

from typing import TYPE_CHECKING

from keras_transformer.lazy import lazy_attributes

if TYPE_CHECKING:  # static tools (docs, IDEs) see the names; they load lazily
    from keras_transformer.training.averaging import average_checkpoints
    from keras_transformer.training.callbacks import (
        BleuCallback,
        StepCheckpoint,
        TrainingLimit,
        list_checkpoints,
    )
    from keras_transformer.training.compile import compile_transformer
    from keras_transformer.training.config import CHANGEABLE_ON_RESUME, TrainingConfig
    from keras_transformer.training.custom_loop import fit_with_custom_loop
    from keras_transformer.training.distribution import STRATEGIES, select_distribution
    from keras_transformer.training.precision import PRECISIONS, set_precision
    from keras_transformer.training.strategy import is_chief, select_strategy, split_cpu
    from keras_transformer.training.trainer import train


_MODULES = {
    "averaging": ["average_checkpoints"],
    "callbacks": ["BleuCallback", "StepCheckpoint", "TrainingLimit", "list_checkpoints"],
    "compile": ["compile_transformer"],
    "config": ["CHANGEABLE_ON_RESUME", "TrainingConfig"],
    "custom_loop": ["fit_with_custom_loop"],
    "distribution": ["STRATEGIES", "select_distribution"],
    "precision": ["PRECISIONS", "set_precision"],
    "strategy": ["is_chief", "select_strategy", "split_cpu"],
    "trainer": ["train"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _MODULES)

__all__ = [
    "CHANGEABLE_ON_RESUME",
    "PRECISIONS",
    "STRATEGIES",
    "BleuCallback",
    "StepCheckpoint",
    "TrainingConfig",
    "TrainingLimit",
    "average_checkpoints",
    "compile_transformer",
    "fit_with_custom_loop",
    "is_chief",
    "list_checkpoints",
    "select_distribution",
    "select_strategy",
    "set_precision",
    "split_cpu",
    "train",
]
