"""Quality under the same wall-clock budget: our model against the KerasHub baseline.

Our side is `keras_transformer.training.train` with the demo's recipe
(`keras_transformer.demo.DEMO_TRAINING`). The baseline (`keras_hub_baseline.py`, the
same size) trains in an equivalent loop: the same data folder, tokenizer and seeded
stream of batches, the same loss, optimizer, schedule and precision, validation at the
same interval, and the same time limit (`TrainingLimit`). Each side runs in its own
process, one after the other. Both are then scored on the test split with sacrebleu
(`keras_transformer.evaluation`) twice: with beam search of width 4 (the paper's
decoding; ours with its length penalty 0.6, the baseline with KerasHub's
`BeamSampler`, which has none), the headline figure, and greedily (ours with
`kt.generate`, the baseline with KerasHub's `GreedySampler`).

`--set KEY=VALUE` changes the recipe for both sides (a `train` argument or a model
override; the value is read as JSON when it parses, else as a string), to try a lever:

    python benchmarks/quality.py --minutes 12 --data runs/data --output runs/bench/quality
    python benchmarks/quality.py --side ours --minutes 12 --set tokens_per_batch=2048
"""

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SIDES = ("ours", "keras_hub")
METHODS = ("beam", "greedy")  # the first is the headline
HARNESS_KEYS = ("max_steps", "max_minutes", "verbose")  # `train` arguments `--set` cannot change
# The demo trains with `--precision auto`; both sides of a comparison need one precision.
PINNED_PRECISION = "mixed_bfloat16"


def recipe(changes=None):
    """The demo's training recipe with `changes`, split into `train` arguments and model
    overrides.

    Example:
    >>> arguments, overrides = recipe({"dropout": 0.3, "warmup_steps": 200})
    >>> arguments["warmup_steps"], overrides["dropout"]
    (200, 0.3)
    """
    from keras_transformer.demo import DEMO_TRAINING
    from keras_transformer.training.precision import AUTO

    for key in HARNESS_KEYS:
        if key in (changes or {}):
            raise ValueError(f"`{key}` is set by the benchmark itself (the budget is "
                             f"`--minutes`); received {key}={changes[key]!r}")
    from keras_transformer.training.config import TrainingConfig

    names = {field.name for field in dataclasses.fields(TrainingConfig)}
    arguments = DEMO_TRAINING.to_dict()
    overrides = arguments.pop("model_overrides")
    if arguments["precision"] == AUTO:  # timed steps could pick differently for each side
        arguments["precision"] = PINNED_PRECISION
    for key, value in (changes or {}).items():
        (arguments if key in names else overrides)[key] = value
    return arguments, overrides


