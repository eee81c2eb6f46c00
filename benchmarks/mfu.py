"""Model FLOPs per target token, counted analytically, and a measured matmul peak per dtype.

Model FLOP utilization (MFU) is the model's useful FLOP/s, from real (non-pad) tokens
only, over the best FLOP/s this machine reaches on one large matrix product in the same
dtype (`float32`, or `bfloat16` for `mixed_bfloat16`).

FLOPs count matrix products only (2 per multiply-add); embeddings lookups, softmax,
layer norms and the optimizer are left out. For a pair with S source and T target ids
(both counted with their special id), per layer:

- encoder: Q, K, V, O projections `8 S d^2`; scores and weighted values `4 S^2 d`;
  feed-forward `4 S d f`;
- decoder: self-attention `8 T d^2 + 4 T^2 d` (the full square, as a dense kernel computes
  it); cross-attention Q and O `4 T d^2`, K and V over the source `4 S d^2`, scores and
  values `4 T S d`; feed-forward `4 T d f`;

plus the output projection `2 T d V`. A training step costs three forward passes
(the backward pass twice the forward).

    python benchmarks/mfu.py --preset small   # prints FLOPs/token and the measured peaks
"""

import argparse
import json
import time

import numpy as np

import keras_transformer as kt


def forward_flops(config, source_lengths, target_lengths):
    """Forward matmul FLOPs of each pair `(S, T)` for a config of `kt.PRESETS` shape.

    Args:
        config: dict with `num_layers`, `hidden_dim`, `intermediate_dim` and
            `vocabulary_size`.
        source_lengths, target_lengths: int arrays of real (non-pad) lengths.

    Returns:
        float64 array of FLOPs per pair.

    Example:
    >>> config = {"num_layers": 1, "hidden_dim": 2, "intermediate_dim": 4,
    ...           "vocabulary_size": 10}
    >>> forward_flops(config, [1], [1]).tolist()
    [224.0]
    """
    n, d = config["num_layers"], config["hidden_dim"]
    f, v = config["intermediate_dim"], config["vocabulary_size"]
    s = np.asarray(source_lengths, "float64")
    t = np.asarray(target_lengths, "float64")
    encoder = 8 * s * d * d + 4 * s * s * d + 4 * s * d * f
    decoder = (8 * t * d * d + 4 * t * t * d) + (4 * t * d * d + 4 * s * d * d + 4 * t * s * d) \
        + 4 * t * d * f
    return n * (encoder + decoder) + 2 * t * d * v


def training_flops_per_token(config, batches):
    """Training FLOPs (3 forward passes) per real target token over `batches`.

    `batches` are `(features, labels)` NumPy batches as from our pipeline.
    """
    flops = tokens = 0.0
    for features, labels in batches:
        source = np.sum(features["encoder_token_ids"] != kt.PAD_ID, axis=1)
        target = np.sum(labels != kt.PAD_ID, axis=1)
        flops += 3 * float(np.sum(forward_flops(config, source, target)))
        tokens += float(np.sum(target))
    return flops / tokens


def matmul_peak(dtype="float32", size=2048, seconds=3.0, jit_compile=False):
    """Best FLOP/s of a compiled `(size, size) @ (size, size)` product in `dtype`
    (TensorFlow, like the CPU benchmarks it serves; `gpu.py` has a Keras one), by
    TensorFlow's own kernel or, with `jit_compile`, by XLA's."""
    import tensorflow as tf

    a = tf.random.uniform((size, size), dtype="float32")
    b = tf.random.uniform((size, size), dtype="float32")
    a, b = tf.cast(a, dtype), tf.cast(b, dtype)
    product = tf.function(lambda x, y: tf.reduce_sum(tf.matmul(x, y)), jit_compile=jit_compile)
    product(a, b).numpy()  # trace and warm up
    best = float("inf")
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        product(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def model_config(preset, vocabulary_size, **overrides):
    return {**kt.PRESETS[preset], **overrides, "vocabulary_size": vocabulary_size}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--vocabulary-size", type=int, default=8000)
    parser.add_argument("--length", type=int, default=16, help="S = T for the per-token figure")
    args = parser.parse_args()
    config = model_config(args.preset, args.vocabulary_size)
    per_token = 3 * forward_flops(config, [args.length], [args.length])[0] / args.length
    print(json.dumps({
        "preset": args.preset, "training_flops_per_target_token": per_token,
        "peak_flops": {dtype: matmul_peak(dtype) for dtype in ("float32", "bfloat16")},
    }, indent=2))


if __name__ == "__main__":
    main()
