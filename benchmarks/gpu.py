"""The GPU benchmark: base-preset training and translation throughput on every local GPU.

Prepared for a lent NVIDIA machine (an H200) and bounded by `--minutes`. Training runs
under `MirroredStrategy` over all GPUs with XLA (`jit_compile=True`), for
`mixed_float16` and `mixed_bfloat16`, on fixed-shape batches of random ids whose real
lengths are drawn between half and all of `--length` (the rest is padding), so XLA
compiles once; target (non-pad) tokens/s are timed after the first steps. Translation
then times `kt.generate` (cached greedy and beam 4, XLA) against the uncached loop at
batch 1 and 32 (`generation_speed.py`). Prints one JSON object. Not part of the tests
except its `--smoke` mode (tiny sizes, CPU).

    python benchmarks/gpu.py --minutes 4
    python benchmarks/gpu.py --smoke
"""

import argparse
import json
import os
import sys
import time

import keras

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PRECISIONS = ("mixed_float16", "mixed_bfloat16")


class StepTimer(keras.callbacks.Callback):
    """Records when each `fit` step ends; stops `fit` after `seconds` (and `warmup` steps)."""

    def __init__(self, warmup, seconds):
        super().__init__()
        self.warmup, self.seconds = warmup, seconds

    def on_train_begin(self, logs=None):
        self.started, self.times = time.perf_counter(), []

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.times.append(now)
        if len(self.times) > self.warmup and now - self.started > self.seconds:
            self.model.stop_training = True


def synthetic_batches(batch_size, length, vocabulary_size, seed=0):
    """`(features, labels)` int32 `(B, length)` with real lengths in `[length / 2, length]`."""
    import numpy as np

    rng = np.random.default_rng(seed)

    def side(start_id=None):
        ids = rng.integers(4, vocabulary_size, (batch_size, length)).astype("int32")
        real = rng.integers(length // 2, length + 1, batch_size)
        ids[np.arange(length)[None, :] >= real[:, None]] = 0
        return ids, real

    source, _ = side()
    labels, real = side()
    decoder = np.concatenate([np.full((batch_size, 1), 2, "int32"), labels[:, :-1]], axis=1)
    decoder[np.arange(length)[None, :] >= real[:, None]] = 0
    return {"encoder_token_ids": source, "decoder_token_ids": decoder}, labels


def train_speed(preset, precision, batch_size, length, vocabulary_size, seconds, warmup=5):
    import numpy as np
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer.training import compile_transformer, select_strategy, set_precision

    strategy = select_strategy("mirrored")
    global_batch = batch_size * strategy.num_replicas_in_sync
    features, labels = synthetic_batches(global_batch, length, vocabulary_size)
    dataset = tf.data.Dataset.from_tensors((features, labels)).repeat()
    set_precision(precision)
    try:
        keras.utils.set_random_seed(0)
        with strategy.scope():
            model = kt.build_transformer(preset, vocabulary_size=vocabulary_size)
            compile_transformer(model, jit_compile=True)
        timer = StepTimer(warmup, seconds)
        model.fit(dataset, epochs=1, steps_per_epoch=10**6, callbacks=[timer], verbose=0)
    finally:
        set_precision("float32")
    steps = len(timer.times) - warmup
    elapsed = timer.times[-1] - timer.times[warmup - 1] if steps > 0 else float("nan")
    tokens = int(np.sum(labels != 0))
    return {"precision": precision, "replicas": strategy.num_replicas_in_sync,
            "global_batch": global_batch, "length": length, "steps_timed": steps,
            "target_tokens_per_second": steps * tokens / elapsed,
            "compile_and_warmup_seconds": timer.times[warmup - 1] - timer.started}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=4.0, help="bound of the whole run")
    parser.add_argument("--preset", default="base")
    parser.add_argument("--batch-size", type=int, default=256, help="per replica")
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--vocabulary-size", type=int, default=32000)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, runs on a CPU")
    args = parser.parse_args()
    if args.smoke:
        args.preset, args.batch_size, args.length, args.vocabulary_size = "tiny", 8, 16, 200
        args.minutes = min(args.minutes, 1.0)
    import tensorflow as tf
    from generation_speed import benchmark

    started = time.monotonic()
    result = {"devices": [device.name for device in tf.config.list_logical_devices("GPU")],
              "preset": args.preset, "vocabulary_size": args.vocabulary_size, "training": []}
    train_seconds = 60 * args.minutes * 0.5 / len(PRECISIONS)
    for precision in PRECISIONS:
        result["training"].append(train_speed(args.preset, precision, args.batch_size,
                                              args.length, args.vocabulary_size,
                                              train_seconds))
        print(json.dumps(result["training"][-1]), file=sys.stderr, flush=True)
    left = args.minutes - (time.monotonic() - started) / 60
    result["translation"] = benchmark(args.preset, args.vocabulary_size, source_length=24,
                                      length=8 if args.smoke else 64, repeats=2,
                                      keras_hub=not args.smoke, minutes=max(left, 0.1))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
