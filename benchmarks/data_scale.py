"""Scale of the on-disk data path: `prepare`, time to first step, resume and batch reading
on synthetic corpora of 45k, 450k and 4.5M pairs (WMT14 en-de has 4.5M).

Each corpus recombines the Ding sentence pairs 1 to 3 at a time (seeded, every pair
distinct) into `WORK/PAIRS/train.{en,de}` (reused). Per size: `prepare` (wall time, peak
RSS); `train` for one step (seconds from launch to the end of its first step, peak RSS);
the same folder resumed at step 10 and deep in a late epoch; `StoreBatches` read in a
process of its own (plan seconds, target tokens/s, NumPy and tf.data) against what the
preset trains at. Every command is forked from a small launcher, so each peak RSS is its
own. Results: `WORK/results.json`, `WORK/results.md` and stdout; figures in docs/results.md.

    python benchmarks/data_scale.py                          # 45k, 450k, 4.5M pairs
    python benchmarks/data_scale.py --sizes 2000 --corpus de-en --preset tiny \
        --tokens-per-batch 512 --work /tmp/scale              # a smoke run
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import log, machine, table, write_json  # noqa: E402

ENV = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
CLI = "import sys; from keras_transformer.cli import main; sys.exit(main(sys.argv[1:]))"
DRIVER = """import json, sys, time
started = time.time()
from keras_transformer.training.trainer import train
settings = json.loads(sys.argv[1])
called = time.time()
result = train(**settings)
print(json.dumps({"started": started, "called": called, "result": result}, default=str))
"""
GIB = 1024  # MiB
DEEP_EPOCHS = 20  # the deep resume starts mid-way through epoch 20


def write_corpus(sentences, size, folder, seed=0):
    """`folder/train.en`, `folder/train.de`: `size` distinct pairs, each 1-3 random Ding
    sentence pairs joined; files with `size` lines each are kept. Mean English words."""
    from keras_transformer.data.sources import count_lines

    paths = [os.path.join(folder, f"train.{side}") for side in ("en", "de")]
    words = np.array([len(english.split()) for _, english in sentences] + [0])
    n = len(sentences)
    if size > n + n**2 + n**3:
        raise ValueError(f"{n} sentence pairs make fewer than {size} distinct pairs")
    base = n + 1  # a pair's code: sentence ids + 1 (0: none) in base n + 1
    rng = np.random.default_rng(seed)
    codes = np.zeros(0, "int64")
    while len(codes) < size:  # draw, drop repeated combinations, keep the first of each
        draws = int(1.3 * (size - len(codes))) + 100
        ids = rng.integers(1, base, (draws, 3))
        count = rng.integers(1, 4, draws)
        ids[count < 2, 1], ids[count < 3, 2] = 0, 0
        codes = np.concatenate([codes, ids[:, 0] + base * ids[:, 1] + base**2 * ids[:, 2]])
        codes = codes[np.sort(np.unique(codes, return_index=True)[1])]
    ids = np.stack([codes[:size] % base, codes[:size] // base % base, codes[:size] // base**2],
                   1) - 1  # -1: none
    mean_words = float(words[ids].sum() / size)
    if all(os.path.exists(path) and count_lines(path) == size for path in paths):
        log(f"{size} pairs: reusing {folder}/train.en and train.de")
        return paths, mean_words
    os.makedirs(folder, exist_ok=True)
    with open(paths[0] + ".partial", "w", encoding="utf-8") as english, \
            open(paths[1] + ".partial", "w", encoding="utf-8") as german:
        for start in range(0, size, 100_000):  # .tolist() a chunk at a time
            for row in ids[start:start + 100_000].tolist():
                chosen = [sentences[i] for i in row if i >= 0]
                english.write(" ".join(pair[1] for pair in chosen) + "\n")
                german.write(" ".join(pair[0] for pair in chosen) + "\n")
    for path in paths:
        os.replace(path + ".partial", path)
    log(f"{size} pairs: wrote {folder}/train.en and train.de")
    return paths, mean_words


# Runs argv[2:] and writes its launch time, seconds and peak RSS to argv[1]. A child's
# ru_maxrss starts at the RSS of the process it was forked from (at exec, Linux folds in
# the old address space), so the measured command is forked from this small process
# rather than from the benchmark's own, which holds TensorFlow and a model.
LAUNCHER = """import json, os, subprocess, sys, time
launched, start = time.time(), time.perf_counter()
process = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(process.pid, 0)
seconds = time.perf_counter() - start
with open(sys.argv[1], "w") as file:
    json.dump({"launched": launched, "seconds": seconds, "rss_mib": usage.ru_maxrss / 1024}, file)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def measured(command, log_path, timeout):
    """Runs `command`, its stdout and stderr to files; `(seconds, peak RSS in MiB, stdout,
    time.time() at launch)`."""
    usage_path, out_path = log_path + ".usage.json", log_path + ".out"
    with open(out_path, "w") as out, open(log_path, "w") as err:
        process = subprocess.Popen([sys.executable, "-c", LAUNCHER, usage_path, *command],
                                   stdout=out, stderr=err, env=ENV, start_new_session=True)
        try:
            returncode = process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise RuntimeError(f"timed out after {timeout} s, see {log_path}") from None
    if returncode:
        with open(log_path, errors="replace") as file:
            tail = "".join(file.readlines()[-15:])
        raise RuntimeError(f"exit status {returncode}, see {log_path}:\n{tail}")
    with open(usage_path) as file:
        usage = json.load(file)
    with open(out_path) as file:
        return usage["seconds"], usage["rss_mib"], file.read(), usage["launched"]


