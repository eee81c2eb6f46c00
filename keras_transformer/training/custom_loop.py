"""A training loop for strategies Keras' `fit` cannot run, such as multi-worker (TensorFlow).

Keras 3's `model.fit` fails under `tf.distribute.MultiWorkerMirroredStrategy`: before the
first step it averages a distributed input batch with `strategy.reduce`, which the
multi-worker strategy cannot do for a dict of inputs (keras-team/keras#20585), and after
each step it reduces the scalar logs with `axis=0`, which fails for scalars.
`fit_with_custom_loop` trains the same compiled model with `strategy.run`:

- `strategy.experimental_distribute_dataset` splits each global batch between replicas
  (every worker builds the same seeded batch stream and keeps its own part), or, given a
  function of the input context, `strategy.distribute_datasets_from_function` lets each
  worker read only its own part (as `train` does);
- the loss is the label-smoothed cross-entropy of `compile_transformer`, averaged over the
  real tokens of the *global* batch: each replica divides its sum by the all-reduced
  token count and the optimizer sums the replicas' gradients, so a step equals one
  device's step on the whole batch, whatever the padding on each replica;
- the model's optimizer applies the gradients (with its schedule and, under
  `mixed_float16`, loss scaling);
- Keras callbacks run as under `fit` (`History`, progress bar, backups,
  checkpoints, limits). A stop asked for on any worker (a time limit) stops every
  worker after the same step, since every step is a collective operation.

The step is a `tf.function` without XLA (`compile(jit_compile=...)` is not used).
"""

import keras
from keras import ops

from keras_transformer.backend import require_tensorflow
from keras_transformer.losses.label_smoothing import (
    LabelSmoothedSparseCategoricalCrossentropy,
    label_smoothed_sparse_categorical_crossentropy,
)
from keras_transformer.training.compile import transformer_metrics
from keras_transformer.training.strategy import is_chief

tf = require_tensorflow("The multi-worker training loop (`fit_with_custom_loop`)")


def fit_with_custom_loop(
    model,
    dataset,
    epochs=1,
    steps_per_epoch=None,
    initial_epoch=0,
    callbacks=None,
    validation_data=None,
    verbose="auto",
):
    """Train like `model.fit`, with a `strategy.run` step; works under every strategy.

    The model must be built and compiled (`compile_transformer`) inside the strategy's
    scope. Logs are token-weighted means over the epoch so far: `loss`, `accuracy` and
    `perplexity`, and their `val_` versions after a pass over `validation_data`.

    Args:
        model: a compiled Transformer.
        dataset: `tf.data.Dataset` of `(features, labels)` global batches, each a multiple
            of the number of replicas (`make_dataset` does this); or a function of a
            `tf.distribute.InputContext` returning the dataset of one input pipeline, one
            per-replica batch an element (`strategy.distribute_datasets_from_function`).
        epochs: int. As in `model.fit`.
        steps_per_epoch: int or `None`. As in `model.fit`: with it, one iterator runs
            on across epochs; without it, each epoch is one pass over `dataset`.
        initial_epoch: int. As in `model.fit`.
        callbacks: list of `keras.callbacks.Callback`. As in `model.fit`.
        validation_data: optional finite `tf.data.Dataset` (or function) like `dataset`.
        verbose: as in `model.fit`; `"auto"` shows a progress bar on the chief only.

    Returns:
        The `keras.callbacks.History` of the run.

    Example:
    >>> import tensorflow as tf
    >>> from keras_transformer.models import build_transformer
    >>> from keras_transformer.training import compile_transformer
    >>> model = compile_transformer(build_transformer("tiny", vocabulary_size=20))
    >>> ids = np.arange(4, 16, dtype="int32").reshape(2, 6)
    >>> batches = tf.data.Dataset.from_tensors(
    ...     ({"encoder_token_ids": ids, "decoder_token_ids": ids}, ids)).repeat(3)
    >>> history = fit_with_custom_loop(model, batches, verbose=0)
    >>> int(model.optimizer.iterations.numpy()), sorted(history.history)
    (3, ['accuracy', 'loss', 'perplexity'])
    """
    if not isinstance(model.loss, LabelSmoothedSparseCategoricalCrossentropy):
        raise TypeError(
            "`fit_with_custom_loop` needs a model compiled with `compile_transformer` "
            f"(label-smoothed loss). Received: loss={model.loss!r}"
        )
    strategy = model.distribute_strategy
    with strategy.scope():
        if not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
    metrics = transformer_metrics()  # (their variables cannot be made in a step)
    train_step, eval_step = _make_steps(model, strategy, metrics)
    if verbose == "auto":  # one progress bar, the chief's
        verbose = 1 if is_chief(strategy) else 0
    callbacks = keras.callbacks.CallbackList(
        callbacks, add_history=True, add_progbar=verbose != 0, model=model,
        verbose=verbose, epochs=epochs, steps=steps_per_epoch,
    )
    batches = _distribute(strategy, dataset)
    iterator = iter(batches) if steps_per_epoch else None

    model.stop_training = False
    callbacks.on_train_begin()
    logs = {}
    for epoch in range(initial_epoch, epochs):
        if _any_worker_stops(strategy, model.stop_training):
            break
        callbacks.on_epoch_begin(epoch)
        if not steps_per_epoch:
            iterator = iter(batches)
        totals = {}
        step = 0
        while not steps_per_epoch or step < steps_per_epoch:
            batch = next(iterator, None)
            if batch is None:
                break
            callbacks.on_train_batch_begin(step)
            _accumulate(totals, train_step(batch))
            logs = _logs(totals, metrics)
            callbacks.on_train_batch_end(step, logs)
            step += 1
            if _any_worker_stops(strategy, model.stop_training):
                model.stop_training = True
                break
        if validation_data is not None:
            validation = {}
            for batch in _distribute(strategy, validation_data):
                _accumulate(validation, eval_step(batch))
            logs = {**logs, **{f"val_{k}": v for k, v in _logs(validation, metrics).items()}}
        callbacks.on_epoch_end(epoch, logs)
    callbacks.on_train_end(logs)
    return model.history


