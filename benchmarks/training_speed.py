"""Training throughput (target tokens per second) for float32 against mixed_bfloat16.

Both precisions train the same preset on the same fixed batches (random ids, no padding),
one after the other in one process, so the ratio is fair on a shared machine.

    python benchmarks/training_speed.py --preset small --batch-size 128 --length 32 --steps 20
"""

import argparse
import time

import keras
import numpy as np

import keras_transformer as kt


def tokens_per_second(preset, dtype, batches, steps, jit_compile):
    keras.utils.set_random_seed(0)
    model = kt.build_transformer(preset, vocabulary_size=8000, dtype=dtype)
    kt.compile_transformer(model, warmup_steps=100, jit_compile=jit_compile)
    inputs, labels = batches
    model.train_on_batch(inputs, labels)  # tracing and compilation
    start = time.perf_counter()
    for _ in range(steps):
        model.train_on_batch(inputs, labels)
    return steps * labels.size / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--jit-compile", action="store_true")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    source = rng.integers(4, 8000, (args.batch_size, args.length)).astype("int32")
    target = rng.integers(4, 8000, (args.batch_size, args.length)).astype("int32")
    batches = ({"encoder_token_ids": source, "decoder_token_ids": target}, target)
    print(f"preset={args.preset} batch={args.batch_size} length={args.length} "
          f"jit_compile={args.jit_compile}")
    speeds = {}
    for dtype in ("float32", "mixed_bfloat16"):
        speeds[dtype] = tokens_per_second(args.preset, dtype, batches, args.steps,
                                          args.jit_compile)
        print(f"{dtype:>15}: {speeds[dtype]:8.0f} target tokens/s "
              f"({speeds[dtype] / speeds['float32']:.2f}x float32)", flush=True)


if __name__ == "__main__":
    main()
