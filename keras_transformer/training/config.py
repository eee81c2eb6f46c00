"""`TrainingConfig`: every training setting, its default and its help text, in one place.

`train` takes one, `keras-transformer train` builds its flags from it, and the model
folder's `config.json` saves the whole of it under `"training"`. On resume the saved
settings are the recipe: a setting given again with another value stops the run before
any work, except those in `CHANGEABLE_ON_RESUME` (how long and how often, not what).

Example:
>>> config = TrainingConfig(preset="tiny", warmup_steps=100)
>>> config.warmup_steps, config.label_smoothing
(100, 0.1)
>>> TrainingConfig.from_dict({"preset": "tiny", "warmup_steps": 100}) == config
True
"""

import dataclasses

from keras_transformer.models.presets import PRESETS
from keras_transformer.training.precision import AUTO, PRECISIONS

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker")
"""The ways `train` spreads its work (see `select_distribution`)."""

# How long and how often a run works, and on what hardware: these may change when a
# folder is resumed. Everything else is the recipe the saved model was trained with.
CHANGEABLE_ON_RESUME = ("max_steps", "max_minutes", "checkpoint_every", "backup_minutes",
                        "keep_checkpoints", "bleu_every", "bleu_sentences", "jit_compile",
                        "strategy", "devices", "verbose")
# Settings of earlier versions that no longer exist; a saved config.json may hold them.
RETIRED = ("backup_every",)


def _setting(default, help, flag_type=None, choices=None, metavar=None):
    metadata = {"help": help, "type": flag_type, "choices": choices, "metavar": metavar}
    if isinstance(default, dict):
        return dataclasses.field(default_factory=dict, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """Every setting of `train` (see each field's help, also in `train --help`).

    Example:
    >>> config = TrainingConfig(preset="tiny", model_overrides={"dropout": 0.0})
    >>> config.max_steps, config.to_dict()["model_overrides"]
    (100000, {'dropout': 0.0})
    >>> config.differences({"preset": "small", "max_steps": 5}, given={"preset", "max_steps"})
    [('preset', 'small', 'tiny')]
    """

    preset: str = _setting("small", "model size (Table 3: base, big)", str, sorted(PRESETS))
    max_steps: int = _setting(100_000, "total optimizer steps, over all runs on the folder",
                              int, metavar="N")
    max_minutes: float = _setting(None, "stop this run after M minutes (resumable)", float,
                                  metavar="M")
    strategy: str = _setting(
        "auto", "tf.distribute strategy on TensorFlow (multi_worker reads TF_CONFIG); on "
        "JAX, auto/mirrored use keras.distribution's DataParallel over the local devices",
        str, STRATEGIES)
    devices: int = _setting(None, "split the CPU into N logical devices (data parallelism "
                            "without GPUs; on JAX, the first N devices)", int, metavar="N")
    precision: str = _setting("float32", "dtype policy; loss and softmax stay float32 "
                              "(auto: the faster on this machine, timed over a few steps "
                              "and saved in config.json)", str, (AUTO,) + PRECISIONS)
    tokens_per_batch: int = _setting(25_000, "token budget per replica and side (global "
                                     "batch = budget x replicas)", int)
    max_sequence_length: int = _setting(128, "longest sequence, special id included", int)
    warmup_steps: int = _setting(4000, "learning-rate warm-up steps (Section 5.3)", int)
    learning_rate_scale: float = _setting(1.0, "factor on the paper's learning rate", float)
    label_smoothing: float = _setting(0.1, "label smoothing (Section 5.4)", float)
    checkpoint_every: int = _setting(500, "steps between checkpoints and validation passes",
                                     int, metavar="N")
    backup_minutes: float = _setting(5.0, "most minutes between the backups a killed run "
                                     "resumes from (also one at every checkpoint)", float,
                                     metavar="M")
    keep_checkpoints: int = _setting(5, "checkpoints kept", int, metavar="K")
    bleu_every: int = _setting(None, "steps between validation BLEU (default: each "
                               "checkpoint; 0: off)", int, metavar="N")
    bleu_sentences: int = _setting(200, "validation sentences scored for BLEU", int)
    sentences_only: bool = _setting(False, "train on the sentence pairs only (the demo does)")
    jit_compile: bool = _setting(False, "XLA-compile the train step (not with every "
                                 "strategy)")
    seed: int = _setting(0, "seed of the weights and of the batch order", int)
    verbose: str = _setting("auto", "Keras' progress output: auto, 0, 1 or 2", None)
    initial_model: str = _setting(None, "start from this model folder's weights and "
                                  "architecture (e.g. an imported OPUS-MT model; prepare the "
                                  "data with `prepare --tokenizer MODEL_DIR`); the preset is "
                                  "not used and the learning-rate schedule starts afresh",
                                  str, metavar="MODEL_DIR")
    model_overrides: dict = _setting({}, "keyword overrides of the preset (e.g. dropout, "
                                     "normalize_first)")

    def __post_init__(self):
        if self.preset not in PRESETS:
            raise ValueError(f"`preset` must be one of {sorted(PRESETS)}. "
                             f"Received: preset={self.preset!r}")

    def to_dict(self):
        """The settings as a JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, settings):
        """A config from a dict; unknown keys are an error naming them and the known ones."""
        names = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(settings) - names)
        if unknown:
            raise ValueError(f"Unknown training settings {unknown}; the settings are "
                             f"{sorted(names)}.")
        return cls(**settings)

    def differences(self, saved, given):
        """`[(name, saved value, new value)]` for the settings in `given` (the names set
        explicitly this run) that contradict `saved` and may not change on resume."""
        return [(name, saved.get(name), getattr(self, name)) for name in sorted(given)
                if name not in CHANGEABLE_ON_RESUME and name in saved
                and saved[name] != getattr(self, name)
                and not (name == "precision" and self.precision == AUTO)]
