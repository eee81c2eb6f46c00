"""Where a training step's time goes: the component choices behind our speed.

One forward and backward pass each (ms, `tf.function`, the same tensors for both variants):
a projection on `(B, T, D)` as Keras runs it against flattened tokens `(B * T, D)`
(`apply_token_wise`); the label-smoothed loss as `log_softmax` + gather + mean against one
fused softmax cross-entropy; the perplexity metric's token NLL (forward only) as that fused
cross-entropy against `logsumexp(z) - z_y`.

    python benchmarks/components.py --precision mixed_bfloat16
"""

import argparse
import os
import sys
import time

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_transformer.layers import apply_token_wise
from keras_transformer.losses import label_smoothed_sparse_categorical_crossentropy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import table, write_json  # noqa: E402


def milliseconds(function, *args, repeats=20):
    """Mean wall time of `function(*args)` after two warm-up calls."""
    function(*args)
    function(*args)
    start = time.perf_counter()
    for _ in range(repeats):
        function(*args)
    return 1000 * (time.perf_counter() - start) / repeats


def forward_backward(function, variables=()):
    """A `tf.function` returning the gradient of `sum(function(x))` w.r.t. x and variables."""

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            total = tf.reduce_sum(tf.cast(function(x), "float32"))
        return tape.gradient(total, [x, *variables])

    return step


def projection_rows(batch, length, hidden_dim, heads):
    """Time (B, T, D) against (B * T, D) projections with the same weights."""
    inputs = tf.random.normal((batch, length, hidden_dim))
    rows = []
    head_dim = hidden_dim // heads
    cases = [
        ("attention projection (EinsumDense)",
         keras.layers.EinsumDense("btd,dnh->btnh", (None, heads, head_dim), bias_axes="nh"),
         keras.layers.EinsumDense("ad,dnh->anh", (heads, head_dim), bias_axes="nh")),
        ("feed-forward (Dense)", keras.layers.Dense(4 * hidden_dim),
         keras.layers.Dense(4 * hidden_dim)),
    ]
    for name, keras_way, ours in cases:
        keras_way.build((None, None, hidden_dim))
        ours.build((None, hidden_dim))
        ours.set_weights(keras_way.get_weights())
        baseline = milliseconds(forward_backward(keras_way, keras_way.trainable_variables),
                                inputs)
        flattened = milliseconds(
            forward_backward(lambda x, ours=ours: apply_token_wise(ours, x),
                             ours.trainable_variables), inputs)
        rows.append({"component": name, "shape": f"({batch}, {length}, {hidden_dim})",
                     "baseline": "(B, T, D)", "baseline_ms": baseline,
                     "ours": "(B * T, D)", "ours_ms": flattened})
    return rows


def labels_and_logits(batch, length, vocabulary_size):
    rng = np.random.default_rng(0)
    labels = tf.constant(rng.integers(1, vocabulary_size, (batch, length)), tf.int32)
    return labels, tf.cast(tf.random.normal((batch, length, vocabulary_size)),
                           keras.mixed_precision.global_policy().compute_dtype)


def loss_rows(batch, length, vocabulary_size, label_smoothing=0.1):
    """Time the unfused label-smoothed loss against the fused one on the same logits."""
    labels, logits = labels_and_logits(batch, length, vocabulary_size)

    def unfused(z):
        log_probs = ops.log_softmax(ops.cast(z, "float32"), axis=-1)
        gathered = ops.take_along_axis(log_probs, ops.expand_dims(labels, -1), -1)
        nll = -ops.squeeze(gathered, -1)
        return (1 - label_smoothing) * nll - label_smoothing * ops.mean(log_probs, axis=-1)

    def fused(z):
        return label_smoothed_sparse_categorical_crossentropy(labels, z, label_smoothing)[0]

    np.testing.assert_allclose(unfused(logits), fused(logits), rtol=1e-4, atol=1e-4)
    return [{"component": "label-smoothed loss", "shape": f"({batch}, {length}, "
             f"{vocabulary_size})", "baseline": "log_softmax + gather + mean",
             "baseline_ms": milliseconds(forward_backward(unfused), logits),
             "ours": "fused softmax cross-entropy",
             "ours_ms": milliseconds(forward_backward(fused), logits)}]


def perplexity_rows(batch, length, vocabulary_size):
    """Time the metric's token NLL as the fused cross-entropy and as `logsumexp - z_y`."""
    from keras_transformer.metrics import Perplexity

    labels, logits = labels_and_logits(batch, length, vocabulary_size)
    fused = tf.function(lambda z: label_smoothed_sparse_categorical_crossentropy(
        labels, z, label_smoothing=0.0)[0])
    metric = Perplexity()
    ours = tf.function(lambda z: metric._values(labels, z)[0])
    np.testing.assert_allclose(fused(logits), ours(logits), rtol=1e-4, atol=1e-4)
    return [{"component": "perplexity metric (forward)", "shape": f"({batch}, {length}, "
             f"{vocabulary_size})", "baseline": "fused softmax cross-entropy",
             "baseline_ms": milliseconds(fused, logits),
             "ours": "logsumexp - gathered logit", "ours_ms": milliseconds(ours, logits)}]


def markdown(rows, precision):
    return "\n".join([f"Forward + backward, {precision}, milliseconds (lower is better).", ""]
                     + table(["component", "shape", "baseline", "ms", "ours", "ms", "speed-up"],
                             [[row["component"], row["shape"], row["baseline"],
                               f"{row['baseline_ms']:.1f}", row["ours"], f"{row['ours_ms']:.1f}",
                               f"{row['baseline_ms'] / row['ours_ms']:.2f}x"] for row in rows]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", default="mixed_bfloat16",
                        choices=["float32", "mixed_bfloat16"])
    parser.add_argument("--batch", type=int, default=400)
    parser.add_argument("--length", type=int, default=10, help="tokens per sentence")
    parser.add_argument("--hidden-dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocabulary-size", type=int, default=8000)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    keras.mixed_precision.set_global_policy(args.precision)
    rows = projection_rows(args.batch, args.length, args.hidden_dim, args.heads)
    rows += loss_rows(args.batch, args.length, args.vocabulary_size)
    rows += perplexity_rows(args.batch, args.length, args.vocabulary_size)
    print(markdown(rows, args.precision))
    write_json(args.json, {"precision": args.precision, "rows": rows})
    return rows


if __name__ == "__main__":
    main()