def run_train(data_dir, model_dir, settings, log_path, timeout=1800):
    """One `train` process: seconds from launch to the end of its first step, peak RSS."""
    settings = dict(data_dir=data_dir, output_dir=model_dir, verbose=0, **settings)
    _, rss, out, launched = measured([sys.executable, "-c", DRIVER, json.dumps(settings)],
                                     log_path, timeout)
    run = json.loads(out.strip().splitlines()[-1])
    result = run["result"]
    return {"first_step_s": run["called"] - launched + result["first_step_seconds"],
            "startup_s": run["called"] - launched, "peak_rss_mib": rss,
            "step": result["step"], "resumed_from": result["resumed_from"]}


def set_backup_step(model_dir, step):
    """Rewrites the backup's optimizer step and its metadata's (the data position dropped:
    the run computes it from the step)."""
    import h5py

    backup = os.path.join(model_dir, "backup")
    with h5py.File(os.path.join(backup, "latest.weights.h5"), "r+") as file:
        found = [item for item in file["optimizer/vars"].values()
                 if item.shape == () and item.dtype.kind in "iu"]
        assert len(found) == 1, f"expected one step counter, found {len(found)}"
        found[0][()] = step
    path = os.path.join(backup, "training_metadata.json")
    with open(path) as file:
        metadata = json.load(file)
    metadata.pop("data", None)
    with open(path, "w") as file:
        json.dump({**metadata, "step": step}, file)


def batches(data_dir, tokens_per_batch, max_sequence_length):
    from keras_transformer.data.batch_plan import StoreBatches
    from keras_transformer.data.token_store import TokenStore, read_manifest

    manifest = read_manifest(data_dir)
    store = TokenStore(data_dir, "train", manifest["dtype"])
    return StoreBatches(store, tokens_per_batch, max_sequence_length, seed=0), manifest


def pipeline(data_dir, tokens_per_batch, max_sequence_length, count):
    """Seconds to plan epoch 0 (store opened, `BatchPlan` built), then real target tokens
    per second over `count` batches of `StoreBatches.iterate` (what JAX and PyTorch read)
    and of `store_dataset` (the same batches through `tf.data`, what TensorFlow reads)."""
    import keras_transformer.data.batch_plan  # noqa: F401 (imports are not planning)

    start = time.perf_counter()
    stream, _ = batches(data_dir, tokens_per_batch, max_sequence_length)
    stream.plan.epoch(0)
    plan_seconds = time.perf_counter() - start
    iterator = stream.iterate()
    next(iterator)
    start, tokens = time.perf_counter(), 0
    for _ in range(count):
        tokens += int(np.count_nonzero(next(iterator)[1]))
    numpy_rate = tokens / (time.perf_counter() - start)
    from keras_transformer.data.pipeline import store_dataset

    iterator = iter(store_dataset(stream))
    next(iterator)
    start, tokens = time.perf_counter(), 0
    for _ in range(count):
        tokens += int(np.count_nonzero(next(iterator)[1].numpy()))
    return {"plan_s": plan_seconds, "batches_per_epoch": stream.num_batches,
            "pipeline_tokens_per_s": numpy_rate,
            "pipeline_tf_tokens_per_s": tokens / (time.perf_counter() - start),
            **resident_memory()}


