"""Training callbacks: step checkpoints, backups, time and step limits, validation BLEU."""

import glob
import json
import os
import re
import time

import keras

from keras_transformer.backend import has_tensorflow

CHECKPOINT_PATTERN = "ckpt-{step:08d}.weights.h5"


def list_checkpoints(directory):
    """Checkpoint files in `directory`, oldest first, as `(step, path)`.

    Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> for step in (20, 3):
    ...     open(os.path.join(folder, CHECKPOINT_PATTERN.format(step=step)), "w").close()
    >>> [(step, os.path.basename(path)) for step, path in list_checkpoints(folder)]
    [(3, 'ckpt-00000003.weights.h5'), (20, 'ckpt-00000020.weights.h5')]
    """
    found = []
    for path in glob.glob(os.path.join(directory, "ckpt-*.weights.h5")):
        match = re.search(r"ckpt-(\d+)\.weights\.h5$", path)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


class StepCheckpoint(keras.callbacks.Callback):
    """Save the weights every `every_n_steps` optimizer steps, keeping the last `keep`.

    Files are `ckpt-<step>.weights.h5`, the input of checkpoint averaging
    (`average_checkpoints`, Section 6.1 of the paper).

    Example:
    >>> import tempfile
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile(optimizer="sgd", loss="mse")
    >>> folder = tempfile.mkdtemp()
    >>> _ = model.fit(np.ones((8, 2)), np.ones((8, 1)), batch_size=2, verbose=0,
    ...               callbacks=[StepCheckpoint(folder, every_n_steps=2, keep=1)])
    >>> [step for step, _ in list_checkpoints(folder)]
    [4]
    """

    def __init__(self, directory, every_n_steps=1000, keep=5):
        super().__init__()
        self.directory = directory
        self.every_n_steps = every_n_steps
        self.keep = keep

    def on_train_batch_end(self, batch, logs=None):
        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        if step % self.every_n_steps == 0:
            self.save(step)

    def save(self, step):
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, CHECKPOINT_PATTERN.format(step=step))
        partial = path.replace(".weights.h5", ".partial.weights.h5")
        self.model.save_weights(partial)
        os.replace(partial, path)  # atomic: a killed run never leaves a truncated checkpoint
        for _, path in list_checkpoints(self.directory)[: -self.keep]:
            os.remove(path)


BACKUP_WEIGHTS = "latest.weights.h5"
BACKUP_METADATA = "training_metadata.json"


class Backup(keras.callbacks.Callback):
    """Write the training state a killed run resumes from: at every epoch end and, within
    an epoch, once `minutes` have passed since the last backup.

    The state is the weights with the optimizer's (its step counter included), in
    `directory/latest.weights.h5`; the step tells where the seeded batch stream resumes.
    With `position` (a function of the step), `training_metadata.json` also records the
    data position, e.g. `{"epoch", "batch", "seed", "batches_per_epoch"}`, which a
    resumed run checks against its own.
    Each write goes to a temporary file that replaces the previous backup atomically,
    so a kill during a write leaves the previous backup whole.

    Example:
    >>> import tempfile
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile(optimizer="sgd", loss="mse")
    >>> folder = tempfile.mkdtemp()
    >>> _ = model.fit(np.ones((8, 2)), np.ones((8, 1)), batch_size=2, epochs=2, verbose=0,
    ...               callbacks=[Backup(folder, minutes=0)])
    >>> sorted(os.listdir(folder)), Backup.saved_step(folder)
    (['latest.weights.h5', 'training_metadata.json'], 8)
    """

    def __init__(self, directory, minutes=None, position=None):
        super().__init__()
        self.directory = directory
        self.minutes = minutes
        self.position = position
        self._last = None

    @staticmethod
    def saved_step(directory):
        """The step of the backup in `directory` (from its metadata), or `None`."""
        try:
            return int(Backup.saved_metadata(directory)["step"])
        except (TypeError, ValueError, KeyError):
            return None

    @staticmethod
    def saved_metadata(directory):
        """The metadata of the backup in `directory` (a dict), or `None`."""
        try:
            with open(os.path.join(directory, BACKUP_METADATA), encoding="utf-8") as file:
                return json.load(file)
        except (OSError, ValueError):
            return None

    def on_train_begin(self, logs=None):
        if self._last is None:  # a resumed run's second `fit` keeps the clock
            self._last = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if self.minutes is not None and time.monotonic() - self._last >= 60 * self.minutes:
            self.save()

    def on_epoch_end(self, epoch, logs=None):
        self.save()

    def save(self):
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, BACKUP_WEIGHTS)
        partial = path.replace(".weights.h5", ".partial.weights.h5")
        self.model.save_weights(partial)
        os.replace(partial, path)
        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        metadata = os.path.join(self.directory, BACKUP_METADATA)
        with open(metadata + ".partial", "w", encoding="utf-8") as file:
            json.dump({"step": step, "time": time.time(),
                       **({"data": self.position(step)} if self.position else {})}, file)
        os.replace(metadata + ".partial", metadata)  # informative: the weights hold the step
        self._last = time.monotonic()


