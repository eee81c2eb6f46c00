"""`train`: a data folder from `prepare` to a model folder, resumable, on every backend.

The model folder holds `model.keras`, `tokenizer.model`, `config.json` (the settings, and
the memory allocator of the latest run, `tcmalloc` or `glibc`: see
`keras_transformer.allocator`), `checkpoints/` (the last K step checkpoints, for
averaging), `backup/` (the
training state, written at every checkpoint and every `backup_minutes`, so a killed
run resumes where it was backed up, losing minutes, not hours),
`logs/` (TensorBoard) and `history.csv`. Running `train` again on the same folder
continues from the backup until `max_steps` is reached; it starts at the batch its step
points to, replaying nothing. The batches are read from the splits `prepare` tokenized to
disk (`training.inputs`), the same on every backend: through `tf.data` on TensorFlow,
where several devices train under `tf.distribute`, and as NumPy arrays on JAX and
PyTorch, with `keras.distribution.DataParallel` over JAX's devices.

Under `MultiWorkerMirroredStrategy` the steps run in `fit_with_custom_loop` (Keras' `fit`
cannot run there, see `custom_loop`). Every worker runs every callback (saving may
read variables collectively), but only the chief writes the model folder; the others write to a
temporary folder that is deleted at the end. All workers resume from the chief's
`backup/`, so the model folder must be on a file system that every worker reads.
"""

import dataclasses
import json
import logging
import os
import shutil
import tempfile
import time

import keras

from keras_transformer.allocator import running_allocator
from keras_transformer.backend import has_tensorflow
from keras_transformer.data.tokenizer_files import copy_tokenizer, load_tokenizer, tokenizer_md5
from keras_transformer.folders import (
    BACKUP_DIR,
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    HISTORY_FILE,
    LOGS_DIR,
    MODEL_FILE,
    check_model_folder,
)
from keras_transformer.models.transformer import build_transformer
from keras_transformer.training.callbacks import (
    BACKUP_WEIGHTS,
    Backup,
    BleuCallback,
    StepCheckpoint,
    TrainingLimit,
)
from keras_transformer.training.compile import compile_transformer
from keras_transformer.training.config import CHANGEABLE_ON_RESUME, RETIRED, TrainingConfig
from keras_transformer.training.distribution import select_distribution
from keras_transformer.training.inputs import check_data_folder, training_data
from keras_transformer.training.precision import AUTO, choose_precision, set_precision

logger = logging.getLogger(__name__)

# The settings config.json held at its top level before it saved a whole TrainingConfig.
PRECISION_AUTO_KEY = "precision_auto"
LEGACY_KEYS = ("preset", "model_overrides", "max_sequence_length", "tokens_per_batch",
               "precision", "sentences_only")


