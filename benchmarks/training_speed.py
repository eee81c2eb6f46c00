"""Training throughput: target (non-pad) tokens per second, ours against the KerasHub baseline.

Both train on the same real batches of the Ding training data (our `make_dataset`, the
demo's token budget) with the same loss, optimizer and schedule. Each configuration
(model, precision, `jit_compile`) runs in its own process (its own peak memory, no compiled
state carried over): a first pass compiles every shape, the best timed pass after it is
the steady state. The baseline also runs on the recipe's own batching (64 sentences a
batch, padded to the length limit), without XLA: the end-to-end comparison.

    python benchmarks/training_speed.py --data runs/data --batches 8
    python benchmarks/training_speed.py --data runs/demo/data --sentences-only \
        --precisions mixed_bfloat16 --jit-compile on --no-recipe     # some rows only
"""

import argparse
import json
import os
import resource
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import log, run_child  # noqa: E402

MODELS = ("ours", "keras_hub")
PRECISIONS = ("float32", "mixed_bfloat16")
RECIPE_BATCH_SIZE = 64  # the keras.io recipe's batch size


def real_batches(data_dir, count, tokens_per_batch, max_sequence_length, seed=0, spacing=8,
                 sentences_only=False):
    """`count` NumPy batches of our pipeline (every `spacing`-th; `sentences_only`: the
    sentence pairs alone), and the distinct `(B, S, T)` shapes among those read."""
    from keras_transformer.data import Tokenizer, load_training_pairs, make_dataset

    tokenizer = Tokenizer.from_file(os.path.join(data_dir, "tokenizer.model"))
    pairs = load_training_pairs(data_dir, sentences_only)
    stream = make_dataset(pairs, tokenizer, tokens_per_batch, max_sequence_length, seed=seed,
                          batch_size_multiple=1)
    batches, shapes = [], set()
    for index, batch in enumerate(stream.take(count * spacing).as_numpy_iterator()):
        features, labels = batch
        shapes.add((*features["encoder_token_ids"].shape, labels.shape[1]))
        if index % spacing == 0:
            batches.append(batch)
    return batches, len(shapes)


def regroup(batches, batch_size, length=None):
    """The sentences of `batches` in their order, `batch_size` a batch, padded to `length`
    (the recipe's fixed length) or, with `None`, to the longest sentence of each batch."""
    rows = []
    for features, labels in batches:
        for i in range(len(labels)):
            rows.append(tuple(np.trim_zeros(ids[i], "b") for ids in (
                features["encoder_token_ids"], features["decoder_token_ids"], labels)))
    grouped = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        padded = []
        for side in range(3):
            width = length or max(len(row[side]) for row in chunk)
            array = np.zeros((len(chunk), width), "int32")
            for i, row in enumerate(chunk):
                array[i, : len(row[side])] = row[side]
            padded.append(array)
        grouped.append(({"encoder_token_ids": padded[0], "decoder_token_ids": padded[1]},
                        padded[2]))
    return grouped


def padding_efficiency(batches):
    """`keras_transformer.data.batch_statistics` of a list of NumPy batches."""
    import tensorflow as tf

    from keras_transformer.data import batch_statistics

    spec = tf.TensorSpec((None, None), tf.int32)
    dataset = tf.data.Dataset.from_generator(
        lambda: iter(batches),
        output_signature=({"encoder_token_ids": spec, "decoder_token_ids": spec}, spec))
    return batch_statistics(dataset)


def target_tokens(batches):
    import keras_transformer as kt

    return int(sum(np.sum(labels != kt.PAD_ID) for _, labels in batches))


def build(model, preset, vocabulary_size, max_sequence_length, **overrides):
    """Our `Transformer` or the KerasHub baseline, the same size."""
    import keras_transformer as kt

    if model == "ours":
        return kt.build_transformer(preset, vocabulary_size=vocabulary_size, **overrides)
    from keras_hub_baseline import build_keras_hub_transformer

    return build_keras_hub_transformer(preset, vocabulary_size=vocabulary_size,
                                       max_sequence_length=max_sequence_length, **overrides)


def measure(model, precision, jit_compile, batches, preset="small", vocabulary_size=8000,
            max_sequence_length=128, passes=1, warmup_steps=300, **overrides):
    """Train one configuration in this process; tokens/s of the first and the best pass."""
    import keras

    from keras_transformer.training import compile_transformer, set_precision

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB, imports done
    set_precision(precision)
    try:
        keras.utils.set_random_seed(0)
        network = build(model, preset, vocabulary_size, max_sequence_length, **overrides)
        compile_transformer(network, warmup_steps=warmup_steps, jit_compile=jit_compile)
        start = time.perf_counter()
        for features, labels in batches:  # traces and compiles every shape
            logs = network.train_on_batch(features, labels, return_dict=True)
        first = time.perf_counter() - start
        steady = float("inf")
        for _ in range(passes):
            start = time.perf_counter()
            for features, labels in batches:
                logs = network.train_on_batch(features, labels, return_dict=True)
            steady = min(steady, time.perf_counter() - start)
    finally:
        set_precision("float32")
    tokens = target_tokens(batches)
    return {
        "model": model, "precision": precision, "jit_compile": jit_compile,
        "parameters": int(network.count_params()), "steps": passes * len(batches),
        "target_tokens_per_second": tokens / steady,
        "first_pass_tokens_per_second": tokens / first,
        "first_pass_seconds": first, "steady_seconds": steady,
        "loss": float(logs["loss"]), "memory_before_training_mib": before,
    }


