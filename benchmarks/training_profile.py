"""A training step under TensorFlow's profiler: ours and the KerasHub baseline, op by op.

Each (model, precision) trains in its own process on `training_speed.py`'s batches; after
a pass that traces every shape and two timed passes, one pass runs under `tf.profiler`.
Its `framework_op_stats` are summed per step by op type and by the part of the model an op
belongs to (its name scope). Ops run on both cores at once, so they add up to more than the
step's wall-clock time: compare the columns, not a column with the step.

    python benchmarks/training_profile.py --data runs/demo/data --sentences-only
"""

import argparse
import glob
import json
import os
import re
import sys
import tempfile
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import log, write_json  # noqa: E402
from training_speed import (  # noqa: E402
    MODELS,
    PRECISIONS,
    build,
    load_batches,
    real_batches,
    run_in_subprocess,
    save_batches,
    target_tokens,
)

# Name-scope parts, the first match wins (KerasHub names its attention layers
# `self_attention` / `cross_attention` and its feed-forward `feedforward_*`).
PARTS = (
    ("optimizer", ("adam/", "loss_scale", "assignaddvariableop", "assignvariableop")),
    ("loss", ("compile_loss", "crossentropy", "softmax_cross")),
    ("metrics", ("compile_metrics", "accuracy")),
    ("layer norm", ("norm",)),
    ("attention", ("attention",)),
    ("feed-forward", ("feed_forward", "feedforward")),
    ("embedding and output projection", ("embedding", "logits", "reverse")),
)
OUTPUT_DENSE = re.compile(r"(^|/)output(_\d+)?/")  # the baseline's final `Dense`
MATMUL_TYPES = ("MatMul", "Einsum", "BatchMatMul")


def part_of(operation):
    name = operation.lower()
    for part, keys in PARTS:
        if any(key in name for key in keys):
            return part
    if OUTPUT_DENSE.search(name):
        return "embedding and output projection"
    return "other"


def under_profiler(function, logdir):
    """`(function(), the paths of its trace's .xplane.pb files in logdir)`."""
    import tensorflow as tf

    tf.profiler.experimental.start(logdir)
    try:
        result = function()
    finally:
        tf.profiler.experimental.stop()
    return result, glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)


def op_stats(paths):
    """`[(op type, op name, self-time in microseconds)]` of a profile."""
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin as plugin

    data, ok = plugin.xspace_to_tools_data(paths, "framework_op_stats", {})
    if not ok:
        raise RuntimeError(f"TensorFlow's profiler could not read {paths}")
    table = json.loads(data)[-1]  # the last table leaves out IDLE time
    columns = [column["id"] for column in table["cols"]]
    rows = [dict(zip(columns, (cell.get("v") for cell in row["c"]), strict=True))
            for row in table["rows"]]
    return [(row["type"], row["operation"], float(row["total_self_time"])) for row in rows]


def profile(model, precision, batches, preset="small", vocabulary_size=8000,
            max_sequence_length=128, **overrides):
    """Train one configuration in this process; its step time and profile per step."""
    import keras

    from keras_transformer.training import compile_transformer, set_precision

    set_precision(precision)
    try:
        keras.utils.set_random_seed(0)
        network = build(model, preset, vocabulary_size, max_sequence_length, **overrides)
        compile_transformer(network, warmup_steps=300, jit_compile=False)

        def one_pass():
            start = time.perf_counter()
            for features, labels in batches:
                network.train_on_batch(features, labels)
            return time.perf_counter() - start

        one_pass()  # traces every shape
        seconds = min(one_pass(), one_pass())
        with tempfile.TemporaryDirectory() as logdir:
            stats = op_stats(under_profiler(one_pass, logdir)[1])
    finally:
        set_precision("float32")
    steps = len(batches)
    by_type, by_part, by_name = defaultdict(float), defaultdict(float), defaultdict(float)
    for op_type, name, micros in stats:
        by_type[op_type] += micros / 1000 / steps
        part = part_of(name)
        kind = "matmul" if any(key in op_type for key in MATMUL_TYPES) else "other ops"
        by_part[f"{part}: {kind}"] += micros / 1000 / steps
        by_name[f"{op_type} {name}"] += micros / 1000 / steps
    return {"model": model, "precision": precision,
            "step_ms": 1000 * seconds / steps,
            "target_tokens_per_second": target_tokens(batches) / seconds,
            "op_ms_per_step": sum(by_type.values()),
            "by_type": dict(by_type), "by_part": dict(by_part),
            "largest_ops": dict(sorted(by_name.items(), key=lambda item: -item[1])[:40])}