def train(data_dir, output_dir, config=None, **settings):
    """Train (or resume training) a Transformer on a folder written by `prepare`.

    It reads as its stages: the config (saved recipe on resume), the distribution, the
    data, the model (restored from the backup), the callbacks, and `fit`.

    Args:
        data_dir: folder with `train.tsv`, `validation.tsv` and `tokenizer.model`, and
            the tokenized splits `prepare` writes (made here first where missing).
        output_dir: the model folder (created; reused to resume).
        config: a `TrainingConfig` (every setting), or `None` for its defaults.
        **settings: settings of `TrainingConfig` to set (over `config`'s); any other
            keyword is a model override of the preset (e.g. `dropout=0.0`).

    On resume (`output_dir/config.json` exists) the saved settings are the recipe:
    settings not given here are the saved ones, and a given setting that contradicts
    its saved value stops the run with an error naming both, unless it is one of
    `CHANGEABLE_ON_RESUME` (`max_steps`, `max_minutes`, the checkpoint and BLEU
    cadence, `jit_compile`, `strategy`, `devices`, `verbose`). With `config`, every
    setting counts as given.

    See `TrainingConfig` (or `keras-transformer train --help`) for each setting:
    `max_steps` counts over every run on the folder; `tokens_per_batch` is per replica
    and side; `checkpoint_every` sets the steps between checkpoints and validation
    passes (each followed by a backup), `backup_minutes` the most minutes between the
    backups a killed run resumes from.

    Returns:
        A dict: the final step, the step it resumed from (0 for a fresh run), why
        training stopped, the last logs and BLEU history, `seconds` spent training
        (validation passes and checkpoints included; setup and the final save not) and
        `first_step_seconds`, from the call to the end of this run's first step (`None`
        if it took none).

    Example (two steps of a one-layer model on a folder written on the spot):
    >>> import tempfile
    >>> from keras_transformer.data import train_tokenizer, write_tsv
    >>> data_dir, output_dir = tempfile.mkdtemp(), tempfile.mkdtemp()
    >>> pairs = [("Guten Tag.", "Good day."), ("Danke.", "Thanks.")] * 4
    >>> write_tsv(os.path.join(data_dir, "train.tsv"), pairs)
    >>> write_tsv(os.path.join(data_dir, "validation.tsv"), pairs[:2])
    >>> _ = train_tokenizer([text for pair in pairs for text in pair],
    ...                     os.path.join(data_dir, "tokenizer.model"), vocabulary_size=30)
    >>> result = train(data_dir, output_dir, preset="tiny", max_steps=2, tokens_per_batch=64,
    ...                max_sequence_length=16, checkpoint_every=2, bleu_every=0, verbose=0,
    ...                num_layers=1)  # num_layers: a model override
    >>> result["step"], result["stopped"]
    (2, 'reached 2 steps')
    >>> {"model.keras", "config.json", "checkpoints"} <= set(os.listdir(output_dir))
    True
    """
    started = time.monotonic()
    check_data_folder(data_dir)
    config, saved = _configure(output_dir, config, settings)
    distribution = _distribution(config)
    chief = distribution.chief
    # As TensorFlow recommends for MultiWorkerMirroredStrategy, non-chief workers save like
    # the chief (saving may read variables collectively), into a folder of their own.
    write_dir = output_dir if chief else tempfile.mkdtemp(prefix="keras-transformer-worker-")
    tokenizer = load_tokenizer(data_dir)
    initial = _initial_model_config(config, data_dir)
    if chief:
        copy_tokenizer(data_dir, output_dir)
    data = training_data(data_dir, config, distribution)

    def new_model():
        with distribution.scope():
            if config.initial_model:
                model = _load_initial_model(config.initial_model)
            else:
                model = build_transformer(config.preset,
                                          vocabulary_size=tokenizer.vocabulary_size,
                                          **config.model_overrides)
            compile_transformer(model, warmup_steps=config.warmup_steps,
                                learning_rate_scale=config.learning_rate_scale,
                                label_smoothing=config.label_smoothing,
                                jit_compile=config.jit_compile)
        return model

    config, precision_auto = _precision(config, saved, new_model, data, distribution)
    if chief:
        _write_config(output_dir, config, tokenizer.vocabulary_size, data_dir, precision_auto,
                      generation=initial.get("generation"))
    model = new_model()
    with distribution.scope():
        steps_done = _restore_backup(model, os.path.join(output_dir, BACKUP_DIR), data)
    callbacks, limit, bleu = _callbacks(config, model, tokenizer, data, write_dir,
                                        distribution.multi_worker)
    first_step = {}  # seconds from the call to the end of this run's first step
    callbacks.append(keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: (
        first_step.setdefault("seconds", time.monotonic() - started))))
    logs, fit_seconds = _fit(model, data, callbacks, limit, config, steps_done, distribution)

    step = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    model.save(os.path.join(write_dir, MODEL_FILE))
    if not chief:
        shutil.rmtree(write_dir, ignore_errors=True)
    result = {"step": step, "resumed_from": steps_done,
              "stopped": limit.reason or f"finished {_epochs(config)} epochs",
              "logs": logs, "bleu": bleu.history if bleu else [], "seconds": fit_seconds,
              "first_step_seconds": first_step.get("seconds"),
              "model": os.path.join(output_dir, MODEL_FILE)}
    logger.info("Training stopped at step %d: %s", step, result["stopped"])
    return result


