"""The data stage of `train`: batches from a prepared data folder, on every backend.

Training batches are read from the tokenized splits on disk (`TokenStore`) in the order
`StoreBatches` plans, so TensorFlow (`tf.data`, `store_dataset`), JAX and PyTorch (NumPy)
see the same pairs in the same batches in the same order. A run that starts at step `s`
computes where its batches begin from `s` alone; nothing before it is read or replayed.
TensorFlow and PyTorch pad a batch to its longest sequence; JAX pads it to its length
bucket's longest length and batch size (with rows of padding), so `jax.jit` compiles one
train step a bucket. Several workers each read their own share of every global batch.
"""

import dataclasses
import os

from keras_transformer.backend import backend
from keras_transformer.data.batch_plan import StoreBatches
from keras_transformer.data.corpora import load_tsv
from keras_transformer.data.token_store import TokenStore, tokenize_folder
from keras_transformer.data.tokenizer_files import has_tokenizer
from keras_transformer.folders import TOKENIZER_FILE, TRAIN_FILE, VALIDATION_FILE


@dataclasses.dataclass
class TrainingData:
    """What `train` trains and validates on.

    Attributes:
        batches: `start_step -> batches` for `fit`: a `tf.data.Dataset`, a NumPy batch
            iterator, or (several workers) a function of a `tf.distribute.InputContext`.
        validation: the validation batches, one pass.
        validation_pairs: the validation `(source, target)` strings, for BLEU.
        batches_per_epoch: int. Batches in one pass over the training pairs.
        seed: int. The seed of the batch order.
    """

    batches: object
    validation: object
    validation_pairs: list
    batches_per_epoch: int
    seed: int

    def position(self, step):
        """The data position of step `step`: what a backup records beside the weights.

        Example:
        >>> TrainingData(None, None, [], batches_per_epoch=100, seed=0).position(250)
        {'epoch': 2, 'batch': 50, 'seed': 0, 'batches_per_epoch': 100}
        """
        epoch, batch = divmod(int(step), self.batches_per_epoch)
        return {"epoch": epoch, "batch": batch, "seed": self.seed,
                "batches_per_epoch": self.batches_per_epoch}


def check_data_folder(data_dir):
    """A `FileNotFoundError` naming the missing file unless `data_dir` is a data folder."""
    for name in (TRAIN_FILE, VALIDATION_FILE, TOKENIZER_FILE):
        if name == TOKENIZER_FILE and has_tokenizer(data_dir):
            continue
        if not os.path.exists(os.path.join(data_dir, name)):
            raise FileNotFoundError(
                f"`{os.path.join(data_dir, name)}` is missing: `data_dir` must be a folder "
                "written by `keras-transformer prepare --output DIR`."
            )


def training_data(data_dir, config, distribution):
    """The `TrainingData` of `config` (a `TrainingConfig`) on a data folder.

    The folder's splits are tokenized first if they are not yet (see `tokenize_folder`).
    Batch sizes are multiples of the replicas, as `fit` cannot split a batch unevenly.
    """
    dtype = tokenize_folder(data_dir, progress=True)["dtype"]
    replicas = distribution.replicas
    batching = dict(tokens_per_batch=config.tokens_per_batch * replicas,
                    max_sequence_length=config.max_sequence_length,
                    batch_size_multiple=replicas, pad_to_bucket=backend() == "jax")
    train_store = TokenStore(data_dir, "train", dtype)
    validation_store = TokenStore(data_dir, "validation", dtype)

    def store_batches(store, worker=(0, 1), **options):
        return StoreBatches(store, worker=worker, **batching, **options)

    train = dict(seed=config.seed, sentences_only=config.sentences_only)
    validation = dict(shuffle=False, long_sequences="truncate")
    train_batches = store_batches(train_store, **train)
    if distribution.multi_worker:
        from keras_transformer.data.pipeline import store_dataset

        def per_worker(store, start, epochs, options):
            def dataset(context):  # a tf.distribute.InputContext
                worker = (context.input_pipeline_id, context.num_input_pipelines)
                parts = context.num_replicas_in_sync // context.num_input_pipelines
                return store_dataset(store_batches(store, worker, **options), start, epochs,
                                     parts=parts)
            return dataset

        batches = lambda start: per_worker(train_store, start, None, train)  # noqa: E731
        validation_data = per_worker(validation_store, 0, 1, validation)
    elif backend() == "tensorflow":
        from keras_transformer.data.pipeline import store_dataset

        batches = lambda start: store_dataset(train_batches, start)  # noqa: E731
        validation_data = store_dataset(store_batches(validation_store, **validation),
                                        epochs=1)
    else:
        from keras_transformer.data.batching import _BatchList

        batches = train_batches.iterate
        validation_data = _BatchList(list(store_batches(validation_store, **validation)
                                          .iterate(epochs=1)))
    return TrainingData(batches, validation_data,
                        load_tsv(os.path.join(data_dir, VALIDATION_FILE)),
                        train_batches.num_batches, config.seed)
