"""Token-budget batches from tokenized splits on disk, the same on every backend.

Section 5.1 of Vaswani et al. (2017): "Sentence pairs were batched together by approximate
sequence length", about 25,000 tokens a side. `BatchPlan` decides which pairs form each
batch, from their lengths alone; `StoreBatches` reads those pairs from a `TokenStore`
and pads them. Both are NumPy: TensorFlow wraps the same batches in `tf.data`
(`keras_transformer.data.pipeline.store_dataset`), JAX and PyTorch iterate them directly,
so every backend sees the same batches in the same order.

An epoch's plan: a seeded permutation of the pairs, grouped (stably) by length bucket
(`bucket_boundaries`), cut into each bucket's batch size under the token budget, the rest of
a bucket making one shorter batch. The batch order is then shuffled with the same seed. The
buckets' sizes do not depend on the order, so every epoch has the same number of batches,
and step `s` of a run is batch `s % num_batches` of epoch `s // num_batches`: a resumed run
computes its position instead of replaying the batches before it. Every pair is in exactly
one batch of every epoch: where a batch must hold a multiple of the replicas, or a fixed
number of rows for `jax.jit`, `StoreBatches` adds rows of padding (which the loss and the
metrics ignore) rather than leave pairs out.
"""

import numpy as np

from keras_transformer.data.batching import (
    LONG_SEQUENCES,
    _longest_lengths,
    teacher_forcing_batch,
    token_budget_batch_sizes,
)
from keras_transformer.validation import check_choice


