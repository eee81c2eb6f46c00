"""The `tf.data` pipeline from string pairs to batches for `model.fit`.

Section 5.1 of Vaswani et al. (2017): "Sentence pairs were batched together by approximate
sequence length. Each training batch contained a set of sentence pairs containing
approximately 25000 source tokens and 25000 target tokens."

Each pair becomes one example (the teacher-forcing shift, defined only in
`teacher_forcing`):

- `encoder_token_ids`: source pieces followed by `END_ID`;
- `decoder_token_ids`: `START_ID` followed by target pieces;
- labels: target pieces followed by `END_ID`, so `decoder_token_ids[t]` predicts
  `labels[t]`.

Batches group examples of similar length, padded with `PAD_ID` (0), and hold at most
`tokens_per_batch` padded tokens per side: `B * S <= tokens_per_batch` and
`B * T <= tokens_per_batch`. This module is TensorFlow-specific (it imports TensorFlow);
`keras_transformer.data.batching.NumpyBatches` gives the same batches without it.

`make_dataset` tokenizes string pairs held in memory: for small corpora and your own code.
`train` reads the splits that `prepare` tokenized to disk instead, through
`store_dataset` (see `keras_transformer.data.batch_plan`), which never holds the corpus.
"""

from keras_transformer.backend import require_tensorflow
from keras_transformer.data.batching import LONG_SEQUENCES as _LONG_SEQUENCES
from keras_transformer.data.batching import bucket_boundaries, token_budget_batch_sizes
from keras_transformer.special_tokens import START_ID, with_end
from keras_transformer.validation import check_positive_int

tf = require_tensorflow("The tf.data pipeline (`make_dataset`)")

__all__ = ["batch_by_token_budget", "bucket_boundaries", "encode_pairs", "make_dataset",
           "store_dataset", "teacher_forcing"]


def teacher_forcing(source_ids, target_ids):
    """Builds model inputs and labels from source and target pieces.

    Works on one example (1-D tensors) or a batch (`tf.RaggedTensor` `(B, None)`).

    Args:
        source_ids: int tensor `(S - 1,)` or ragged `(B, None)`, source pieces without
            special ids.
        target_ids: int tensor `(T - 1,)` or ragged `(B, None)`, target pieces without
            special ids.

    Returns:
        `({"encoder_token_ids": (S,), "decoder_token_ids": (T,)}, labels (T,))`, int32,
        with a leading `B` for batches.

    Example:
    >>> features, labels = teacher_forcing(tf.constant([7, 8]), tf.constant([9, 10, 11]))
    >>> features["encoder_token_ids"].numpy(), features["decoder_token_ids"].numpy()
    (array([7, 8, 3], dtype=int32), array([ 2,  9, 10, 11], dtype=int32))
    >>> labels.numpy()
    array([ 9, 10, 11,  3], dtype=int32)
    """
    target_ids = tf.cast(target_ids, tf.int32)
    if isinstance(target_ids, tf.RaggedTensor):
        starts = tf.fill([target_ids.nrows(), 1], START_ID)
    else:
        starts = tf.constant([START_ID], tf.int32)
    features = {
        "encoder_token_ids": with_end(source_ids),
        "decoder_token_ids": tf.concat([starts, target_ids], axis=-1),
    }
    return features, with_end(target_ids)


