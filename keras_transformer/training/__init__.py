"""Training: compile the paper's way, choose a strategy and precision, run and resume."""

from keras_transformer.training.averaging import average_checkpoints
from keras_transformer.training.callbacks import (
    BleuCallback,
    StepCheckpoint,
    TrainingLimit,
    list_checkpoints,
)
from keras_transformer.training.compile import compile_transformer
from keras_transformer.training.custom_loop import fit_with_custom_loop
from keras_transformer.training.strategy import (
    PRECISIONS,
    STRATEGIES,
    is_chief,
    select_strategy,
    set_precision,
    split_cpu,
)
from keras_transformer.training.trainer import train

__all__ = [
    "PRECISIONS",
    "STRATEGIES",
    "BleuCallback",
    "StepCheckpoint",
    "TrainingLimit",
    "average_checkpoints",
    "compile_transformer",
    "fit_with_custom_loop",
    "is_chief",
    "list_checkpoints",
    "select_strategy",
    "set_precision",
    "split_cpu",
    "train",
]
