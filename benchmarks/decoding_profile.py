"""Where a sentence's decoding time goes: ours and KerasHub's cached samplers, measured.

The two rows of `ctranslate2_speed.py` translate the same length-sorted batches: a warm-up,
`--repeats` interleaved timed passes (`common.timed`), then one pass each under
TensorFlow's profiler with XLA's per-kernel trace. Per sentence, in ms: `wall` (the median
timed pass), `host` (the traced pass outside the compiled search), `products` (matrix
product kernels), `other ops` (other kernels) and `waiting` (threads waiting inside a
kernel); kernels are summed over threads, so the parts add up to more than `wall`. The
trace needs `XLA_FLAGS=--xla_cpu_enable_xprof_traceme=true` before TensorFlow starts:
this script sets it, in its own process.

    python benchmarks/decoding_profile.py --model runs/demo/model --sentences 100 \\
        --settings 1x1 4x1
"""

import os

os.environ["XLA_FLAGS"] = " ".join(  # before TensorFlow starts
    [os.environ.get("XLA_FLAGS", ""), "--xla_cpu_enable_xprof_traceme=true"]).strip()

import argparse  # noqa: E402
import collections  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
from ctranslate2_speed import KERAS_HUB_CACHED, OURS  # noqa: E402
from training_profile import under_profiler  # noqa: E402

SETTINGS = ((1, 1), (4, 1))  # (beam size, batch size)
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


def _traced_pass(translate, sources, batches, log_dir):
    """Seconds to translate `sources` in `batches` under the profiler, and the kernel
    times of that pass (`kernel_times`)."""
    (_, _, seconds), paths = under_profiler(
        lambda: common.translate_all(translate, sources, batches), log_dir)
    (path,) = paths
    parts = kernel_times(path)
    if not parts["products"]:
        raise RuntimeError(
            "The trace holds no XLA kernels: XLA_FLAGS=--xla_cpu_enable_xprof_traceme=true "
            "must be set before TensorFlow starts; run benchmarks/decoding_profile.py in its "
            "own process.")
    return seconds, parts


def profile(model_dir, sentences=100, settings=SETTINGS, threads=2, max_length=128,
            data=None, repeats=3):
    """Per-sentence ms by part for ours and KerasHub's cached sampler in each setting, on
    the first `sentences` sources of `data` (a TSV; default: the model's test split)."""
    from ctranslate2_speed import keras_hub_model, keras_hub_runner, our_runner

    from keras_transformer.generation import Translator

    sources, _, lengths, tokenizer, model, max_sequence_length = common.load_decoding_setup(
        model_dir, sentences, data, threads)
    hub = keras_hub_model(model)
    translator = Translator(model, tokenizer, max_sequence_length=max_sequence_length)

    rows = []
    with tempfile.TemporaryDirectory(prefix="decoding-profile-") as work_dir:
        for beam_size, batch_size in settings:
            batches = common.batches_by_length(lengths, batch_size)
            runners = {
                OURS: our_runner(translator, beam_size, max_length),
                KERAS_HUB_CACHED: keras_hub_runner(hub, tokenizer, beam_size, max_length,
                                                   max_sequence_length, cached=True)}
            # Warm-up (XLA compiles every shape), then the timed passes, taking turns.
            timings = common.timed(runners, sources, batch_size, lengths, repeats)
            for label, translate in runners.items():
                seconds = timings[label][2]
                traced, parts = _traced_pass(translate, sources, batches,
                                             os.path.join(work_dir, str(len(rows))))
                per_sentence = {
                    "wall": 1e3 * seconds[common.median_pass(seconds)] / len(sources),
                    "host": max(0.0, 1e3 * traced - parts["executable"]) / len(sources)}
                per_sentence |= {part: parts[part] / len(sources)
                                 for part in ("products", "other ops", "waiting")}
                rows.append({"decoding": "greedy" if beam_size == 1 else f"beam {beam_size}",
                             "batch_size": batch_size, "method": label,
                             "ms_per_sentence": {k: round(v, 2)
                                                 for k, v in per_sentence.items()}})
                common.log(json.dumps(rows[-1]))
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
            f"by wall time; 1.5x would leave ours {budget:.2f} ms a sentence. In the traced "
            f"pass its products take {ours['products']:.2f} ms (KerasHub's "
            f"{hub['products']:.2f}), host work {ours['host']:.2f}, other kernels "
            f"{ours['other ops']:.2f} and waiting {ours['waiting']:.2f} (KerasHub: "
            f"{hub['host']:.2f}, {hub['other ops']:.2f}, {hub['waiting']:.2f}).")
    return "\n".join(lines + [""] + notes)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/demo/model", metavar="DIR",
                        help="a trained model folder (its config.json names the data folder)")
    parser.add_argument("--sentences", type=common.positive_int, default=100, metavar="N",
                        help="the first N test sentences (default: 100)")
    parser.add_argument("--settings", type=common.setting, nargs="+", default=SETTINGS,
                        metavar="BEAMxBATCH", help="beam size x batch size (default: 1x1 4x1)")
    parser.add_argument("--data", default=None, metavar="TSV",
                        help="source<TAB>reference pairs (default: the model's test split)")
    parser.add_argument("--threads", type=common.positive_int, default=2)
    parser.add_argument("--repeats", type=common.positive_int, default=3, metavar="N",
                        help="timed passes per side, taking turns (default: 3)")
    parser.add_argument("--output", default=None, metavar="JSON", help="write the result here")
    args = parser.parse_args()
    if not os.path.exists(os.path.join(args.model, "model.keras")):
        parser.error(f"no trained model in {args.model}: train one first (make demo)")
    result = profile(args.model, args.sentences, args.settings, args.threads,
                     data=args.data, repeats=args.repeats)
    common.write_json(args.output, result)
    print(f"{result['sentences']} test sentences of {result['model']}, {result['threads']} "
          "threads, ms a sentence:\n")
    print(markdown(result))


if __name__ == "__main__":
    main()