class BatchPlan:
    """Which pairs form each batch of each epoch, from the pairs' lengths.

    Args:
        lengths: int array `(N,)`. Each pair's length, the longer of its encoder input and
            labels (pieces + 1).
        tokens_per_batch: int. Most padded tokens per side and batch.
        max_sequence_length: int. The longest length (`lengths` must not exceed it).
        batch_size_multiple: int. Every full batch's size is a multiple of it (a bucket's
            last batch may hold fewer pairs; `StoreBatches` pads its rows).
        shuffle: bool. Shuffle the pairs and the batch order of every epoch. Without it,
            batches come bucket by bucket in the pairs' order (for validation).
        seed: int. With the epoch number, seeds the shuffle of each epoch.
        bucket_width: int or `None`. See `token_budget_batch_sizes`.

    Example:
    >>> plan = BatchPlan(np.array([3, 3, 9, 4, 9, 3]), tokens_per_batch=18,
    ...                  max_sequence_length=9, shuffle=False)
    >>> [batch.tolist() for batch, _ in plan.epoch(0)]  # buckets of lengths 3, 4 and 9
    [[0, 1, 5], [3], [2, 4]]
    >>> plan.num_batches, plan.position(7)
    (3, (2, 1))
    """

    def __init__(self, lengths, tokens_per_batch, max_sequence_length, batch_size_multiple=1,
                 shuffle=True, seed=0, bucket_width=None):
        self.boundaries, self.batch_sizes = token_budget_batch_sizes(
            tokens_per_batch, max_sequence_length, batch_size_multiple, bucket_width)
        lengths = np.asarray(lengths)
        if lengths.size and lengths.max() > max_sequence_length:
            raise ValueError(f"`lengths` must be at most `max_sequence_length` "
                             f"({max_sequence_length}). Received: {int(lengths.max())}")
        self.longest = _longest_lengths(self.boundaries, max_sequence_length)
        # A small dtype makes the stable sort of each epoch 2-3x faster.
        self.buckets = np.searchsorted(self.boundaries, lengths, side="right").astype(
            np.uint8 if len(self.batch_sizes) < 256 else np.int32)
        self.multiple = batch_size_multiple
        self.shuffle, self.seed = shuffle, seed
        self._sizes = self._epoch_sizes()
        self.num_batches = len(self._sizes)
        if self.num_batches == 0:
            raise ValueError("`lengths` must hold at least one pair. Received none.")

    def _epoch_sizes(self):
        """`[(bucket, size)]` of each batch of an epoch, in bucket order."""
        counts = np.bincount(self.buckets, minlength=len(self.batch_sizes))
        sizes = []
        for bucket, (count, size) in enumerate(zip(counts, self.batch_sizes, strict=True)):
            sizes += [(bucket, size)] * (int(count) // size)
            if count % size:
                sizes.append((bucket, int(count) % size))
        return sizes

    def position(self, step):
        """`(epoch, batch)`: where step `step` (counted from 0) of a run takes its batch."""
        return divmod(int(step), self.num_batches)

    def epoch(self, epoch):
        """The batches of `epoch`, in order: a list of `(pair indices, bucket)`."""
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(len(self.buckets)) if self.shuffle else np.arange(
            len(self.buckets))
        order = order[np.argsort(self.buckets[order], kind="stable")]
        starts = np.cumsum([0] + [size for _, size in self._sizes])
        batches = [(order[start:start + size], bucket)
                   for (bucket, size), start in zip(self._sizes, starts, strict=False)]
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches


class StoreBatches:
    """Padded training batches read from a `TokenStore` as a `BatchPlan` orders them.

    Each batch is `({"encoder_token_ids": (B, S), "decoder_token_ids": (B, T)},
    labels (B, T))`, int32, from `teacher_forcing_batch`: encoder input = source pieces +
    `END_ID`, decoder input = `START_ID` + target pieces, labels = target pieces + `END_ID`.

    Args:
        store: a `TokenStore`.
        tokens_per_batch: int. Most padded tokens per side and batch.
        max_sequence_length: int. Longest sequence, special id included.
        long_sequences: `"drop"` (leave out pairs with a side too long) or `"truncate"`.
        shuffle: bool. Shuffle every epoch (see `BatchPlan`).
        seed: int. Seed of the shuffle.
        batch_size_multiple: int. Every batch's rows are a multiple of it (a bucket's last
            batch gets rows of padding).
        pad_to_bucket: bool. Pad to the longest length the batch's bucket admits and to
            its batch size, with rows of padding (one shape per bucket, one compilation
            each under `jax.jit`), rather than to the batch's longest sequence.
        sentences_only: bool. Use only the pairs the store marks as sentence pairs.
        worker: `(index, count)`. Read only share `index` of `count` equal, disjoint
            shares of each batch (rows in order), as one of `count` workers.

    Example:
    >>> import tempfile
    >>> from keras_transformer.data import train_tokenizer
    >>> from keras_transformer.data.token_store import TokenStore, write_split
    >>> tokenizer = train_tokenizer(["Guten Tag.", "Good day."] * 5, vocabulary_size=30)
    >>> folder = tempfile.mkdtemp()
    >>> _ = write_split(folder, "train", [("Guten Tag.", "Good day.")] * 4, tokenizer)
    >>> batches = StoreBatches(TokenStore(folder, "train", "uint16"), tokens_per_batch=64,
    ...                        max_sequence_length=16)
    >>> features, labels = next(batches.iterate())
    >>> features["encoder_token_ids"].shape, int(features["decoder_token_ids"][0, 0])
    ((4, 5), 2)
    """

    def __init__(self, store, tokens_per_batch=25_000, max_sequence_length=256,
                 long_sequences="drop", shuffle=True, seed=0, batch_size_multiple=1,
                 pad_to_bucket=False, sentences_only=False, worker=(0, 1)):
        check_choice("long_sequences", long_sequences, LONG_SEQUENCES)
        if not len(store):
            raise ValueError(
                f"The {store.split} split of `{store.data_dir}` holds no pairs: nothing to "
                f"batch. Prepare the folder again with more pairs (for validation: "
                f"--validation-source and --validation-target, or --held-out-pairs).")
        self.store = store
        self.limit = max_sequence_length - 1
        source, target = store.source_lengths, store.target_lengths
        keep = np.ones(len(store), bool)
        if sentences_only:
            keep &= store.sentences
        if long_sequences == "drop":
            keep &= (source <= self.limit) & (target <= self.limit)
        self.pairs = np.flatnonzero(keep)
        if not len(self.pairs):
            raise ValueError(
                "No pair to batch: every pair was left out "
                + ("(`sentences_only` keeps sentence pairs only, and there are none). "
                   if sentences_only else "")
                + f"with `long_sequences={long_sequences!r}` and `max_sequence_length="
                f"{max_sequence_length}`. Raise the length or truncate.")
        lengths = np.minimum(np.maximum(source, target)[self.pairs], self.limit) + 1
        self.plan = BatchPlan(lengths, tokens_per_batch, max_sequence_length,
                              batch_size_multiple, shuffle, seed)
        self.pad_to_bucket = pad_to_bucket
        index, count = worker
        if batch_size_multiple % count:
            raise ValueError(f"`batch_size_multiple` ({batch_size_multiple}) must be a "
                             f"multiple of the number of workers ({count}).")
        self.worker = worker

    @property
    def num_batches(self):
        """Batches in one epoch."""
        return self.plan.num_batches

    def _rows(self, pairs, bucket):
        """The batch's rows: its pairs, rounded up to the multiple or the bucket's size."""
        if self.pad_to_bucket:
            return self.plan.batch_sizes[bucket]
        return -(-pairs // self.plan.multiple) * self.plan.multiple

    def batch(self, rows, bucket):
        """The padded arrays of the pairs `self.pairs[rows]` (this worker's share)."""
        index, count = self.worker
        share = self._rows(len(rows), bucket) // count
        pairs = self.pairs[rows[index * share:(index + 1) * share]]
        return teacher_forcing_batch(
            [self.store.source(i)[:self.limit] for i in pairs],
            [self.store.target(i)[:self.limit] for i in pairs], rows=share,
            width=self.plan.longest[bucket] if self.pad_to_bucket else None)

    def iterate(self, start_step=0, epochs=None):
        """Batches from step `start_step` on, forever or for `epochs` epochs in all.

        Nothing before `start_step` is read: its epoch's plan is computed and the batches
        before it skipped by index.
        """
        epoch, offset = self.plan.position(start_step)
        while epochs is None or epoch < epochs:
            for rows, bucket in self.plan.epoch(epoch)[offset:]:
                yield self.batch(rows, bucket)
            epoch, offset = epoch + 1, 0

    def statistics(self, epoch=0):
        """Padding figures of one epoch, as `keras_transformer.data.batch_statistics`:
        `batches`, `sentences`, `real_tokens`, `tokens`, `padding_efficiency` and
        `largest_side_tokens` (encoder and decoder inputs), from the lengths alone."""
        source = np.minimum(self.store.source_lengths[self.pairs], self.limit) + 1
        target = np.minimum(self.store.target_lengths[self.pairs], self.limit) + 1
        totals = dict(batches=0, sentences=0, real_tokens=0, tokens=0, largest_side_tokens=0)
        for rows, bucket in self.plan.epoch(epoch):
            widths = [self.plan.longest[bucket]] * 2 if self.pad_to_bucket else [
                int(source[rows].max()), int(target[rows].max())]
            padded = [self._rows(len(rows), bucket) * width for width in widths]
            totals["batches"] += 1
            totals["sentences"] += len(rows)
            totals["real_tokens"] += int(source[rows].sum() + target[rows].sum())
            totals["tokens"] += sum(padded)
            totals["largest_side_tokens"] = max(totals["largest_side_tokens"], *padded)
        totals["padding_efficiency"] = totals["real_tokens"] / max(totals["tokens"], 1)
        return totals