def parse_change(text):
    """`KEY=VALUE` from the command line as `(key, value)`; the value is JSON if it parses.

    Example:
    >>> parse_change("tokens_per_batch=2048"), parse_change("precision=float32")
    (('tokens_per_batch', 2048), ('precision', 'float32'))
    """
    key, separator, value = text.partition("=")
    if not separator or not key.isidentifier():
        raise argparse.ArgumentTypeError(
            f"expected KEY=VALUE, e.g. `--set tokens_per_batch=2048`; received {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def train_ours(data_dir, output_dir, minutes, changes=None):
    """`train` with the recipe for `minutes`; returns the trained `Translator`."""
    from keras_transformer.generation import Translator
    from keras_transformer.training import train

    arguments, overrides = recipe(changes)
    arguments.update(max_steps=10**7, max_minutes=minutes, verbose=0)
    result = train(data_dir, output_dir, **arguments, **overrides)
    return Translator.from_directory(output_dir), result["step"], result["logs"]


def train_keras_hub(data_dir, minutes, changes=None):
    """The baseline trained like `train` does ours; returns its `KerasHubTranslator`."""
    import keras
    from keras_hub_baseline import KerasHubTranslator, build_keras_hub_transformer

    from keras_transformer.data import Tokenizer, load_training_pairs, load_tsv, make_dataset
    from keras_transformer.training import TrainingLimit, compile_transformer, set_precision

    settings, overrides = recipe(changes)
    keras.utils.set_random_seed(settings["seed"])
    set_precision(settings["precision"])
    tokenizer = Tokenizer.from_file(os.path.join(data_dir, "tokenizer.model"))
    length = settings["max_sequence_length"]
    stream = make_dataset(load_training_pairs(data_dir, settings["sentences_only"]), tokenizer,
                          settings["tokens_per_batch"], length, seed=settings["seed"],
                          repeat=True, batch_size_multiple=1)
    validation = make_dataset(load_tsv(os.path.join(data_dir, "validation.tsv")), tokenizer,
                              settings["tokens_per_batch"], length, long_sequences="truncate",
                              shuffle=False, batch_size_multiple=1)
    model = build_keras_hub_transformer(settings["preset"],
                                        vocabulary_size=tokenizer.vocabulary_size,
                                        max_sequence_length=length, **overrides)
    compile_transformer(model, warmup_steps=settings["warmup_steps"],
                        learning_rate_scale=settings["learning_rate_scale"],
                        label_smoothing=settings["label_smoothing"],
                        jit_compile=settings["jit_compile"])
    history = model.fit(stream, validation_data=validation, epochs=10**6,
                        steps_per_epoch=settings["checkpoint_every"], verbose=0,
                        callbacks=[TrainingLimit(max_minutes=minutes),
                                   keras.callbacks.TerminateOnNaN()])
    logs = {key: float(values[-1]) for key, values in history.history.items() if values}
    translator = KerasHubTranslator(model, tokenizer, max_sequence_length=length)
    return translator, int(model.optimizer.iterations.numpy()), logs


def run_side(side, data_dir, output_dir, minutes, changes=None):
    """Train one side for `minutes`, then score it on `test.tsv`; returns a dict."""
    from keras_transformer.data import load_tsv
    from keras_transformer.evaluation import evaluate_translator

    start = time.monotonic()
    if side == "ours":
        shutil.rmtree(output_dir, ignore_errors=True)  # a fresh run, not a resumed one
        translator, steps, logs = train_ours(data_dir, output_dir, minutes, changes)
    else:
        translator, steps, logs = train_keras_hub(data_dir, minutes, changes)
        os.makedirs(output_dir, exist_ok=True)  # its weights, to score it again later
        translator.model.save_weights(os.path.join(output_dir, "model.weights.h5"))
    trained = time.monotonic() - start
    test_pairs = load_tsv(os.path.join(data_dir, "test.tsv"))
    scores = {}
    for method in METHODS:
        begin = time.monotonic()
        result = evaluate_translator(translator, test_pairs, method=method, progress=False)
        scores[method] = {**{key: result[key] for key in ("bleu", "chrf", "sentences")},
                          "seconds": time.monotonic() - begin,
                          "examples": result["examples"][:3]}
    headline = scores[METHODS[0]]
    return {"side": side, "minutes": minutes, "changes": changes or {}, "steps": steps,
            "train_loss": logs.get("loss"), "validation_loss": logs.get("val_loss"),
            "training_seconds": trained, "evaluation_seconds": time.monotonic() - start - trained,
            "bleu": headline["bleu"], "chrf": headline["chrf"], "method": METHODS[0],
            "signature": result["signature"], "scores": scores}


def benchmark(minutes=12.0, data_dir="runs/data", output_dir="runs/bench/quality",
              sides=SIDES, changes=None):
    """Both sides, each in a fresh process, one after the other; a dict per side."""
    arguments, overrides = recipe(changes)
    results = {"minutes_per_model": minutes, "method": METHODS[0], "methods": list(METHODS),
               "recipe": {**arguments, **overrides}}
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    for side in sides:
        command = [sys.executable, os.path.abspath(__file__), "--side", side, "--minutes",
                   str(minutes), "--data", data_dir, "--output", output_dir]
        for key, value in (changes or {}).items():
            command += ["--set", f"{key}={json.dumps(value)}"]
        # Evaluation and saving come on top of the budget (the baseline's uncached beam
        # search took 12 minutes on 2 cores); the timeout only catches hangs.
        done = subprocess.run(command, capture_output=True, text=True, env=env,
                              timeout=60 * minutes + 3600)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not lines:
            results[side] = {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
        else:
            results[side] = json.loads(lines[-1])
        print(json.dumps({side: results[side]}), file=sys.stderr, flush=True)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=12.0, help="training budget per model")
    parser.add_argument("--data", default="runs/data")
    parser.add_argument("--output", default="runs/bench/quality")
    parser.add_argument("--side", choices=SIDES, help="run one side in this process")
    parser.add_argument("--set", type=parse_change, action="append", default=[],
                        metavar="KEY=VALUE", dest="changes",
                        help="change the recipe (a `train` argument or model override)")
    args = parser.parse_args()
    changes = dict(args.changes)
    try:
        recipe(changes)  # refuses the keys the benchmark sets, before any training starts
    except ValueError as error:
        parser.error(str(error))
    if args.side:
        result = run_side(args.side, args.data, os.path.join(args.output, args.side),
                          args.minutes, changes)
        print(json.dumps(result, ensure_ascii=False), flush=True)
    else:
        print(json.dumps(benchmark(args.minutes, args.data, args.output, changes=changes),
                         indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