def resident_memory():
    """This process's resident MiB now: anonymous, and file-backed (memory-mapped token
    files among them, which the kernel can drop at any time)."""
    memory = {}
    with open("/proc/self/status") as file:
        for line in file:
            name, _, value = line.partition(":")
            if name in ("RssAnon", "RssFile"):
                memory[f"pipeline_{name[3:].lower()}_mib"] = int(value.split()[0]) / 1024
    return memory


def pipeline_process(data_dir, tokens_per_batch, max_sequence_length, count, log_path):
    """`pipeline` in a process of its own: the data path's peak RSS, without a model's."""
    _, rss, out, _ = measured(
        [sys.executable, os.path.abspath(__file__), "--measure-pipeline", data_dir,
         "--tokens-per-batch", str(tokens_per_batch), "--max-sequence-length",
         str(max_sequence_length), "--pipeline-batches", str(count)], log_path, 1800)
    return {**json.loads(out.strip().splitlines()[-1]), "pipeline_rss_mib": rss}


def model_speed(data_dir, preset, tokens_per_batch, max_sequence_length, steps=3):
    """Target tokens per second of `train_on_batch` on the first `steps` batches, timed on
    a second pass (the first traces each shape)."""
    import itertools

    import keras

    import keras_transformer as kt

    stream, manifest = batches(data_dir, tokens_per_batch, max_sequence_length)
    chosen = list(itertools.islice(stream.iterate(), steps))
    keras.utils.set_random_seed(0)
    model = kt.build_transformer(preset, vocabulary_size=manifest["vocabulary_size"])
    kt.compile_transformer(model)
    for features, labels in chosen:
        model.train_on_batch(features, labels)
    start = time.perf_counter()
    for features, labels in chosen:
        model.train_on_batch(features, labels)
    seconds = time.perf_counter() - start
    tokens = sum(int(np.count_nonzero(labels)) for _, labels in chosen)
    return {"preset": preset, "steps": steps, "tokens_per_s": tokens / seconds,
            "seconds_per_step": seconds / steps}


def measure_size(args, sentences, size):
    folder = os.path.join(args.work, str(size))
    (english, german), mean_words = write_corpus(sentences, size, folder, args.seed)
    data_dir, model_dir = os.path.join(folder, "data"), os.path.join(folder, "model")
    shutil.rmtree(data_dir, ignore_errors=True)
    shutil.rmtree(model_dir, ignore_errors=True)
    row = {"pairs": size, "mean_english_words": mean_words}
    seconds, rss, _, _ = measured(
        [sys.executable, "-c", CLI, "prepare", "--output", data_dir, "--source", english,
         "--target", german, "--vocabulary-size", str(args.vocabulary_size)],
        os.path.join(folder, "prepare.log"), 3600)
    with open(os.path.join(data_dir, "tokens.json")) as file:
        row["train_pairs"] = json.load(file)["splits"]["train"]["pairs"]
    row.update(prepare_s=seconds, prepare_rss_mib=rss)
    log(f"{size} pairs: prepare {seconds:.1f} s, {rss:.0f} MiB")
    settings = dict(preset=args.preset, tokens_per_batch=args.tokens_per_batch,
                    max_sequence_length=args.max_sequence_length, bleu_every=0,
                    checkpoint_every=1000)
    first = run_train(data_dir, model_dir, dict(settings, max_steps=1),
                      os.path.join(folder, "train.log"))
    row.update(train_first_step_s=first["first_step_s"], train_startup_s=first["startup_s"],
               train_rss_mib=first["peak_rss_mib"])
    log(f"{size} pairs: train's first step {first['first_step_s']:.1f} s after launch, "
        f"{first['peak_rss_mib']:.0f} MiB")
    with open(os.path.join(model_dir, "backup", "training_metadata.json")) as file:
        batches_per_epoch = json.load(file)["data"]["batches_per_epoch"]
    deep = DEEP_EPOCHS * batches_per_epoch + batches_per_epoch // 2
    for name, step in (("resume_10", 10), ("resume_deep", deep)):
        set_backup_step(model_dir, step)
        run = run_train(data_dir, model_dir, dict(settings, max_steps=step + 1),
                        os.path.join(folder, f"{name}.log"))
        assert run["resumed_from"] == step and run["step"] == step + 1, run
        row.update({f"{name}_s": run["first_step_s"], f"{name}_rss_mib": run["peak_rss_mib"]})
        log(f"{size} pairs: resumed at step {step}, first step {run['first_step_s']:.1f} s")
    row.update(deep_step=deep, batches_per_epoch=batches_per_epoch,
               resume_difference_s=row["resume_deep_s"] - row["resume_10_s"])
    row.update(pipeline_process(data_dir, args.tokens_per_batch, args.max_sequence_length,
                                args.pipeline_batches, os.path.join(folder, "pipeline.log")))
    log(f"{size} pairs: plan {row['plan_s']:.2f} s, "
        f"{row['pipeline_tokens_per_s']:,.0f} target tokens/s read")
    return row, data_dir