def _make_steps(model, strategy, metrics):
    """The train and evaluation steps: per-replica sums, all-reduced over the replicas."""
    loss = model.loss

    def token_sums(features, labels, training):
        logits = model(features, training=training)
        losses, mask = label_smoothed_sparse_categorical_crossentropy(
            labels, logits, loss.label_smoothing, loss.ignore_class)
        sums = {"loss": ops.sum(losses), "tokens": ops.sum(mask)}
        for metric in metrics:  # what `fit` reports, as sums to all-reduce
            sums[metric.name], _ = metric.token_sums(labels, logits)
        return sums

    def train_replica(features, labels):
        replicas = tf.distribute.get_replica_context().num_replicas_in_sync
        with tf.GradientTape() as tape:
            sums = token_sums(features, labels, training=True)
            tokens = tf.distribute.get_replica_context().all_reduce("SUM", sums["tokens"])
            # This replica's share of the global-batch mean: the optimizer sums the shares.
            value = ops.divide_no_nan(sums["loss"], tokens)
            if model.losses:
                value = value + ops.sum(model.losses) / replicas
            scaled = model.optimizer.scale_loss(value)
        gradients = tape.gradient(scaled, model.trainable_variables)
        model.optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return sums

    def reduced(replica_fn):
        def step(batch):
            sums = strategy.run(replica_fn, args=batch)
            return {key: strategy.reduce("SUM", value, axis=None) for key, value in sums.items()}
        # Token-budget batches come in several shapes: trace one graph for all of them.
        return tf.function(step, reduce_retracing=True)

    return reduced(train_replica), reduced(lambda f, y: token_sums(f, y, training=False))


def _distribute(strategy, dataset):
    if callable(dataset):  # each worker reads its own part of each batch
        return strategy.distribute_datasets_from_function(dataset)
    # Every worker builds the same batches; DATA sharding gives each its part of each one.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return strategy.experimental_distribute_dataset(dataset.with_options(options))


def _accumulate(totals, sums):
    for key, value in sums.items():
        totals[key] = totals.get(key, 0.0) + float(value)


def _logs(totals, metrics):
    tokens = totals.get("tokens", 0.0)
    logs = {"loss": totals.get("loss", 0.0) / (tokens or 1.0)}
    for metric in metrics:
        logs[metric.name] = float(metric.result_of(totals.get(metric.name, 0.0), tokens))
    return logs


def _any_worker_stops(strategy, stop):
    """Whether any worker wants to stop; every worker must call it at the same point."""
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        votes = strategy.reduce("SUM", tf.constant(float(stop)), axis=None)
        return float(votes) > 0
    return bool(stop)
