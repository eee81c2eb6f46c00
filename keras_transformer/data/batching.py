"""Token-budget batches in NumPy, for every backend and machines without TensorFlow.

`NumpyBatches` gives the batches `make_dataset` gives (same teacher-forcing shift,
same length buckets, same per-bucket batch sizes, same padding) without `tf.data`:
examples stream in (shuffled), each joins the bucket of its length, and a bucket is
emitted as a batch when it holds its batch size; at the end of a pass the partial
buckets are emitted too. It is for string pairs held in memory and your own code
(`keras-transformer train` reads the tokenized splits with `StoreBatches`). Only the
order of the shuffle differs from `tf.data`'s.
"""

import keras
import numpy as np

from keras_transformer.special_tokens import END_ID, PAD_ID, START_ID
from keras_transformer.validation import check_choice, check_positive_int

LONG_SEQUENCES = ("drop", "truncate")


def bucket_boundaries(max_sequence_length, step=1.1):
    """Length bucket boundaries: every length up to 20, then growing by `step`.

    Bucket `i` holds lengths in `[boundaries[i - 1], boundaries[i])`; the last holds
    lengths from `boundaries[-1]` to `max_sequence_length`.

    Example:
    >>> bucket_boundaries(30)
    [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22, 24, 26, 28, 30]
    """
    boundaries = []
    length = 2
    while length <= max_sequence_length:
        boundaries.append(length)
        length = max(length + 1, int(length * step))
    return boundaries


def token_budget_batch_sizes(tokens_per_batch, max_sequence_length, batch_size_multiple=1,
                             bucket_width=None):
    """`(boundaries, batch_sizes)`: each bucket's batch size under the token budget.

    A bucket's batch size is `tokens_per_batch` divided by the longest length it admits,
    rounded down to a multiple of `batch_size_multiple`. The buckets are
    `bucket_boundaries(max_sequence_length)`, or with `bucket_width=W` one every `W`
    lengths (fewer batch shapes, so fewer compilations, for more padding).

    Example:
    >>> boundaries, sizes = token_budget_batch_sizes(64, 16)
    >>> boundaries[:3], sizes[:3], sizes[-1]
    ([2, 3, 4], [64, 32, 21], 4)
    """
    check_positive_int("max_sequence_length", max_sequence_length, minimum=2)
    check_positive_int("batch_size_multiple", batch_size_multiple)
    smallest = max_sequence_length * batch_size_multiple
    if not isinstance(tokens_per_batch, int) or tokens_per_batch < smallest:
        raise ValueError(
            "`tokens_per_batch` must be an integer of at least `max_sequence_length * "
            f"batch_size_multiple` ({smallest}) so that a batch can hold the longest "
            f"sequences. Received: tokens_per_batch={tokens_per_batch!r}"
        )
    if bucket_width is None:
        boundaries = bucket_boundaries(max_sequence_length)
    else:
        check_positive_int("bucket_width", bucket_width)
        boundaries = list(range(bucket_width + 1, max_sequence_length + 1, bucket_width))
    multiple = batch_size_multiple
    return boundaries, [tokens_per_batch // length // multiple * multiple
                        for length in _longest_lengths(boundaries, max_sequence_length)]


def _longest_lengths(boundaries, max_sequence_length):
    """The longest length each bucket admits."""
    return [boundary - 1 for boundary in boundaries] + [max_sequence_length]


def teacher_forcing_batch(sources, targets, rows=None, width=None):
    """A padded batch of the teacher-forcing shift, in NumPy (the shift of
    `keras_transformer.data.pipeline.teacher_forcing`).

    Args:
        sources: list of source piece sequences (lists or 1-D arrays), no special ids.
        targets: list of target piece sequences, as long as `sources`.
        rows: int. Rows of the batch, at least `len(sources)`; the rest are padding.
        width: int. Columns of all three arrays; by default each array is as wide as
            its longest sequence (special id included), as `tf.data` pads.

    Returns:
        `({"encoder_token_ids": (B, S), "decoder_token_ids": (B, T)}, labels (B, T))`.

    Example:
    >>> features, labels = teacher_forcing_batch([[7, 8]], [[9]], rows=2)
    >>> features["encoder_token_ids"].tolist(), features["decoder_token_ids"].tolist()
    ([[7, 8, 3], [0, 0, 0]], [[2, 9], [0, 0]])
    >>> labels.tolist()
    [[9, 3], [0, 0]]
    """
    rows = len(sources) if rows is None else rows

    def padding(sequences):
        longest = 1 + max((len(sequence) for sequence in sequences), default=0)
        return np.full((rows, longest if width is None else width), PAD_ID, "int32")

    encoder, decoder, labels = padding(sources), padding(targets), padding(targets)
    decoder[:len(targets), 0] = START_ID
    for row, (source, target) in enumerate(zip(sources, targets, strict=True)):
        encoder[row, :len(source)] = source
        encoder[row, len(source)] = END_ID
        decoder[row, 1:len(target) + 1] = target
        labels[row, :len(target)] = target
        labels[row, len(target)] = END_ID
    return {"encoder_token_ids": encoder, "decoder_token_ids": decoder}, labels