def goals(rows, model):
    """Each goal at the largest size run: `{"goal", "met", "figures"}`."""
    last = max(rows, key=lambda row: row["pairs"])
    base = next((row for row in rows if row["pairs"] == 45000), min(rows, key=lambda row:
                                                                         row["pairs"]))
    ratio = min(last["pipeline_tokens_per_s"], last.get("pipeline_tf_tokens_per_s", np.inf)
                ) / model["tokens_per_s"]
    growth = last["train_rss_mib"] - base["train_rss_mib"]
    data_growth = last.get("pipeline_anon_mib", np.nan) - base.get("pipeline_anon_mib", np.nan)
    size = f"{last['pairs']:,} pairs"
    checks = [
        (f"prepare within 10 minutes ({size})", last["prepare_s"] <= 600,
         f"{last['prepare_s']:.0f} s"),
        (f"prepare peak RSS at most 2 GB ({size})", last["prepare_rss_mib"] <= 2 * GIB,
         f"{last['prepare_rss_mib']:.0f} MiB"),
        (f"train's first step within 60 s of launch ({size})",
         last["train_first_step_s"] <= 60, f"{last['train_first_step_s']:.1f} s"),
        (f"train peak RSS at most 0.7 GB above the {base['pairs']:,}-pair run's ({size})",
         growth <= 0.7 * GIB, f"{growth:+.0f} MiB"),
        (f"the data path's own anonymous memory at most 0.7 GB above the {base['pairs']:,}"
         f"-pair run's ({size})", data_growth <= 0.7 * GIB, f"{data_growth:+.0f} MiB"),
        (f"deep resume within 5 s of a resume at step 10 ({size})",
         last["resume_difference_s"] <= 5, f"{last['resume_difference_s']:+.1f} s"),
        (f"pipeline (NumPy and tf.data) at least 5x the tokens/s {model['preset']} trains at "
         f"({size})", ratio >= 5, f"{ratio:.1f}x"),
    ]
    return [dict(goal=goal, met=bool(met), figures=figures) for goal, met, figures in checks]