def _configure(output_dir, config, settings):
    """`(config, saved config.json or None)`: the settings given, or on resume the saved
    recipe changed only where it may change."""
    config, given = _settings(config, settings)
    os.makedirs(output_dir, exist_ok=True)
    saved = _read_config(output_dir)
    if saved is not None:
        config = _resume_config(output_dir, saved, config, given)
    keras.utils.set_random_seed(config.seed)
    return config, saved


def _distribution(config):
    distribution = select_distribution(config.strategy, config.devices)
    if config.precision == AUTO and distribution.multi_worker:
        raise ValueError("--precision auto cannot run with several workers: each would "
                         "time its own steps and they could choose differently. Pass "
                         "--precision float32 or mixed_bfloat16 (the same on every worker).")
    if config.precision != AUTO:
        set_precision(config.precision)
    return distribution


def _precision(config, saved, new_model, data, distribution):
    """`(config, what --precision auto measured)`: with `auto`, the faster precision
    here, timed over a few steps; on resume, what the folder's first run measured."""
    precision_auto = (saved or {}).get(PRECISION_AUTO_KEY)
    if config.precision != AUTO:
        return config, precision_auto

    def fit_steps(precision, steps, timer):
        trial = new_model()
        with distribution.fit_scope():
            trial.fit(data.batches(0), steps_per_epoch=steps, epochs=1, callbacks=[timer],
                      shuffle=False, verbose=0)

    chosen, seconds = choose_precision(fit_steps)
    logger.info("--precision auto chose %s (seconds per train step: %s).", chosen,
                ", ".join(f"{name} {value:.3f}" for name, value in seconds.items()))
    keras.utils.set_random_seed(config.seed)  # the same weights as without the trial
    return (dataclasses.replace(config, precision=chosen),
            {"chosen": chosen, "seconds_per_step": seconds})


def _callbacks(config, model, tokenizer, data, write_dir, multi_worker):
    """`(callbacks, the TrainingLimit among them, the BleuCallback or None)`."""
    limit = TrainingLimit(max_steps=config.max_steps, max_minutes=config.max_minutes)
    # Timed backups would come at different steps on different workers.
    backup_minutes = None if multi_worker else config.backup_minutes
    callbacks = [
        Backup(os.path.join(write_dir, BACKUP_DIR), backup_minutes, position=data.position),
        limit,
        StepCheckpoint(os.path.join(write_dir, CHECKPOINTS_DIR), config.checkpoint_every,
                       config.keep_checkpoints),
        keras.callbacks.TerminateOnNaN(),
        keras.callbacks.CSVLogger(os.path.join(write_dir, HISTORY_FILE), append=True),
    ]
    if has_tensorflow():  # Keras' TensorBoard callback writes with tf.summary
        callbacks.append(keras.callbacks.TensorBoard(os.path.join(write_dir, LOGS_DIR),
                                                     update_freq=50))
    bleu = None
    bleu_every = config.checkpoint_every if config.bleu_every is None else config.bleu_every
    if bleu_every:
        from keras_transformer.generation import Translator

        translator = Translator(model, tokenizer)
        sample = data.validation_pairs[:config.bleu_sentences]
        bleu = BleuCallback(lambda texts: translator.translate(texts, method="greedy",
                                                               progress=False),
                            [s for s, _ in sample], [t for _, t in sample],
                            every_n_steps=bleu_every, log_dir=os.path.join(write_dir, LOGS_DIR))
        callbacks.insert(3, bleu)
    return callbacks, limit, bleu


