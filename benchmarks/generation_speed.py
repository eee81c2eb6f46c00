"""Target tokens per second of cached generation against uncached baselines.

Baselines: the TensorFlow-tutorial loop (the whole model over the source and the prefix at
every step) and KerasHub's `GreedySampler` / `BeamSampler` on the KerasHub model of the
same size (the decoder over the whole prompt each step, XLA). Ours: `kt.generate`, eager
and with XLA. Random weights (outputs mostly run to `--length`) or, with `--model-dir`, a
trained model folder (without the KerasHub rows).

    python benchmarks/generation_speed.py --preset base --length 64
    python benchmarks/generation_speed.py --model-dir runs/demo/model --length 64
"""

import argparse
import json
import os
import sys
import time

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.generation import generate
from keras_transformer.generation.step import log_probs_of

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import best_rate, log, table  # noqa: E402

UNCACHED = "uncached greedy (tutorial loop)"


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


def benchmark(preset="small", vocabulary_size=8000, source_length=24, length=32,
              batch_sizes=(1, 32), repeats=3, model_dir=None, keras_hub=True,
              max_sequence_length=128, minutes=10.0):
    """Tokens/s of every method at every batch size; rows are skipped past `minutes`."""
    keras.utils.set_random_seed(0)
    if model_dir:
        model = keras.models.load_model(os.path.join(model_dir, "model.keras"))
        preset, vocabulary_size, keras_hub = model_dir, model.vocabulary_size, False
    else:
        model = kt.build_transformer(preset, vocabulary_size=vocabulary_size, dropout=0.0)
    runs = {
        UNCACHED: uncached_greedy(model, length),
        "cached greedy, eager": lambda ids: generate(
            model, ids, "greedy", max_length=length, jit_compile=False)["token_ids"],
        "cached greedy, XLA": lambda ids: generate(
            model, ids, "greedy", max_length=length)["token_ids"],
        "cached beam 4, XLA": lambda ids: generate(
            model, ids, "beam", beam_size=4, max_length=length)["token_ids"],
    }
    if keras_hub:
        from keras_hub_baseline import build_keras_hub_transformer, sampler_search

        baseline = build_keras_hub_transformer(preset, vocabulary_size=vocabulary_size,
                                               max_sequence_length=max_sequence_length,
                                               dropout=0.0)
        greedy, beam = sampler_search(baseline, "greedy"), sampler_search(baseline, "beam")
        runs["KerasHub GreedySampler, XLA"] = lambda ids: greedy(ids, length + 1)
        runs["KerasHub BeamSampler 4, XLA"] = lambda ids: beam(ids, length + 1)
    deadline = time.monotonic() + 60 * minutes
    rows = []
    rng = np.random.default_rng(0)
    for batch_size in batch_sizes:
        ids = rng.integers(4, vocabulary_size, (batch_size, source_length))
        ids[:, -1] = kt.END_ID
        ids = ids.astype("int32")
        for name, run in runs.items():
            row = {"batch_size": batch_size, "method": name}
            if time.monotonic() > deadline:
                row["error"] = "skipped: out of time"
            else:
                # The best of `repeats` timed runs after a warm-up (tracing, compilation).
                row["target_tokens_per_second"] = best_rate(
                    lambda run=run, ids=ids: run(ids), repeats,
                    lambda out: np.sum(out != kt.PAD_ID))[1]
            rows.append(row)
            log(json.dumps(row))
    return {"preset": preset, "vocabulary_size": vocabulary_size,
            "source_length": source_length, "length": length, "rows": rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--vocabulary-size", type=int, default=8000)
    parser.add_argument("--source-length", type=int, default=24)
    parser.add_argument("--length", type=int, default=32, help="output tokens per sentence")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model-dir", default=None, help="a trained model folder instead")
    parser.add_argument("--minutes", type=float, default=10.0)
    args = parser.parse_args()
    result = benchmark(args.preset, args.vocabulary_size, args.source_length, args.length,
                       args.batch_sizes, args.repeats, args.model_dir, minutes=args.minutes)
    base = {row["batch_size"]: row.get("target_tokens_per_second", float("nan"))
            for row in result["rows"] if row["method"] == UNCACHED}
    print("\n".join(table(["batch", "method", "tokens/s", "vs uncached"], [
        [row["batch_size"], row["method"], f"{row.get('target_tokens_per_second', 0):.1f}",
         f"{row.get('target_tokens_per_second', 0) / base[row['batch_size']]:.1f}x"]
        for row in result["rows"]])))


if __name__ == "__main__":
    main()