class TrainingLimit(keras.callbacks.Callback):
    """Stop once the optimizer reaches `max_steps` or after `max_minutes` of this run.

    Example:
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile(optimizer="sgd", loss="mse")
    >>> limit = TrainingLimit(max_steps=3)
    >>> _ = model.fit(np.ones((16, 2)), np.ones((16, 1)), batch_size=2, epochs=5,
    ...               verbose=0, callbacks=[limit])
    >>> int(model.optimizer.iterations.numpy()), limit.reason
    (3, 'reached 3 steps')
    """

    def __init__(self, max_steps=None, max_minutes=None):
        super().__init__()
        self.max_steps = max_steps
        self.max_minutes = max_minutes
        self.reason = None
        self._started = None

    def on_train_begin(self, logs=None):
        if self._started is None:  # a resumed run's second `fit` keeps the clock
            self._started = time.monotonic()
        self._check()

    def on_train_batch_end(self, batch, logs=None):
        self._check()

    def _check(self):
        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        if self.max_steps is not None and step >= self.max_steps:
            self.reason = f"reached {self.max_steps} steps"
        elif (self.max_minutes is not None
              and time.monotonic() - self._started >= 60 * self.max_minutes):
            self.reason = f"reached the {self.max_minutes}-minute limit at step {step}"
        if self.reason:
            self.model.stop_training = True


class BleuCallback(keras.callbacks.Callback):
    """Translate validation sentences every `every_n_steps` and log sacrebleu BLEU.

    `translate` maps a list of source strings to a list of hypotheses (for example
    `Translator(model, tokenizer).translate`). The score goes into the epoch logs as
    `val_bleu` and, with `log_dir`, into TensorBoard.

    Example:
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile(optimizer="sgd", loss="mse")
    >>> echo = lambda sources: ["the cat sat on the mat"] * len(sources)
    >>> bleu = BleuCallback(echo, ["die Katze saß auf der Matte"], ["the cat sat on the mat"],
    ...                     every_n_steps=2)
    >>> _ = model.fit(np.ones((8, 2)), np.ones((8, 1)), batch_size=2, verbose=0,
    ...               callbacks=[bleu])
    >>> [(step, round(score)) for step, score in bleu.history]
    [(2, 100), (4, 100)]
    """

    def __init__(self, translate, sources, references, every_n_steps=1000, log_dir=None):
        super().__init__()
        self.translate = translate
        self.sources = list(sources)
        self.references = list(references)
        self.every_n_steps = every_n_steps
        self.log_dir = log_dir
        self.history = []
        self._writer = None

    def score(self):
        import sacrebleu

        hypotheses = self.translate(self.sources)
        return sacrebleu.corpus_bleu(hypotheses, [self.references]).score

    def on_train_batch_end(self, batch, logs=None):
        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        if step % self.every_n_steps == 0:
            self._log(step, self.score())

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None and self.history:
            logs["val_bleu"] = self.history[-1][1]

    def _log(self, step, bleu):
        self.history.append((step, bleu))
        if self.log_dir and has_tensorflow():  # TensorBoard's event files need tf.summary
            import tensorflow as tf

            if self._writer is None:
                self._writer = tf.summary.create_file_writer(os.path.join(self.log_dir, "bleu"))
            with self._writer.as_default():
                tf.summary.scalar("validation_bleu", bleu, step=step)
            self._writer.flush()