def markdown(results):
    header = ["pairs", "mean en words", "prepare s", "prepare MiB", "train 1st step s",
              "train MiB", "resume@10 s", "resume deep s (step)", "plan s",
              "NumPy tok/s", "tf.data tok/s", "x model", "data path MiB (anon + file)"]
    model = results["model"]
    rows = []
    for row in results["rows"]:
        slower = min(row["pipeline_tokens_per_s"], row.get("pipeline_tf_tokens_per_s", np.inf))
        cells = [f"{row['pairs']:,}", f"{row['mean_english_words']:.1f}",
                 f"{row['prepare_s']:.1f}", f"{row['prepare_rss_mib']:.0f}",
                 f"{row['train_first_step_s']:.1f}", f"{row['train_rss_mib']:.0f}",
                 f"{row['resume_10_s']:.1f}",
                 f"{row['resume_deep_s']:.1f} ({row['deep_step']:,})", f"{row['plan_s']:.2f}",
                 f"{row['pipeline_tokens_per_s']:,.0f}",
                 f"{row.get('pipeline_tf_tokens_per_s', float('nan')):,.0f}",
                 f"{slower / model['tokens_per_s']:.1f}",
                 f"{row.get('pipeline_rss_mib', float('nan')):.0f} "
                 f"({row.get('pipeline_anon_mib', float('nan')):.0f} + "
                 f"{row.get('pipeline_file_mib', float('nan')):.0f})"]
        rows.append(cells)
    lines = table(header, rows)
    m = results["machine"]
    lines += ["", f"`{model['preset']}` trains at {model['tokens_per_s']:,.0f} target tokens/s "
              f"({model['seconds_per_step']:.2f} s a step, {results['tokens_per_batch']:,} "
              f"tokens per batch). Machine: {m['cpu']}, {m['cores']} cores, avx512_bf16: "
              f"{'yes' if m['avx512_bf16'] else 'no'}.", "", "Goals:", ""]
    lines += [f"- {'met' if goal['met'] else 'NOT met'}: {goal['goal']}: {goal['figures']}"
              for goal in results["goals"]]
    return "\n".join(lines) + "\n"


def remeasure_pipeline(args):
    with open(os.path.join(args.work, "results.json")) as file:
        results = json.load(file)
    for row in results["rows"]:
        data_dir = os.path.join(args.work, str(row["pairs"]), "data")
        row.update(pipeline_process(data_dir, results["tokens_per_batch"],
                                    results["max_sequence_length"], args.pipeline_batches,
                                    os.path.join(args.work, str(row["pairs"]), "pipeline.log")))
        log(f"{row['pairs']} pairs: {row['pipeline_tokens_per_s']:,.0f} (NumPy), "
            f"{row['pipeline_tf_tokens_per_s']:,.0f} (tf.data) target tokens/s")
    results["goals"] = goals(results["rows"], results["model"])
    print(write_results(args.work, results))


def write_results(work, results):
    """`WORK/results.json` and `WORK/results.md`; returns the markdown."""
    write_json(os.path.join(work, "results.json"), results)
    text = markdown(results)
    with open(os.path.join(work, "results.md"), "w") as file:
        file.write(text)
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[45000, 450000, 4500000])
    parser.add_argument("--corpus", help="Ding file (default: $KT_CORPUS or "
                        "/usr/share/trans/de-en)")
    parser.add_argument("--work", default="runs/data_scale", help="corpora, folders, results")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--tokens-per-batch", type=int, default=25000)
    parser.add_argument("--max-sequence-length", type=int, default=128)
    parser.add_argument("--vocabulary-size", type=int, default=8000)
    parser.add_argument("--pipeline-batches", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--measure-pipeline", metavar="DATA_DIR", help=argparse.SUPPRESS)
    parser.add_argument("--pipeline-only", action="store_true",
                        help="only re-measure the pipeline columns of the sizes in "
                             "WORK/results.json, on their prepared folders")
    args = parser.parse_args()
    os.environ.update(KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2")
    if args.measure_pipeline:  # the child of `pipeline_process`
        print(json.dumps(pipeline(args.measure_pipeline, args.tokens_per_batch,
                                  args.max_sequence_length, args.pipeline_batches)))
        return None
    from keras_transformer.data import load_ding, sentence_pairs_only

    results = {"machine": machine(), "preset": args.preset,
               "tokens_per_batch": args.tokens_per_batch,
               "max_sequence_length": args.max_sequence_length,
               "vocabulary_size": args.vocabulary_size}
    log(f"machine: {json.dumps(results['machine'])}")
    if args.pipeline_only:
        return remeasure_pipeline(args)
    sentences = sentence_pairs_only(load_ding(args.corpus))
    log(f"{len(sentences)} Ding sentence pairs")
    rows, model = [], None
    for size in sorted(args.sizes):
        row, data_dir = measure_size(args, sentences, size)
        rows.append(row)
        if model is None:
            model = model_speed(data_dir, args.preset, args.tokens_per_batch,
                                args.max_sequence_length)
            log(f"{args.preset} trains at {model['tokens_per_s']:,.0f} target tokens/s")
        results.update(rows=rows, model=model, goals=goals(rows, model))
        text = write_results(args.work, results)  # after each size: a failure keeps it
    print(text)


if __name__ == "__main__":
    main()