def encode_pairs(pairs, tokenizer, max_sequence_length=256, long_sequences="drop"):
    """Tokenizes string pairs into unbatched `(features, labels)` examples.

    Args:
        pairs: list of `(source, target)` string pairs, or a `tf.data.Dataset` of
            `(source, target)` scalar strings.
        tokenizer: a `Tokenizer`.
        max_sequence_length: int. Longest `encoder_token_ids` and `decoder_token_ids`
            (and labels), counted with the added start or end id. Defaults to `256`.
        long_sequences: `"drop"` (skip the pair) or `"truncate"` (keep the first
            `max_sequence_length - 1` pieces of each side, then add the special ids)
            for pairs with a side over `max_sequence_length`. Defaults to `"drop"`.

    Returns:
        A `tf.data.Dataset` of examples as returned by `teacher_forcing`.

    Example:
    >>> from keras_transformer.data import train_tokenizer
    >>> tokenizer = train_tokenizer(["Guten Tag.", "Good day.", "Danke.", "Thanks."] * 5,
    ...                             vocabulary_size=40)
    >>> examples = encode_pairs([("Danke.", "Thanks.")], tokenizer, max_sequence_length=16)
    >>> features, labels = next(iter(examples))
    >>> tokenizer.detokenize(features["encoder_token_ids"][:-1]).numpy()
    b'Danke.'
    >>> int(features["encoder_token_ids"][-1]), int(features["decoder_token_ids"][0])
    (3, 2)
    """
    if long_sequences not in _LONG_SEQUENCES:
        raise ValueError(
            f"`long_sequences` must be one of {_LONG_SEQUENCES}. "
            f"Received: long_sequences={long_sequences!r}"
        )
    check_positive_int("max_sequence_length", max_sequence_length, minimum=2)
    limit = max_sequence_length - 1

    def encode(sources, targets):  # a batch of strings to a batch of examples
        source_ids = tokenizer.tokenize(sources)
        target_ids = tokenizer.tokenize_targets(targets)
        if long_sequences == "drop":
            fits = (source_ids.row_lengths() <= limit) & (target_ids.row_lengths() <= limit)
            source_ids = tf.ragged.boolean_mask(source_ids, fits)
            target_ids = tf.ragged.boolean_mask(target_ids, fits)
        else:
            source_ids = source_ids[:, :limit]
            target_ids = target_ids[:, :limit]
        return teacher_forcing(source_ids, target_ids)

    # Whole batches of strings go through the tokenizer and the shift at once, which is
    # far faster than one pair at a time.
    dataset = _as_dataset(pairs).batch(1024)
    dataset = dataset.map(encode, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    # Unbatched rows are 1-D ragged values; this makes them plain tensors for padding.
    return dataset.map(lambda features, labels: (features, labels))


def batch_by_token_budget(
    examples, tokens_per_batch=25_000, max_sequence_length=256, batch_size_multiple=1
):
    """Groups examples of similar length into padded batches under a token budget.

    An example's length is the longer of its encoder and decoder sequences. Each length
    bucket (see `bucket_boundaries`) has its own batch size, `tokens_per_batch` divided by
    the longest length the bucket admits, so every batch has at most `tokens_per_batch`
    padded tokens per side. Padding uses `PAD_ID` (0).

    With `batch_size_multiple=N > 1`, every batch size is a multiple of `N`: bucket batch
    sizes are rounded down to one, and a bucket's last, partial batch loses its last
    `B % N` examples (fewer than `N` a bucket and pass). Keras' `fit` under a
    `tf.distribute` strategy needs this, with `N` the number of replicas, as it cannot
    split a batch unevenly.

    Args:
        examples: `tf.data.Dataset` from `encode_pairs`, all sequences at most
            `max_sequence_length` long.
        tokens_per_batch: int. Most padded tokens per side and batch, `B * S` and
            `B * T`. Defaults to `25_000` (the paper's figure).
        max_sequence_length: int. As given to `encode_pairs`. Defaults to `256`.
        batch_size_multiple: int. Every batch size is a multiple of it. Defaults to `1`.

    Returns:
        A `tf.data.Dataset` of `({"encoder_token_ids": (B, S), "decoder_token_ids":
        (B, T)}, labels (B, T))`, all int32.

    Example:
    >>> from keras_transformer.data import train_tokenizer
    >>> tokenizer = train_tokenizer(["Guten Tag.", "Good day.", "Danke.", "Thanks."] * 5,
    ...                             vocabulary_size=40)
    >>> examples = encode_pairs([("Guten Tag.", "Good day."), ("Danke.", "Thanks.")] * 8,
    ...                         tokenizer, max_sequence_length=16)
    >>> batches = batch_by_token_budget(examples, tokens_per_batch=32, max_sequence_length=16)
    >>> all(features["encoder_token_ids"].shape.num_elements() <= 32
    ...     for features, _ in batches)
    True
    >>> sum(int(labels.shape[0]) for _, labels in batches)
    16
    """
    boundaries, batch_sizes = token_budget_batch_sizes(
        tokens_per_batch, max_sequence_length, batch_size_multiple)
    multiple = batch_size_multiple

    def length(features, labels):
        return tf.maximum(
            tf.shape(features["encoder_token_ids"])[0],
            tf.shape(features["decoder_token_ids"])[0],
        )

    def trim(features, labels):
        size = tf.shape(labels)[0] // multiple * multiple
        return tf.nest.map_structure(lambda ids: ids[:size], (features, labels))

    batches = examples.bucket_by_sequence_length(length, boundaries, batch_sizes)
    if multiple > 1:
        batches = batches.map(trim).filter(lambda features, labels: tf.shape(labels)[0] > 0)
    return batches


def make_dataset(
    pairs,
    tokenizer,
    tokens_per_batch=25_000,
    max_sequence_length=256,
    long_sequences="drop",
    shuffle=True,
    seed=None,
    repeat=False,
    shuffle_buffer_size=None,
    batch_size_multiple=None,
    cache=True,
):
    """String pairs to shuffled, length-bucketed, prefetched batches for `model.fit`.

    Combines `encode_pairs` and `batch_by_token_budget`. Works with
    `strategy.experimental_distribute_dataset` and `model.fit` under a `tf.distribute`
    strategy, which split each batch between replicas: call it inside `strategy.scope()`
    (or pass `batch_size_multiple`) so every batch splits evenly.

    Args:
        pairs: list of `(source, target)` string pairs, or a `tf.data.Dataset` of them.
        tokenizer: a `Tokenizer`.
        tokens_per_batch: int. Most padded tokens per side and batch. Defaults to
            `25_000`.
        max_sequence_length: int. Longest sequence, special id included. Defaults to `256`.
        long_sequences: `"drop"` or `"truncate"`, see `encode_pairs`. Defaults to `"drop"`.
        shuffle: bool. Shuffle examples before batching (and again each epoch). Defaults to
            `True`.
        seed: int. Shuffle seed; with a seed, the batches are the same on every run.
        repeat: bool. Repeat forever (reshuffling each pass); set `steps_per_epoch` in
            `fit`. Defaults to `False`.
        shuffle_buffer_size: int. Defaults to the number of pairs (a full shuffle), or
            100,000 for a dataset of unknown size.
        batch_size_multiple: int. See `batch_by_token_budget`. Defaults to the number of
            replicas of the current `tf.distribute` strategy (1 outside any scope).
        cache: bool. Tokenize once and keep the examples in memory, so later passes
            do not compete with training for the CPU. Defaults to `True`; turn it off
            for a corpus larger than memory.

    Returns:
        A `tf.data.Dataset` of `(features, labels)` as in `batch_by_token_budget`.

    Example:
    >>> from keras_transformer.data import train_tokenizer
    >>> tokenizer = train_tokenizer(["Guten Tag.", "Good day.", "Danke.", "Thanks."] * 5,
    ...                             vocabulary_size=40)
    >>> dataset = make_dataset([("Guten Tag.", "Good day."), ("Danke.", "Thanks.")],
    ...                        tokenizer, tokens_per_batch=64, max_sequence_length=16)
    >>> features, labels = next(iter(dataset))
    >>> sorted(features), labels.dtype.name
    (['decoder_token_ids', 'encoder_token_ids'], 'int32')
    """
    dataset = _as_dataset(pairs)
    size = int(dataset.cardinality())
    dataset = encode_pairs(dataset, tokenizer, max_sequence_length, long_sequences)
    if cache:
        dataset = dataset.cache()
    if shuffle:
        if shuffle_buffer_size is None:
            shuffle_buffer_size = size if size > 0 else 100_000
        dataset = dataset.shuffle(shuffle_buffer_size, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    if batch_size_multiple is None:
        batch_size_multiple = tf.distribute.get_strategy().num_replicas_in_sync
    dataset = batch_by_token_budget(
        dataset, tokens_per_batch, max_sequence_length, batch_size_multiple
    )
    return dataset.prefetch(tf.data.AUTOTUNE)


def _as_dataset(pairs):
    if isinstance(pairs, tf.data.Dataset):
        return pairs
    pairs = list(pairs)
    if not pairs:
        raise ValueError("`pairs` must hold at least one (source, target) pair. Received none.")
    sources, targets = zip(*pairs, strict=True)
    return tf.data.Dataset.from_tensor_slices((list(sources), list(targets)))


def store_dataset(batches, start_step=0, epochs=None, parts=1):
    """The batches of a `StoreBatches` as a prefetched `tf.data.Dataset`, for `model.fit`.

    The batches are the NumPy ones JAX and PyTorch train on, in the same order.

    Args:
        batches: a `keras_transformer.data.batch_plan.StoreBatches`.
        start_step: int. The step to start from (a resumed run's); nothing before it is
            read.
        epochs: int or `None`. Stop after this many epochs in all (`None`: never).
        parts: int. Split each batch into this many consecutive equal parts, one element
            each (one per local replica, for `distribute_datasets_from_function`).

    Returns:
        A `tf.data.Dataset` of `(features, labels)` as in `batch_by_token_budget`; with
        `epochs`, its cardinality is known.

    Example:
    >>> import tempfile
    >>> from keras_transformer.data import train_tokenizer
    >>> from keras_transformer.data.batch_plan import StoreBatches
    >>> from keras_transformer.data.token_store import TokenStore, write_split
    >>> tokenizer = train_tokenizer(["Guten Tag.", "Good day."] * 5, vocabulary_size=30)
    >>> folder = tempfile.mkdtemp()
    >>> _ = write_split(folder, "train", [("Guten Tag.", "Good day.")] * 4, tokenizer)
    >>> batches = StoreBatches(TokenStore(folder, "train", "uint16"), tokens_per_batch=64,
    ...                        max_sequence_length=16)
    >>> dataset = store_dataset(batches, epochs=1)
    >>> int(dataset.cardinality()), next(iter(dataset))[1].shape
    (1, TensorShape([4, 4]))
    """
    ids = tf.TensorSpec((None, None), tf.int32)
    signature = ({"encoder_token_ids": ids, "decoder_token_ids": ids}, ids)

    def generate():
        for features, labels in batches.iterate(start_step, epochs):
            if parts == 1:
                yield features, labels
                continue
            size = len(labels) // parts
            for part in range(parts):
                rows = slice(part * size, (part + 1) * size)
                yield {key: value[rows] for key, value in features.items()}, labels[rows]

    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    if epochs is not None:
        total = (epochs * batches.num_batches - start_step) * parts
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(max(total, 0)))
    return dataset.prefetch(tf.data.AUTOTUNE)
