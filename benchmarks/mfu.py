"""Model FLOPs per target token, counted analytically, and a measured matmul peak per dtype.

MFU is the model's useful FLOP/s (real tokens only) over the best FLOP/s of one large matrix
product in the same dtype. Only matrix products count (2 FLOPs a multiply-add). Per layer,
for S source and T target ids: encoder `8 S d^2 + 4 S^2 d + 4 S d f`; decoder self-attention
`8 T d^2 + 4 T^2 d`, cross-attention `4 T d^2 + 4 S d^2 + 4 T S d`, feed-forward `4 T d f`;
plus the output projection `2 T d V`. A training step is three forward passes.

    python benchmarks/mfu.py --preset small   # prints FLOPs/token and the measured peaks
"""

import argparse
import json
import time

import numpy as np

import keras_transformer as kt


def forward_flops(config, source_lengths, target_lengths):
    """Forward matmul FLOPs of each pair of real lengths `(S, T)` for a `kt.PRESETS` config.

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
    """Training FLOPs (3 forward passes) per real target token over NumPy `batches`."""
    flops = tokens = 0.0
    for features, labels in batches:
        source = np.sum(features["encoder_token_ids"] != kt.PAD_ID, axis=1)
        target = np.sum(labels != kt.PAD_ID, axis=1)
        flops += 3 * float(np.sum(forward_flops(config, source, target)))
        tokens += float(np.sum(target))
    return flops / tokens


def matmul_peak(dtype="float32", size=2048, seconds=3.0, jit_compile=False):
    """Best FLOP/s of a `(size, size)` product in `dtype`: TensorFlow's kernel, or XLA's."""
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
