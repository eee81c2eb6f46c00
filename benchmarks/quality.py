"""Quality by training steps, and under the same wall-clock budget: ours against KerasHub.

Ours trains with `keras_transformer.training.train` and the demo's recipe (`DEMO_TRAINING`);
the baseline (`keras_hub_baseline.py`, the same size) in an equivalent loop: the same data,
tokenizer, seeded batches, loss, optimizer, schedule, precision and validation interval.
Each side runs in its own process, one after the other, and is scored on the test split
with sacrebleu, with beam 4 (the headline; ours with its length penalty 0.6, KerasHub's
`BeamSampler` has none) and greedily; the baseline decodes with KerasHub's key/value cache.
By steps (`--steps`, default 500 1000 2000) each side is scored at each step count, so the
machine's load moves only the minutes (`by_steps.json`, `by_steps.md`, `bleu_by_steps.png`
in `--output`); `--minutes M` instead gives each side M minutes. `--set KEY=VALUE` changes
the recipe of both sides (a `train` argument or model override; JSON values) to try a lever.

    python benchmarks/quality.py --data runs/data --output runs/bench/quality
    python benchmarks/quality.py --steps 200 400 --side ours --set dropout=0.3
    python benchmarks/quality.py --minutes 12 --data runs/data --output runs/bench/quality
"""

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import table, write_json  # noqa: E402

SIDES = ("ours", "keras_hub")
METHODS = ("beam", "greedy")  # the first is the headline
STEPS = (500, 1000, 2000)
PLOT_FILE = "bleu_by_steps.png"
RESULT_FILE = "result.json"  # a side's result, in its folder of `--output`
HARNESS_KEYS = ("max_steps", "max_minutes", "verbose")  # `train` arguments `--set` cannot change
PINNED_PRECISION = "mixed_bfloat16"  # the demo's `auto` could pick differently for each side


def recipe(changes=None):
    """The demo's recipe with `changes`: `(train arguments, model overrides)`.

    >>> arguments, overrides = recipe({"dropout": 0.3, "warmup_steps": 200})
    >>> arguments["warmup_steps"], overrides["dropout"]
    (200, 0.3)
    """
    from keras_transformer.demo import DEMO_TRAINING
    from keras_transformer.training.config import TrainingConfig
    from keras_transformer.training.precision import AUTO

    for key in HARNESS_KEYS:
        if key in (changes or {}):
            raise ValueError(f"`{key}` is set by the benchmark itself (the budget is "
                             f"`--steps` or `--minutes`); received {key}={changes[key]!r}")
    names = {field.name for field in dataclasses.fields(TrainingConfig)}
    arguments = DEMO_TRAINING.to_dict()
    overrides = arguments.pop("model_overrides")
    if arguments["precision"] == AUTO:
        arguments["precision"] = PINNED_PRECISION
    for key, value in (changes or {}).items():
        (arguments if key in names else overrides)[key] = value
    return arguments, overrides


