"""Where a sentence's decoding time goes: ours and KerasHub's cached samplers, measured.

The rows of `ctranslate2_speed.py` (ours, XLA; KerasHub's cached `GreedySampler` /
`BeamSampler` on the KerasHub-layers copy of the same weights) translate the same
sentences, sorted by length into batches: once to warm up, three timed passes with the
two sides taking turns, then once each under TensorFlow's profiler with XLA's per-kernel
trace on. Per sentence, in ms:

- `wall`: the median timed pass (without the profiler);
- `host`: the traced pass less its time inside the compiled search (`CpuExecutable` on
  the calling thread): tokenizing, padding, dispatch, reading the results;
- `products`: the XLA kernels of matrix products (Eigen `MatMul`s and `dot`s, and fusions
  around a dot), summed over the CPU threads;
- `other ops`: every other XLA kernel, summed over the threads; `waiting`: threads
  waiting on each other inside a kernel.

Kernel times are summed over threads, so at batch 1, where a step mostly runs one
kernel at a time, they are close to wall time, and at batch 32 they may add up to more.
The trace needs `XLA_FLAGS=--xla_cpu_enable_xprof_traceme=true` before TensorFlow
starts, so this script runs in its own process and sets it itself.

    python benchmarks/decoding_profile.py --model runs/demo/model --sentences 100 \\
        --settings 1x1 4x1
"""

import os

os.environ["XLA_FLAGS"] = " ".join(  # before TensorFlow starts
    [os.environ.get("XLA_FLAGS", ""), "--xla_cpu_enable_xprof_traceme=true"]).strip()

import argparse  # noqa: E402
import collections  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ctranslate2_speed import (  # noqa: E402
    KERAS_HUB_CACHED,
    OURS,
    batches_by_length,
    setting,
)

PARTS = ("wall", "host", "products", "other ops", "waiting")
_PRODUCT = re.compile(r"^(MatMul|dot|convolution)|dot_|_dot")