def benchmark(data_dir="runs/demo/data", preset="small", batches=8, tokens_per_batch=4096,
              max_sequence_length=128, sentences_only=True, models=MODELS,
              precisions=PRECISIONS, **overrides):
    """Profile every (model, precision), one process each; returns their results."""
    from keras_transformer.data import Tokenizer

    vocabulary_size = Tokenizer.from_file(os.path.join(data_dir, "tokenizer.model")
                                          ).vocabulary_size
    ours, _ = real_batches(data_dir, batches, tokens_per_batch, max_sequence_length,
                           sentences_only=sentences_only)
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "batches.npz")
        save_batches(ours, path)
        for precision in precisions:
            for model in models:
                worker = {"model": model, "precision": precision, "preset": preset,
                          "vocabulary_size": vocabulary_size,
                          "max_sequence_length": max_sequence_length, **overrides}
                result = run_in_subprocess(worker, path, timeout=900,
                                           script=os.path.abspath(__file__))
                runs.append(result)
                log(f"{model} {precision}: " + (result.get("error") or
                    f"{result['step_ms']:.0f} ms a step"))
    return {"preset": preset, "batches": len(ours), "sentences_only": sentences_only,
            "sentences": sum(len(labels) for _, labels in ours), "overrides": overrides,
            "runs": runs}


def products_and_loss(run):
    """A profiled run's ms per step in matrix products and the loss."""
    return sum(ms for part, ms in run["by_part"].items()
               if part.endswith(": matmul") or part.startswith("loss:"))


def floor_ms(ours, theirs):
    """The faster run's products and loss (the same FLOPs in both): the least step time."""
    return min(products_and_loss(ours), products_and_loss(theirs))


def ceilings(result):
    """`{precision: bound}`: KerasHub's summed op time over `floor_ms`, the most ours
    could be ahead with nothing but the products and loss in its step.

    >>> run = lambda model, matmul, loss, total: {
    ...     "model": model, "precision": "float32", "op_ms_per_step": total,
    ...     "by_part": {"attention: matmul": matmul, "loss: other ops": loss}}
    >>> ceilings({"runs": [run("ours", 60, 20, 100), run("keras_hub", 60, 20, 120)]})
    {'float32': 1.5}
    """
    runs = {(run["model"], run["precision"]): run for run in result["runs"]
            if "error" not in run}
    bounds = {}
    for (model, precision), ours in runs.items():
        theirs = runs.get(("keras_hub", precision))
        if model != "ours" or theirs is None:
            continue
        floor = floor_ms(ours, theirs)
        if floor > 0:
            bounds[precision] = theirs["op_ms_per_step"] / floor
    return bounds


def markdown(result, top=14):
    """The step times, then per-step op time by part and by op type (ms), a column each."""
    runs = [run for run in result["runs"] if "error" not in run]
    header = "| | " + " | ".join(f"{r['model']}, {r['precision']}" for r in runs) + " |"
    rule = "|---" * (len(runs) + 1) + "|"
    lines = [header, rule,
             "| step, wall clock | " + " | ".join(f"{r['step_ms']:.1f}" for r in runs) + " |",
             "| target tokens/s | " + " | ".join(
                 f"{r['target_tokens_per_second']:,.0f}" for r in runs) + " |",
             "| all ops, summed | " + " | ".join(f"{r['op_ms_per_step']:.1f}" for r in runs)
             + " |"]
    for key, title in (("by_part", "part"), ("by_type", "op type")):
        totals = defaultdict(float)
        for run in runs:
            for name, ms in run[key].items():
                totals[name] += ms
        names = sorted(totals, key=totals.get, reverse=True)[:top]
        lines += ["", f"| {title} | " + " | ".join(
            f"{r['model']}, {r['precision']}" for r in runs) + " |", rule]
        lines += [f"| {name} | " + " | ".join(f"{r[key].get(name, 0.0):.1f}" for r in runs)
                  + " |" for name in names]
    lines += ["", "Ours at most, by summed op time, with no time outside the matrix products "
              "and loss (at the faster model's): "
              + ", ".join(f"{bound:.2f}x KerasHub in {precision}"
                          for precision, bound in ceilings(result).items()) + "."]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="runs/demo/data")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--sentences-only", action="store_true",
                        help="the demo's sentence pairs, not the whole training split")
    parser.add_argument("--normalize-first", action="store_true", help="pre-LN blocks")
    parser.add_argument("--output", help="also write the JSON here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--batches-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(profile(batches=load_batches(args.batches_file),
                                 **json.loads(args.worker))), flush=True)
        return
    overrides = {"normalize_first": True} if args.normalize_first else {}
    result = benchmark(args.data, args.preset, args.batches,
                       sentences_only=args.sentences_only, **overrides)
    write_json(args.output, result)
    print(markdown(result))


if __name__ == "__main__":
    main()