def parse_change(text):
    """`KEY=VALUE` as `(key, value)`; the value is JSON if it parses."""
    key, separator, value = text.partition("=")
    if not separator or not key.isidentifier():
        raise argparse.ArgumentTypeError(
            f"expected KEY=VALUE, e.g. `--set tokens_per_batch=2048`; received {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def train_ours(data_dir, output_dir, limits, changes=None):
    """`train` on a fresh `output_dir`, resumed to each `(max_steps, max_minutes)` of
    `limits` in turn; yields `(translator, step, logs, seconds in fit)` at each."""
    from keras_transformer.generation import Translator
    from keras_transformer.training import train

    shutil.rmtree(output_dir, ignore_errors=True)
    arguments, overrides = recipe(changes)
    for steps, minutes in limits:
        result = train(data_dir, output_dir, **{**arguments, "max_steps": steps,
                                                 "max_minutes": minutes, "verbose": 0},
                       **overrides)
        yield (Translator.from_directory(output_dir), result["step"], result["logs"],
               result["seconds"])


def train_keras_hub(data_dir, limits, changes=None):
    """The baseline trained as `train` trains ours, to each limit in turn; yields the same."""
    import keras
    import tensorflow as tf
    from keras_hub_baseline import KerasHubTranslator, build_keras_hub_transformer

    from keras_transformer.data import Tokenizer, load_training_pairs, load_tsv, make_dataset
    from keras_transformer.training import TrainingLimit, compile_transformer, set_precision

    settings, overrides = recipe(changes)
    keras.utils.set_random_seed(settings["seed"])
    set_precision(settings["precision"])
    tokenizer = Tokenizer.from_file(os.path.join(data_dir, "tokenizer.model"))
    length, every = settings["max_sequence_length"], settings["checkpoint_every"]
    pairs = load_training_pairs(data_dir, settings["sentences_only"])
    validation = make_dataset(load_tsv(os.path.join(data_dir, "validation.tsv")), tokenizer,
                              settings["tokens_per_batch"], length, long_sequences="truncate",
                              shuffle=False, batch_size_multiple=1)
    # As `train` does: with its length known, a validation pass ends without a warning.
    validation = validation.apply(tf.data.experimental.assert_cardinality(
        sum(1 for _ in validation)))
    model = build_keras_hub_transformer(settings["preset"],
                                        vocabulary_size=tokenizer.vocabulary_size,
                                        max_sequence_length=length, **overrides)
    compile_transformer(model, warmup_steps=settings["warmup_steps"],
                        learning_rate_scale=settings["learning_rate_scale"],
                        label_smoothing=settings["label_smoothing"],
                        jit_compile=settings["jit_compile"])
    for steps, minutes in limits:
        done = int(model.optimizer.iterations.numpy())
        batches = make_dataset(pairs, tokenizer, settings["tokens_per_batch"], length,
                               seed=settings["seed"], repeat=True,
                               batch_size_multiple=1).skip(done)  # the same stream
        start = time.monotonic()
        history = model.fit(batches, validation_data=validation, shuffle=False,
                            initial_epoch=done // every, epochs=steps // every,
                            steps_per_epoch=every, verbose=0,
                            callbacks=[keras.callbacks.TerminateOnNaN(),
                                       TrainingLimit(max_minutes=minutes)])
        seconds = time.monotonic() - start
        logs = {key: float(values[-1]) for key, values in history.history.items() if values}
        yield (KerasHubTranslator(model, tokenizer, max_sequence_length=length, cached=True),
               int(model.optimizer.iterations.numpy()), logs, seconds)


def check_milestones(milestones, changes=None):
    """Step counts must rise and be multiples of the validation interval."""
    arguments, _ = recipe(changes)
    every = arguments["checkpoint_every"]
    if not milestones or list(milestones) != sorted(set(milestones)) or any(
            step <= 0 or step % every for step in milestones):
        raise ValueError(f"`--steps` must be rising multiples of checkpoint_every ({every}), "
                         f"e.g. `--steps 500 1000 2000`; received {list(milestones)}")


def score(translator, test_pairs):
    """BLEU and chrF of `translator` on `test_pairs` for each of `METHODS`."""
    from keras_transformer.evaluation import evaluate_translator

    scores = {}
    for method in METHODS:
        begin = time.monotonic()
        result = evaluate_translator(translator, test_pairs, method=method, progress=False)
        scores[method] = {**{key: result[key] for key in ("bleu", "chrf", "sentences")},
                          "seconds": time.monotonic() - begin,
                          "signature": result["signature"],
                          "examples": result["examples"][:3]}
    return scores


def run_side(side, data_dir, output_dir, limits, changes=None):
    """Train one side to each `(max_steps, max_minutes)` of `limits` and score it there;
    the rows are kept, after each, in `output_dir/by_steps.json`."""
    from keras_transformer.data import load_tsv

    test_pairs = load_tsv(os.path.join(data_dir, "test.tsv"))
    os.makedirs(output_dir, exist_ok=True)
    if side == "ours":
        stretches = train_ours(data_dir, os.path.join(output_dir, "model"), limits, changes)
    else:
        stretches = train_keras_hub(data_dir, limits, changes)
    result = {"side": side, "changes": changes or {}, "rows": []}
    minutes = 0.0
    for translator, step, logs, seconds in stretches:
        minutes += seconds / 60
        if side == "keras_hub":  # ours keeps its checkpoints; these, to score it again
            translator.model.save_weights(os.path.join(output_dir,
                                                       f"step-{step}.weights.h5"))
        row = {"steps": step, "training_minutes": minutes, "train_loss": logs.get("loss"),
               "validation_loss": logs.get("val_loss"), "scores": score(translator, test_pairs)}
        result["rows"].append(row)
        write_json(os.path.join(output_dir, "by_steps.json"), result)
        print(f"{side}: step {step}, {minutes:.1f} training minutes, " + ", ".join(
            f"{method} BLEU {row['scores'][method]['bleu']:.2f} chrF "
            f"{row['scores'][method]['chrf']:.2f}" for method in METHODS),
            file=sys.stderr, flush=True)
    return result


def _run_side_process(side, arguments, output_dir, timeout):
    """`quality.py --side SIDE ARGUMENTS` in a fresh process: the result it writes to
    `output_dir/SIDE/result.json`, or `{"error": ...}` (its last line, or the timeout) with
    the rows it kept before. Its progress lines (`SIDE: ...`) are shown as they come."""
    folder = os.path.join(output_dir, side)
    result_path = os.path.join(folder, RESULT_FILE)
    if os.path.exists(result_path):
        os.remove(result_path)  # an earlier run's
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [sys.executable, os.path.abspath(__file__), "--side", side,
               "--output", output_dir, *arguments]
    killed = threading.Event()
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env=env) as process:
        def kill():
            killed.set()
            process.kill()

        timer = threading.Timer(timeout, kill)  # only catches hangs
        timer.daemon = True
        timer.start()
        tail = []
        try:
            for line in process.stderr:
                if line.startswith(f"{side}:"):
                    print(line, end="", file=sys.stderr, flush=True)
                tail = (tail + [line.rstrip()])[-20:]
        finally:
            timer.cancel()
    if process.returncode == 0 and os.path.exists(result_path):
        with open(result_path, encoding="utf-8") as file:
            return json.load(file)
    error = {"error": f"timed out after {timeout:.0f} s" if killed.is_set() else
             ([line for line in tail if line] or ["no output"])[-1]}
    partial = os.path.join(folder, "by_steps.json")
    if os.path.exists(partial):
        with open(partial, encoding="utf-8") as file:
            error["rows"] = json.load(file)["rows"]
    return error