class NumpyBatches:
    """String pairs to length-bucketed, token-budget batches of NumPy arrays.

    Iterating gives `({"encoder_token_ids": (B, S), "decoder_token_ids": (B, T)},
    labels (B, T))`, int32, as `make_dataset` does. Pairs are tokenized once, with
    SentencePiece's Python API.

    Args:
        pairs: list of `(source, target)` string pairs.
        tokenizer: a `Tokenizer`.
        tokens_per_batch: int. Most padded tokens per side and batch.
        max_sequence_length: int. Longest sequence, special id included.
        long_sequences: `"drop"` (skip pairs with a side too long) or `"truncate"`.
        shuffle: bool. Shuffle the examples before every pass.
        seed: int or `None`. Seed of the shuffle; the same seed gives the same batches.
        repeat: bool. Repeat forever (a new shuffle each pass).
        batch_size_multiple: int. Every batch size is a multiple of it (partial batches
            lose their last `B % N` examples, as in `batch_by_token_budget`).
        pad_to_bucket: bool. Pad each batch to the longest length its bucket admits, not
            to its longest sequence, so a repeated stream has one shape per bucket (one
            compilation each under `jax.jit`). Defaults to `False`.
        bucket_width: int or `None`. Buckets every `bucket_width` lengths instead of the
            pipeline's (see `token_budget_batch_sizes`).

    Example:
    >>> from keras_transformer.data import train_tokenizer
    >>> tokenizer = train_tokenizer(["Guten Tag.", "Good day.", "Danke.", "Thanks."] * 5,
    ...                             vocabulary_size=40)
    >>> batches = NumpyBatches([("Guten Tag.", "Good day."), ("Danke.", "Thanks.")] * 8,
    ...                        tokenizer, tokens_per_batch=32, max_sequence_length=16)
    >>> all(f["encoder_token_ids"].size <= 32 for f, _ in batches)
    True
    >>> sum(len(labels) for _, labels in batches)
    16
    """

    def __init__(self, pairs, tokenizer, tokens_per_batch=25_000, max_sequence_length=256,
                 long_sequences="drop", shuffle=True, seed=None, repeat=False,
                 batch_size_multiple=1, pad_to_bucket=False, bucket_width=None):
        check_choice("long_sequences", long_sequences, LONG_SEQUENCES)
        self.boundaries, self.batch_sizes = token_budget_batch_sizes(
            tokens_per_batch, max_sequence_length, batch_size_multiple, bucket_width)
        pairs = list(pairs)
        if not pairs:
            raise ValueError("`pairs` must hold at least one (source, target) pair. "
                             "Received none.")
        limit = max_sequence_length - 1
        sources = tokenizer.encode_as_ids([source for source, _ in pairs])
        targets = tokenizer.encode_as_ids([target for _, target in pairs])
        self.examples = []
        for source, target in zip(sources, targets, strict=True):
            if long_sequences == "drop" and (len(source) > limit or len(target) > limit):
                continue
            self.examples.append((source[:limit], target[:limit]))
        self.shuffle, self.seed, self.repeat = shuffle, seed, repeat
        self.multiple = batch_size_multiple
        self.longest = _longest_lengths(self.boundaries, max_sequence_length)
        self.pad_to_bucket = pad_to_bucket

    def _bucket(self, example):
        length = max(len(example[0]), len(example[1])) + 1  # + 1: the start or end id
        return int(np.searchsorted(self.boundaries, length, side="right"))

    def _batch(self, examples, bucket):
        size = len(examples) // self.multiple * self.multiple
        examples = examples[:size]
        width = self.longest[bucket] if self.pad_to_bucket else None
        return teacher_forcing_batch([source for source, _ in examples],
                                     [target for _, target in examples], width=width)

    def __iter__(self):
        rng = np.random.default_rng(self.seed)
        # Partial buckets carry over into the next pass, as in a repeated tf.data stream.
        buckets = [[] for _ in range(len(self.batch_sizes))]
        while True:
            order = rng.permutation(len(self.examples)) if self.shuffle else range(
                len(self.examples))
            for i in order:
                bucket = self._bucket(self.examples[i])
                buckets[bucket].append(self.examples[i])
                if len(buckets[bucket]) == self.batch_sizes[bucket]:
                    yield self._batch(buckets[bucket], bucket)
                    buckets[bucket] = []
            if not self.repeat:
                for bucket, examples in enumerate(buckets):
                    if len(examples) >= self.multiple:
                        yield self._batch(examples, bucket)
                return

    def as_py_dataset(self):
        """The batches of one pass as a `keras.utils.PyDataset` (e.g. `validation_data`)."""
        return _BatchList(list(self))

    def skip(self, count):
        """An iterator over the batches after the first `count` (resuming a run)."""
        iterator = iter(self)
        for _ in range(count):
            next(iterator)
        return iterator


class _BatchList(keras.utils.PyDataset):
    def __init__(self, batches):
        super().__init__()
        self.batches = batches

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, index):
        return self.batches[index]