def _epochs(config):
    return -(-config.max_steps // config.checkpoint_every)


def _fit(model, data, callbacks, limit, config, steps_done, distribution):
    """Runs `fit` from `steps_done` to `max_steps`; returns `(last logs, seconds in fit)`.

    An epoch is `checkpoint_every` steps: it ends with a validation pass and a backup.
    A run resumed from a timed backup first trains to the next epoch boundary, so
    validation comes at the same steps as in an uninterrupted run.
    """
    period = config.checkpoint_every
    epochs = _epochs(config)
    runs = []  # (first epoch, steps in its epochs, the step it starts from)
    if steps_done < config.max_steps:
        if steps_done % period:
            runs.append((steps_done // period, period - steps_done % period, steps_done))
        aligned = -(-steps_done // period) * period
        if aligned < config.max_steps:
            runs.append((aligned // period, period, aligned))
    else:
        limit.reason = f"already trained for {steps_done} steps"
    logs = {}
    fit_started = time.monotonic()
    for first_epoch, steps_per_epoch, start in runs:
        if limit.reason:
            break
        # The batches start where step `start` takes its batch: nothing is replayed, and
        # a resumed run sees exactly the batches an uninterrupted one would have seen.
        options = dict(validation_data=data.validation, initial_epoch=first_epoch,
                       epochs=epochs if steps_per_epoch == period else first_epoch + 1,
                       steps_per_epoch=steps_per_epoch, callbacks=callbacks,
                       verbose=config.verbose)
        if distribution.multi_worker:
            from keras_transformer.training.custom_loop import fit_with_custom_loop

            history = fit_with_custom_loop(model, data.batches(start), **options)
        else:
            with distribution.fit_scope():
                # The batches are shuffled already (`shuffle=True` would only warn here).
                history = model.fit(data.batches(start), shuffle=False, **options)
        logs.update({key: float(values[-1]) for key, values in history.history.items()
                     if values})
    return logs, time.monotonic() - fit_started


def _restore_backup(model, backup_dir, data):
    """Load the backup, if any, into `model` and its optimizer; return its step (or 0).

    The data position is computed from the step; a backup whose recorded position does
    not match (the data folder changed since) is resumed all the same, with a warning."""
    # Built before `fit` on a fresh run too: variables made inside the first traced step
    # make TensorFlow trace it twice (about 10 s more to the first step).
    model.optimizer.build(model.trainable_variables)
    weights = os.path.join(backup_dir, BACKUP_WEIGHTS)
    if not os.path.exists(weights):
        return 0
    try:
        model.load_weights(weights)
    except OSError:  # a folder of an earlier version (Keras' BackupAndRestore) killed mid-write
        model.load_weights(weights + ".bkp")
    steps = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    position = data.position(steps)
    metadata = Backup.saved_metadata(backup_dir) or {}
    recorded = metadata.get("data")
    if recorded and metadata.get("step") == steps and recorded != position:
        logger.warning(
            "The backup in %s was written with another batch plan (%s); the data folder or "
            "the batching changed since. Resuming at step %d with the current plan (%s): "
            "the batches differ from those an uninterrupted run would have seen.",
            backup_dir, recorded, steps, position)
    logger.info("Resuming from %s at step %d (epoch %d, batch %d of %d; nothing replayed).",
                backup_dir, steps, position["epoch"], position["batch"],
                position["batches_per_epoch"])
    return steps


def _settings(config, settings):
    """`(TrainingConfig, names given explicitly)` from `train`'s arguments."""
    names = {field.name for field in dataclasses.fields(TrainingConfig)}
    overrides = {key: settings.pop(key) for key in list(settings) if key not in names}
    if overrides:
        settings["model_overrides"] = {**settings.get("model_overrides", {}), **overrides}
    if config is None:
        return TrainingConfig(**settings), set(settings)
    if not isinstance(config, TrainingConfig):
        raise TypeError(f"`config` must be a TrainingConfig. Received: {type(config).__name__}")
    return dataclasses.replace(config, **settings), names


def _read_config(output_dir):
    path = os.path.join(output_dir, CONFIG_FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as file:
        return json.load(file)


def _resume_config(output_dir, saved, config, given):
    """The config of a resumed run: the saved recipe, changed only where it may change."""
    # Folders written before TrainingConfig saved these settings at the top level.
    recorded = saved.get("training") or {key: saved[key] for key in LEGACY_KEYS if key in saved}
    recorded = {key: value for key, value in recorded.items() if key not in RETIRED}
    conflicts = config.differences(recorded, given)
    if conflicts:
        lines = "; ".join(f"--{name.replace('_', '-')} (`{name}`): saved {old!r}, given {new!r}"
                          for name, old, new in conflicts)
        raise ValueError(
            f"{os.path.join(output_dir, CONFIG_FILE)} was trained with another recipe: "
            f"{lines}. Resume without these settings to continue the saved recipe, or train "
            f"into a fresh --output folder. Settings that may change on resume: "
            f"{', '.join(CHANGEABLE_ON_RESUME)}."
        )
    missing = sorted({field.name for field in dataclasses.fields(TrainingConfig)}
                     - set(recorded) - set(CHANGEABLE_ON_RESUME))
    if missing:
        logger.warning("%s predates saved training settings; resuming with %s.",
                       os.path.join(output_dir, CONFIG_FILE),
                       ", ".join(f"{name}={getattr(config, name)!r}" for name in missing))
    kept = {name: value for name, value in recorded.items()
            if name not in CHANGEABLE_ON_RESUME or name not in given}
    return dataclasses.replace(config, **kept)


def _initial_model_config(config, data_dir):
    """The `config.json` of `--initial-model` (`{}` without one), once it is checked to
    read the data folder's tokenizer and to take no model overrides."""
    if not config.initial_model:
        return {}
    check_model_folder(config.initial_model, "initial_model")
    if tokenizer_md5(config.initial_model) != tokenizer_md5(data_dir):
        raise ValueError(
            f"The data in `{data_dir}` was tokenized with another tokenizer than the "
            f"initial model `{config.initial_model}` reads. Prepare it with "
            f"`keras-transformer prepare --tokenizer {config.initial_model} ...`.")
    if config.model_overrides:
        raise ValueError(
            f"Model overrides ({sorted(config.model_overrides)}) cannot change the "
            f"architecture of --initial-model {config.initial_model}; drop them.")
    return _read_config(config.initial_model) or {}


def _load_initial_model(model_dir):
    """The model of `model_dir`, rebuilt under the current dtype policy (`--precision`)."""
    import keras_transformer.models  # noqa: F401  (registers the serializable classes)
    from keras_transformer.models.transformer import Transformer

    saved = keras.models.load_model(os.path.join(model_dir, MODEL_FILE), compile=False)
    model_config = {**saved.get_config(), "dtype": keras.config.dtype_policy().name}
    model = Transformer.from_config(model_config)
    model.set_weights(saved.get_weights())
    return model


def _write_config(output_dir, config, vocabulary_size, data_dir, precision_auto=None,
                  generation=None):
    allocator = running_allocator()  # of the latest run; tcmalloc trains faster than glibc
    logger.info("Memory allocator: %s.", allocator)
    content = {"vocabulary_size": vocabulary_size, "data_dir": os.path.abspath(data_dir),
               "max_sequence_length": config.max_sequence_length,
               "training": config.to_dict(), "allocator": allocator}
    if generation:  # an imported model's decoding defaults, kept through fine-tuning
        content["generation"] = generation
    if precision_auto:  # what `--precision auto` measured when the folder was started
        content[PRECISION_AUTO_KEY] = precision_auto
    with open(os.path.join(output_dir, CONFIG_FILE), "w", encoding="utf-8") as file:
        json.dump(content, file, indent=2)