def run_in_subprocess(config, batches_file, timeout, script=__file__):
    """`measure` (or `script`'s worker) in a fresh Python process; its JSON result."""
    command = [sys.executable, os.path.abspath(script), "--worker", json.dumps(config),
               "--batches-file", batches_file]
    result = run_child(command, timeout, env={"KERAS_BACKEND": "tensorflow"})
    return {**config, **result} if "error" in result else result


def save_batches(batches, path):
    arrays = {}
    for i, (features, labels) in enumerate(batches):
        arrays[f"encoder_{i}"] = features["encoder_token_ids"]
        arrays[f"decoder_{i}"] = features["decoder_token_ids"]
        arrays[f"labels_{i}"] = labels
    np.savez(path, **arrays)


def load_batches(path):
    with np.load(path) as arrays:
        count = len([name for name in arrays.files if name.startswith("labels_")])
        return [({"encoder_token_ids": arrays[f"encoder_{i}"],
                  "decoder_token_ids": arrays[f"decoder_{i}"]}, arrays[f"labels_{i}"])
                for i in range(count)]


def benchmark(data_dir="runs/data", preset="small", batches=8, passes=1, tokens_per_batch=4096,
              max_sequence_length=128, models=MODELS, precisions=PRECISIONS,
              jit_compiles=(False, True), recipe_batching=True, minutes=10.0,
              sentences_only=False, **overrides):
    """Every configuration, one process each, within about `minutes`: the padding
    efficiency of three batchings, the runs and the FLOPs per target token."""
    from mfu import model_config, training_flops_per_token

    from keras_transformer.data import Tokenizer

    vocabulary_size = Tokenizer.from_file(os.path.join(data_dir, "tokenizer.model")
                                          ).vocabulary_size
    ours, shapes = real_batches(data_dir, batches, tokens_per_batch, max_sequence_length,
                                sentences_only=sentences_only)
    sentences = sum(len(labels) for _, labels in ours)
    recipe = regroup(ours, RECIPE_BATCH_SIZE, max_sequence_length)
    batching = {
        "bucketed (ours)": padding_efficiency(ours),
        f"pad to longest, {RECIPE_BATCH_SIZE} a batch": padding_efficiency(
            regroup(ours, RECIPE_BATCH_SIZE)),
        f"recipe: pad to {max_sequence_length}, {RECIPE_BATCH_SIZE} a batch":
            padding_efficiency(recipe),
    }
    # Without XLA first, with the recipe's batching: the rows that must not run out of time.
    configs = []
    for jit_compile in sorted(jit_compiles):
        for precision in precisions:
            configs += [dict(model=m, precision=precision, jit_compile=jit_compile,
                             batching="bucketed") for m in models]
            if recipe_batching and "keras_hub" in models and not jit_compile:
                configs.append(dict(model="keras_hub", precision=precision,
                                    jit_compile=False, batching="recipe"))
    deadline = time.monotonic() + 60 * minutes
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        files = {"bucketed": os.path.join(folder, "bucketed.npz"),
                 "recipe": os.path.join(folder, "recipe.npz")}
        save_batches(ours, files["bucketed"])
        save_batches(recipe[: len(ours)], files["recipe"])
        for config in configs:
            left = deadline - time.monotonic()
            if left < 20:
                runs.append({**config, "error": "skipped: out of time"})
                continue
            worker = {**config, "preset": preset, "vocabulary_size": vocabulary_size,
                      "max_sequence_length": max_sequence_length, "passes": passes, **overrides}
            result = run_in_subprocess(worker, files[config["batching"]], left)
            result["batching"] = worker["batching"]
            runs.append(result)
            log(json.dumps(result))
    config = model_config(preset, vocabulary_size, **overrides)
    return {"preset": preset, "batches": len(ours), "passes": passes, "sentences": sentences,
            "sentences_only": sentences_only,
            "tokens_per_batch": tokens_per_batch, "max_sequence_length": max_sequence_length,
            "flops_per_target_token": training_flops_per_token(config, ours),
            "batching": batching, "runs": runs,
            "distinct_shapes": {"batches": 8 * len(ours), "shapes": shapes}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="runs/data")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--batches", type=int, default=8, help="distinct batches per pass")
    parser.add_argument("--passes", type=int, default=3,
                        help="timed passes after the first (the best counts)")
    parser.add_argument("--minutes", type=float, default=10.0, help="bound for all configs")
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    parser.add_argument("--jit-compile", nargs="+", choices=("off", "on"), default=["off", "on"],
                        help="without XLA, with it, or both")
    parser.add_argument("--sentences-only", action="store_true",
                        help="the demo's sentence pairs, not the whole training split")
    parser.add_argument("--no-recipe", action="store_true",
                        help="leave out the rows of the recipe's batching")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--batches-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        config = json.loads(args.worker)
        config.pop("batching", None)
        result = measure(batches=load_batches(args.batches_file), **config)
        result["peak_memory_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(result), flush=True)
        return
    print(json.dumps(benchmark(
        args.data, args.preset, args.batches, args.passes, precisions=tuple(args.precisions),
        jit_compiles=tuple(choice == "on" for choice in args.jit_compile),
        recipe_batching=not args.no_recipe, minutes=args.minutes,
        sentences_only=args.sentences_only), indent=2))


if __name__ == "__main__":
    main()
