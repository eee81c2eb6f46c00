"""Target tokens per second of cached generation against an uncached greedy loop.

The baseline is the TensorFlow-tutorial loop: at every step the whole model runs
over the source and the prefix generated so far (a `tf.function` with dynamic
shapes, traced once). Cached greedy and beam search are `kt.generate` compiled with
XLA (and, for comparison, eagerly). The model is randomly initialised (outputs then run
to the `--length` cap) or, with `--model-dir`, a trained model folder.

    python benchmarks/generation_speed.py --preset base --length 64
    python benchmarks/generation_speed.py --model-dir runs/demo/model --length 64
"""

import argparse
import time

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.generation import generate
from keras_transformer.generation.step import log_probs_of


def uncached_greedy(model, length):
    """The tutorial loop: a full forward pass over the prefix per step (graph mode)."""
    forward = tf.function(reduce_retracing=True, func=lambda encoder_ids, decoder_ids: model(
        {"encoder_token_ids": encoder_ids, "decoder_token_ids": decoder_ids})[:, -1])

    def run(encoder_ids):
        tokens = np.full((len(encoder_ids), 1), kt.START_ID, "int32")
        finished = np.zeros(len(encoder_ids), bool)
        for _ in range(length):
            next_tokens = np.asarray(log_probs_of(forward(encoder_ids, tokens))).argmax(-1)
            next_tokens = np.where(finished, kt.PAD_ID, next_tokens).astype("int32")
            tokens = np.concatenate([tokens, next_tokens[:, None]], axis=1)
            finished |= next_tokens == kt.END_ID
            if finished.all():
                break
        return tokens[:, 1:]

    return run


def tokens_per_second(run, encoder_ids, repeats):
    run(encoder_ids)  # warm-up: tracing and compilation
    start = time.perf_counter()
    count = 0
    for _ in range(repeats):
        count += int(np.sum(run(encoder_ids) != kt.PAD_ID))
    return count / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--vocabulary-size", type=int, default=8000)
    parser.add_argument("--source-length", type=int, default=24)
    parser.add_argument("--length", type=int, default=32, help="output tokens per sentence")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model-dir", default=None, help="a trained model folder instead")
    args = parser.parse_args()

    keras.utils.set_random_seed(0)
    if args.model_dir:
        import os

        model = keras.models.load_model(os.path.join(args.model_dir, "model.keras"))
        args.preset, args.vocabulary_size = args.model_dir, model.vocabulary_size
    else:
        model = kt.build_transformer(args.preset, vocabulary_size=args.vocabulary_size,
                                     dropout=0.0)
    baseline = uncached_greedy(model, args.length)
    runs = {
        "uncached greedy": baseline,
        "cached greedy": lambda ids: generate(model, ids, "greedy", max_length=args.length,
                                              jit_compile=False)["token_ids"],
        "cached greedy XLA": lambda ids: generate(model, ids, "greedy",
                                                  max_length=args.length)["token_ids"],
        "cached beam 4": lambda ids: generate(model, ids, "beam", beam_size=4,
                                              max_length=args.length)["token_ids"],
    }
    print(f"preset={args.preset} V={args.vocabulary_size} S={args.source_length} "
          f"L={args.length} devices={[d.device_type for d in tf.config.list_logical_devices()]}")
    print(f"{'batch':>5} {'method':<18} {'tokens/s':>10} {'vs uncached':>12}")
    rng = np.random.default_rng(0)
    for batch_size in args.batch_sizes:
        ids = rng.integers(4, args.vocabulary_size, (batch_size, args.source_length))
        ids[:, -1] = kt.END_ID
        ids = ids.astype("int32")
        speeds = {name: tokens_per_second(run, ids, args.repeats) for name, run in runs.items()}
        for name, speed in speeds.items():
            ratio = speed / speeds["uncached greedy"]
            print(f"{batch_size:>5} {name:<18} {speed:>10.1f} {ratio:>11.1f}x", flush=True)


if __name__ == "__main__":
    main()