def benchmark(minutes=12.0, data_dir="runs/data", output_dir="runs/bench/quality",
              sides=SIDES, changes=None):
    """Both sides for `minutes` each, in fresh processes one after the other; a dict."""
    arguments, overrides = recipe(changes)
    results = {"minutes_per_model": minutes, "method": METHODS[0], "methods": list(METHODS),
               "recipe": {**arguments, **overrides}}
    for side in sides:  # evaluation and saving come on top of the budget
        results[side] = _run_side_process(
            side, ["--minutes", str(minutes), "--data", data_dir, *_set(changes)],
            output_dir, timeout=60 * minutes + 3600)
        print(json.dumps({side: results[side]}), file=sys.stderr, flush=True)
    return results


def benchmark_by_steps(milestones=STEPS, data_dir="runs/data", output_dir="runs/bench/quality",
                       sides=SIDES, changes=None):
    """Both sides trained to each of `milestones` and scored there, in fresh processes one
    after the other; writes `by_steps.json`, `by_steps.md` and the plot into `output_dir`."""
    check_milestones(milestones, changes)
    arguments, overrides = recipe(changes)
    recipe_shown = {key: value for key, value in arguments.items() if key not in HARNESS_KEYS}
    results = {"steps": list(milestones), "method": METHODS[0], "methods": list(METHODS),
               "recipe": {**recipe_shown, **overrides}}
    plot = os.path.join(output_dir, PLOT_FILE)
    if os.path.exists(plot):
        os.remove(plot)  # an earlier run's, never shown beside this run's table
    for side in sides:  # a step took about 1.2 s on 2 cores, scoring a few minutes
        results[side] = _run_side_process(
            side, ["--steps", *map(str, milestones), "--data", data_dir, *_set(changes)],
            output_dir, timeout=3600 + 10 * max(milestones))
    write_json(os.path.join(output_dir, "by_steps.json"), results)
    with open(os.path.join(output_dir, "by_steps.md"), "w", encoding="utf-8") as file:
        file.write(steps_table(results) + "\n")
    if all("rows" in results[side] and "error" not in results[side] for side in sides):
        plot_by_steps(results, plot)
        results["plot"] = plot
    return results


def _set(changes):
    return [argument for key, value in (changes or {}).items()
            for argument in ("--set", f"{key}={json.dumps(value)}")]