def kernel_times(xplane_path):
    """ms by part (`products`, `other ops`, `waiting`, `executable`) in one trace."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(xplane_path, "rb") as file:
        space.ParseFromString(file.read())
    parts = collections.Counter()
    for plane in space.planes:
        names = plane.event_metadata
        for line in plane.lines:
            kernel_thread = line.name.startswith("tf_numa")
            for event in line.events:
                name, ms = names[event.metadata_id].name, event.duration_ps / 1e9
                if not kernel_thread:
                    if name.startswith("CpuExecutable::ExecuteAsyncOnStream"):
                        parts["executable"] += ms
                elif name == "ThunkExecutor::Execute" or name.startswith("end: "):
                    continue  # the executor's span holds the kernels; markers take no time
                elif name.startswith("SlinkyThreadPool"):
                    parts["waiting"] += ms
                elif _PRODUCT.search(name):
                    parts["products"] += ms
                else:
                    parts["other ops"] += ms
    return parts


def _one_pass(translate, sources, batches):
    """Seconds to translate `sources` in `batches` (lists of indices)."""
    start = time.perf_counter()
    for batch in batches:
        translate([sources[i] for i in batch])
    return time.perf_counter() - start


def profile(model_dir, sentences=100, settings=((1, 1), (4, 1)), threads=2, max_length=128,
            data=None, repeats=3, work_dir=None):
    """Per-sentence ms by part for ours and KerasHub's cached sampler in each setting, on
    the first `sentences` sources of `data` (a TSV; default: the model's test split)."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from ctranslate2_speed import float32_model, keras_hub_model, keras_hub_runner, our_runner

    from keras_transformer.data.corpora import load_tsv
    from keras_transformer.folders import CONFIG_FILE, TEST_FILE
    from keras_transformer.generation import Translator

    with open(os.path.join(model_dir, CONFIG_FILE)) as file:
        config = json.load(file)
    pairs = load_tsv(data or os.path.join(config["data_dir"], TEST_FILE))[:sentences]
    sources = [source for source, _ in pairs]
    max_sequence_length = config.get("max_sequence_length", 128)
    loaded = Translator.from_directory(model_dir)
    tokenizer, model = loaded.tokenizer, float32_model(loaded.model)
    hub = keras_hub_model(model)
    lengths = [len(ids) for ids in tokenizer.encode_as_ids(sources)]
    work_dir = work_dir or tempfile.mkdtemp(prefix="decoding-profile-")

    rows = []
    for beam_size, batch_size in settings:
        batches = batches_by_length(lengths, batch_size)
        runners = {
            OURS: our_runner(model, tokenizer, beam_size, max_length, max_sequence_length),
            KERAS_HUB_CACHED: keras_hub_runner(hub, tokenizer, beam_size, max_length,
                                               max_sequence_length, cached=True)}
        walls = {label: [] for label in runners}
        for translate in runners.values():
            _one_pass(translate, sources, batches)  # warm-up: XLA compiles every shape
        for round_ in range(repeats):  # the sides take turns, as in ctranslate2_speed
            for label in list(runners)[::1 if round_ % 2 == 0 else -1]:
                walls[label].append(_one_pass(runners[label], sources, batches))
        for label, translate in runners.items():
            log_dir = os.path.join(work_dir, f"{len(rows)}")
            tf.profiler.experimental.start(log_dir)
            traced = _one_pass(translate, sources, batches)
            tf.profiler.experimental.stop()
            (path,) = glob.glob(os.path.join(log_dir, "**", "*.xplane.pb"), recursive=True)
            parts = kernel_times(path)
            per_sentence = {"wall": 1e3 * float(np.median(walls[label])) / len(sources),
                            "host": max(0.0, 1e3 * traced - parts["executable"]) / len(sources)}
            per_sentence |= {part: parts[part] / len(sources)
                             for part in ("products", "other ops", "waiting")}
            rows.append({"decoding": "greedy" if beam_size == 1 else f"beam {beam_size}",
                         "batch_size": batch_size, "method": label,
                         "ms_per_sentence": {k: round(v, 2) for k, v in per_sentence.items()}})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return {"model": model_dir, "sentences": len(sources), "threads": threads,
            "repeats": repeats, "rows": rows}


def markdown(result):
    """The per-sentence table, and for each setting what 1.5x KerasHub would leave ours."""
    lines = ["| decoding | batch | method | " + " | ".join(PARTS) + " |",
             "|---|---|---|" + "---|" * len(PARTS)]
    for row in result["rows"]:
        ms = row["ms_per_sentence"]
        lines.append(f"| {row['decoding']} | {row['batch_size']} | {row['method']} | "
                     + " | ".join(f"{ms[part]:.2f}" for part in PARTS) + " |")
    rows = {(row["decoding"], row["batch_size"], row["method"]): row["ms_per_sentence"]
            for row in result["rows"]}
    notes = []
    for (decoding, batch, method), ours in rows.items():
        hub = rows.get((decoding, batch, KERAS_HUB_CACHED))
        if method != OURS or hub is None:
            continue
        budget = hub["wall"] / 1.5
        notes.append(
            f"- {decoding} at batch {batch}: ours / KerasHub {hub['wall'] / ours['wall']:.2f}x "
            f"by wall time. 1.5x leaves ours {budget:.2f} ms a sentence; its products alone "
            f"take {ours['products']:.2f} (KerasHub's {hub['products']:.2f}), and the rest "
            f"{ours['wall'] - ours['products']:.2f}; the traced pass has {ours['host']:.2f} "
            f"host, {ours['other ops']:.2f} other ops, {ours['waiting']:.2f} waiting "
            f"(KerasHub: {hub['host']:.2f}, {hub['other ops']:.2f}, {hub['waiting']:.2f}).")
    return "\n".join(lines + [""] + notes)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/demo/model", metavar="DIR",
                        help="a trained model folder (its config.json names the data folder)")
    parser.add_argument("--sentences", type=int, default=100, metavar="N",
                        help="the first N test sentences (default: 100)")
    parser.add_argument("--settings", type=setting, nargs="+", default=((1, 1), (4, 1)),
                        metavar="BEAMxBATCH", help="beam size x batch size (default: 1x1 4x1)")
    parser.add_argument("--data", default=None, metavar="TSV",
                        help="source<TAB>reference pairs (default: the model's test split)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", default=None, metavar="JSON", help="write the result here")
    args = parser.parse_args()
    if not os.path.exists(os.path.join(args.model, "model.keras")):
        parser.error(f"no trained model in {args.model}: train one first (make demo)")
    result = profile(args.model, args.sentences, args.settings, args.threads,
                     data=args.data)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            json.dump(result, file, indent=2)
    print(f"{result['sentences']} test sentences of {result['model']}, {result['threads']} "
          "threads, ms a sentence:\n")
    print(markdown(result))


if __name__ == "__main__":
    main()