def steps_table(results):
    """The by-steps results as a Markdown table: a row per side and step count.

    >>> row = {"steps": 500, "training_minutes": 9.5, "validation_loss": 5.1,
    ...        "scores": {"beam": {"bleu": 1.0, "chrf": 15.0},
    ...                   "greedy": {"bleu": 0.9, "chrf": 14.0}}}
    >>> print(steps_table({"ours": {"rows": [row]}, "keras_hub": {"error": "boom"}}))
    | steps | model | minutes | val loss | BLEU beam | chrF beam | BLEU greedy | chrF greedy |
    |---|---|---|---|---|---|---|---|
    | 500 | ours | 9.5 | 5.100 | 1.00 | 15.00 | 0.90 | 14.00 |
    | - | KerasHub | failed: boom | | | | | |
    """
    names = {"ours": "ours", "keras_hub": "KerasHub"}
    header = ["steps", "model", "minutes", "val loss", "BLEU beam", "chrF beam",
              "BLEU greedy", "chrF greedy"]
    lines = table(header, [])
    rows = []
    for side in SIDES:
        entry = results.get(side)
        if entry is None:
            continue
        if "error" in entry:
            lines.append(f"| - | {names[side]} | failed: {entry['error']} | | | | | |")
        for row in entry.get("rows", []):
            loss = row.get("validation_loss")
            cells = [str(row["steps"]), names[side], f"{row['training_minutes']:.1f}",
                     "-" if loss is None else f"{loss:.3f}"]
            cells += [f"{row['scores'][method][key]:.2f}" for method in METHODS
                      for key in ("bleu", "chrf")]
            rows.append((row["steps"], SIDES.index(side), "| " + " | ".join(cells) + " |"))
    return "\n".join(lines[:2] + [line for *_, line in sorted(rows)] + lines[2:])


def plot_by_steps(results, path):
    """BLEU of both sides against steps and against training minutes (PNG at `path`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for side, color in zip(SIDES, ("tab:blue", "tab:orange"), strict=True):
        if side not in results:
            continue
        rows = results[side]["rows"]
        for method, style in zip(METHODS, ("-", "--"), strict=True):
            label = f"{'ours' if side == 'ours' else 'KerasHub'}, {method}"
            bleu = [row["scores"][method]["bleu"] for row in rows]
            for axis, key in zip(axes, ("steps", "training_minutes"), strict=True):
                axis.plot([row[key] for row in rows], bleu, style, color=color, marker="o",
                          label=label)
    axes[0].set(xlabel="training steps", ylabel="test BLEU", title="BLEU by steps")
    axes[1].set(xlabel="training minutes (this machine)", title="BLEU by minutes")
    axes[0].legend()
    for axis in axes:
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+",
                        help="the step counts to score both sides at (the headline; "
                             f"default {' '.join(map(str, STEPS))})")
    parser.add_argument("--minutes", type=float,
                        help="instead, a training budget per model in minutes")
    parser.add_argument("--data", default="runs/data")
    parser.add_argument("--output", default="runs/bench/quality")
    parser.add_argument("--side", choices=SIDES, help="run one side in this process")
    parser.add_argument("--set", type=parse_change, action="append", default=[],
                        metavar="KEY=VALUE", dest="changes",
                        help="change the recipe (a `train` argument or model override)")
    args = parser.parse_args()
    changes = dict(args.changes)
    if args.steps and args.minutes is not None:
        parser.error("give --steps (scores at step counts) or --minutes (a time budget), "
                     "not both")
    args.steps = args.steps or list(STEPS)
    try:
        recipe(changes)  # refuses the keys the benchmark sets, before any training starts
        if args.minutes is None:
            check_milestones(args.steps, changes)
    except ValueError as error:
        parser.error(str(error))
    if args.side:
        limits = ([(step, None) for step in args.steps] if args.minutes is None
                  else [(10**7, args.minutes)])
        result = run_side(args.side, args.data, os.path.join(args.output, args.side), limits,
                          changes)
        if args.minutes is not None:  # one row, its headline scores on top
            headline = result["rows"][-1]["scores"][METHODS[0]]
            result.update(result["rows"][-1], minutes=args.minutes, method=METHODS[0],
                          bleu=headline["bleu"], chrf=headline["chrf"])
        write_json(os.path.join(args.output, args.side, RESULT_FILE), result)
    elif args.minutes is None:
        result = benchmark_by_steps(args.steps, args.data, args.output, changes=changes)
        print(steps_table(result), file=sys.stderr)
    else:
        result = benchmark(args.minutes, args.data, args.output, changes=changes)
    print(json.dumps(result, indent=None if args.side else 2, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
