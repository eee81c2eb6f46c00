"""The GPU benchmark, on JAX or PyTorch alone: throughput, MFU and a short real run.

Made for a lent NVIDIA H200, bounded by `--minutes`, never imports TensorFlow (the JSON
says `tensorflow_loaded`). Each section gets a share of the time left (skipped, with the
reason, without it or an import); at the limit a watchdog prints what was measured.
Sections: 1. the bf16 matmul peak; 2. `mixed_bfloat16` training tokens/s of `base` and
`big` (XLA on JAX) on fixed-shape synthetic batches, fused and explicit attention, MFU
(`mfu.py`'s FLOPs) against the measured peak and the H200's nominal 989 TFLOP/s; 3. the
KerasHub-layers model on the same batches; 4. cached greedy and beam-4 decoding at batch
1, 32, 256; 5. with `--data` (a `prepare` folder), up to `--train-minutes` of pre-LN
`base` training, then test BLEU/chrF. Progress on stderr, one JSON object on stdout (and
`--output`); `--smoke` runs every section at tiny sizes on a CPU in about a minute.

    KERAS_BACKEND=jax python benchmarks/gpu.py --minutes 7 --data DIR --output $OUT/gpu.json
    python benchmarks/gpu.py --smoke
"""

import time

STARTED = time.monotonic()

import argparse  # noqa: E402
import contextlib  # noqa: E402
import gc  # noqa: E402
import importlib.abc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import traceback  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import best_rate, log  # noqa: E402
from mfu import training_flops_per_token  # noqa: E402

H200_BF16_DENSE_PEAK = 989e12  # NVIDIA's nominal dense bf16 FLOP/s of an H200 (SXM)
PRECISION = "mixed_bfloat16"
TENSORFLOW_MODULES = ("tensorflow", "tensorflow_text", "tf_keras")


def tensorflow_loaded():
    return any(name.split(".")[0] in TENSORFLOW_MODULES for name in sys.modules)


class Budget:
    """Shares of the time left: each section gets `weight / (weights of it and later)`."""

    def __init__(self, seconds, margin, weights):
        self.end = STARTED + seconds - margin
        self.weights = dict(weights)

    def left(self):
        return self.end - time.monotonic()

    def take(self, section):
        later = sum(self.weights.values())
        weight = self.weights.pop(section)
        return max(self.left(), 0.0) * weight / later if later else 0.0


def seed_everything(seed=0):
    # Not `keras.utils.set_random_seed`: it imports TensorFlow wherever it is installed.
    keras.backend.clear_session()
    random.seed(seed)
    np.random.seed(seed)
    if keras.backend.backend() == "torch":
        import torch

        torch.manual_seed(seed)


def free_memory():
    keras.backend.clear_session()
    gc.collect()


def describe_devices():
    backend = keras.backend.backend()
    versions = {"keras": keras.__version__, "numpy": np.__version__}
    if backend == "jax":
        import jax

        versions["jax"] = jax.__version__
        devices = [f"{d.platform}:{d.device_kind}" for d in jax.devices()]
    elif backend == "torch":
        import torch

        versions["torch"] = torch.__version__
        devices = ([f"cuda:{torch.cuda.get_device_name(i)}"
                    for i in range(torch.cuda.device_count())] or ["cpu"])
    else:
        devices = ["(TensorFlow backend: not listed)"]
    return devices, versions


def synchronize(value):
    """Wait until `value` (and so everything queued before it) is computed."""
    if keras.backend.backend() == "jax":
        value.block_until_ready()
    else:
        keras.ops.convert_to_numpy(keras.ops.cast(keras.ops.reshape(value, (-1,))[0],
                                                  "float32"))


class _HiddenTensorFlow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in TENSORFLOW_MODULES:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by gpu.py)",
                                      name=name)
        return None


@contextlib.contextmanager
def hidden_tensorflow():
    """TensorFlow made unimportable, as on the device machine (keras_hub imports it
    wherever it is installed, and runs without it)."""
    if keras.backend.backend() == "tensorflow":
        yield False
        return
    finder = _HiddenTensorFlow()
    sys.meta_path.insert(0, finder)
    try:
        yield True
    finally:
        sys.meta_path.remove(finder)


def matmul_peak(size, seconds, products=20):
    """Best FLOP/s of `products` back-to-back bf16 `(size, size)` products, after warm-up."""
    ops = keras.ops
    a = ops.cast(keras.random.uniform((size, size), seed=1), "bfloat16")
    b = ops.cast(keras.random.uniform((size, size), seed=2), "bfloat16")
    for _ in range(3):
        out = ops.matmul(a, b)
    synchronize(out)
    best, trials = float("inf"), 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or trials < 2:
        start = time.perf_counter()
        for _ in range(products):
            out = ops.matmul(a, b)
        synchronize(out)
        best = min(best, (time.perf_counter() - start) / products)
        trials += 1
    return {"dtype": "bfloat16", "size": size, "trials": trials,
            "flops_per_second": 2 * size**3 / best}


def synthetic_batches(batch_size, length, vocabulary_size, seed=0):
    """`(features, labels)` int32 `(B, length)` with real lengths in `[length / 2, length]`."""
    rng = np.random.default_rng(seed)

    def side():
        ids = rng.integers(4, vocabulary_size, (batch_size, length)).astype("int32")
        real = rng.integers(length // 2, length + 1, batch_size)
        ids[np.arange(length)[None, :] >= real[:, None]] = 0
        return ids, real

    source, _ = side()
    labels, real = side()
    decoder = np.concatenate([np.full((batch_size, 1), 2, "int32"), labels[:, :-1]], axis=1)
    decoder[np.arange(length)[None, :] >= real[:, None]] = 0
    return {"encoder_token_ids": source, "decoder_token_ids": decoder}, labels


def repeated(batch):
    while True:
        yield batch


class StepLog(keras.callbacks.Callback):
    """Records when each `fit` step ends (its logs read: the step is done) and the last
    logs; stops `fit` at `deadline` (monotonic) or `seconds` after `warmup` steps, with at
    least 2 timed steps when there is a warm-up."""

    def __init__(self, deadline, warmup=0, seconds=float("inf")):
        super().__init__()
        self.deadline, self.warmup, self.seconds = deadline, warmup, seconds

    def on_train_begin(self, logs=None):
        self.started, self.times, self.last_logs = time.perf_counter(), [], {}

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.times.append(now)
        self.last_logs = dict(logs or {})
        if self.warmup and len(self.times) - self.warmup < 2:
            return
        if time.monotonic() > self.deadline or (
                self.warmup and now - self.times[self.warmup - 1] > self.seconds):
            self.model.stop_training = True


def time_training(model, batch, config, jit_compile, seconds, deadline, warmup, peak):
    from keras_transformer.training import compile_transformer

    compile_transformer(model, jit_compile=jit_compile)
    timer = StepLog(deadline, warmup, seconds)
    model.fit(repeated(batch), epochs=1, steps_per_epoch=10**7, callbacks=[timer], verbose=0)
    steps = len(timer.times) - warmup
    elapsed = timer.times[-1] - timer.times[warmup - 1]
    tokens = int(np.sum(batch[1] != 0))
    speed = steps * tokens / elapsed
    flops = speed * training_flops_per_token(config, [batch])
    row = {"steps_timed": steps, "seconds_timed": round(elapsed, 3),
           "compile_and_warmup_seconds": round(timer.times[warmup - 1] - timer.started, 2),
           "target_tokens_per_second": speed, "model_flops_per_second": flops,
           "mfu_vs_nominal_h200": flops / H200_BF16_DENSE_PEAK}
    if peak:
        row["mfu_vs_measured_peak"] = flops / peak
    return row


def training_section(args, budget, peak, jit_compile):
    from keras_transformer.layers import attention
    from keras_transformer.models import PRESETS, build_transformer
    from keras_transformer.training import set_precision

    section = {"precision": PRECISION, "jit_compile": jit_compile, "runs": []}
    deadline = time.monotonic() + budget
    compile_guess = None
    set_precision(PRECISION)
    try:
        # Fused first for every preset, then explicit: the likeliest to be cut come last.
        for implementation in ("fused", "explicit"):
            for preset in args.presets:
                batch_size = args.big_batch_size if preset == "big" else args.batch_size
                batch = synthetic_batches(batch_size, args.length, args.vocabulary_size)
                config = {**PRESETS[preset], "vocabulary_size": args.vocabulary_size}
                row = {"preset": preset, "attention": implementation, "batch_size": batch_size,
                       "length": args.length}
                needed = (compile_guess or 0) + args.timed_seconds
                left = deadline - time.monotonic()
                if left < needed:
                    row["skipped"] = (f"out of time: about {needed:.0f} s needed, "
                                      f"{max(left, 0):.0f} s left of this section")
                else:
                    try:
                        attention.set_attention_implementation(implementation)
                        seed_everything()
                        model = build_transformer(preset, vocabulary_size=args.vocabulary_size)
                        row.update(time_training(model, batch, config, jit_compile,
                                                 args.timed_seconds, deadline, args.warmup,
                                                 peak))
                        compile_guess = max(compile_guess or 0,
                                            row["compile_and_warmup_seconds"])
                    except Exception as error:  # one failed row must not end the run
                        row["error"] = f"{type(error).__name__}: {error}"
                        traceback.print_exc()
                    finally:
                        model = None
                        free_memory()
                section["runs"].append(row)
                log(f"training: {json.dumps(row)}")
    finally:
        attention.set_attention_implementation("auto")
        set_precision("float32")
    section["budget_seconds"] = round(budget, 1)
    section["longest_compile_and_warmup_seconds"] = compile_guess
    return section


def keras_hub_section(args, budget, peak, jit_compile, ours, compile_guess):
    from keras_transformer.models import PRESETS
    from keras_transformer.training import set_precision

    preset = args.presets[0]
    section = {"preset": preset, "precision": PRECISION, "jit_compile": jit_compile,
               "batch_size": args.batch_size, "length": args.length,
               "budget_seconds": round(budget, 1)}
    deadline = time.monotonic() + budget
    needed = (compile_guess or 0) + args.timed_seconds
    if budget < needed:
        section["skipped"] = f"out of time: about {needed:.0f} s needed, {budget:.0f} s left"
        return section
    with hidden_tensorflow() as hidden:
        try:
            import keras_hub
            from keras_hub_baseline import build_keras_hub_transformer
        except Exception as error:
            section["skipped"] = (f"keras_hub does not import without TensorFlow: "
                                  f"{type(error).__name__}: {error}")
            return section
        section["keras_hub_version"] = keras_hub.__version__
        section["tensorflow_hidden_during_section"] = hidden
        batch = synthetic_batches(args.batch_size, args.length, args.vocabulary_size)
        config = {**PRESETS[preset], "vocabulary_size": args.vocabulary_size}
        set_precision(PRECISION)
        try:
            seed_everything()
            model = build_keras_hub_transformer(preset, vocabulary_size=args.vocabulary_size,
                                                max_sequence_length=max(128, args.length))
            section.update(time_training(model, batch, config, jit_compile, args.timed_seconds,
                                         deadline, args.warmup, peak))
        finally:
            model = None
            set_precision("float32")
            free_memory()
    if ours:
        section["ours_over_keras_hub"] = ours["target_tokens_per_second"] / \
            section["target_tokens_per_second"]
        section["ours_attention"] = ours["attention"]
    return section


def decoding_section(args, budget):
    from keras_transformer.generation import generate
    from keras_transformer.models import build_transformer
    from keras_transformer.training import set_precision

    preset = args.presets[0]
    section = {"preset": preset, "precision": PRECISION, "weights": "random",
               "vocabulary_size": args.vocabulary_size, "source_length": args.source_length,
               "max_length": args.decode_length, "budget_seconds": round(budget, 1),
               "rows": []}
    deadline = time.monotonic() + budget
    set_precision(PRECISION)
    try:
        seed_everything()
        model = build_transformer(preset, vocabulary_size=args.vocabulary_size, dropout=0.0)
        rng = np.random.default_rng(0)
        first_guess = args.decode_compile_guess
        for batch_size in args.decode_batch_sizes:
            ids = rng.integers(4, args.vocabulary_size, (batch_size, args.source_length))
            ids[:, -1] = 3  # END_ID
            ids = ids.astype("int32")
            for method in ("greedy", "beam"):
                row = {"method": "greedy" if method == "greedy" else "beam 4",
                       "batch_size": batch_size}
                left = deadline - time.monotonic()
                if left < first_guess:
                    row["skipped"] = (f"out of time: about {first_guess:.0f} s needed, "
                                      f"{max(left, 0):.0f} s left of this section")
                else:
                    row.update(time_decoding(
                        lambda ids, method=method: generate(
                            model, ids, method, beam_size=4,
                            max_length=args.decode_length)["token_ids"],
                        ids, args.decode_repeats))
                    first_guess = max(first_guess, row["first_call_seconds"])
                section["rows"].append(row)
                log(f"decoding: {json.dumps(row)}")
    finally:
        model = None
        set_precision("float32")
        free_memory()
    return section


def time_decoding(run, ids, repeats):
    """The first call (compilation) and the best of `repeats` timed calls: tokens/s."""
    first, best, count = best_rate(lambda: run(ids), repeats, lambda out: np.sum(out != 0))
    return {"first_call_seconds": round(first, 2), "target_tokens_per_second": best,
            "tokens_per_sentence": count / len(ids)}


TOY_SUBJECTS = [("Der Hund", "The dog"), ("Die Katze", "The cat"), ("Das Haus", "The house"),
                ("Der Mann", "The man"), ("Die Frau", "The woman")]
TOY_PREDICATES = [("ist gross", "is big"), ("ist klein", "is small"), ("ist alt", "is old"),
                  ("ist neu", "is new"), ("ist hier", "is here"), ("ist dort", "is there"),
                  ("ist gut", "is good"), ("ist schön", "is beautiful")]


def write_toy_data(directory):
    """train.tsv (40 toy sentence pairs), test.tsv (10) and a 60-piece tokenizer."""
    from keras_transformer.data import train_tokenizer, write_tsv

    pairs = [(f"{de} {dp}.", f"{en} {ep}.") for de, en in TOY_SUBJECTS
             for dp, ep in TOY_PREDICATES]
    write_tsv(os.path.join(directory, "train.tsv"), pairs)
    write_tsv(os.path.join(directory, "test.tsv"), pairs[::4])
    train_tokenizer([text for pair in pairs for text in pair],
                    os.path.join(directory, "tokenizer.model"), vocabulary_size=60)
    return directory


def real_section(args, budget, jit_compile):
    from keras_transformer.data import NumpyBatches, Tokenizer, load_training_pairs, load_tsv
    from keras_transformer.evaluation import score_translations
    from keras_transformer.generation import Translator
    from keras_transformer.models import build_transformer
    from keras_transformer.training import compile_transformer, set_precision

    for module in ("sentencepiece", "sacrebleu"):
        try:
            __import__(module)
        except ImportError as error:
            return {"skipped": f"{module} does not import: {error}"}
    data_dir = args.data
    if data_dir is None:
        toy = tempfile.TemporaryDirectory(prefix="gpu-benchmark-data-")
        data_dir = write_toy_data(toy.name)
    eval_reserve = min(max(0.3 * budget, args.eval_reserve_min), 90.0)
    train_seconds = min(60 * args.train_minutes, budget - eval_reserve)
    section = {"data": data_dir if args.data else "toy pairs written by --smoke",
               "preset": args.real_preset, "normalize_first": True, "precision": PRECISION,
               "jit_compile": jit_compile, "tokens_per_batch": args.tokens_per_batch,
               "max_sequence_length": args.max_sequence_length,
               "bucket_width": args.bucket_width, "warmup_steps": args.warmup_steps,
               "sentences_only": True, "budget_seconds": round(budget, 1),
               "train_seconds_budget": round(train_seconds, 1)}
    if train_seconds < args.min_train_seconds:
        section["skipped"] = (f"out of time: {max(train_seconds, 0):.0f} s left to train, "
                              f"{args.min_train_seconds:.0f} s needed")
        return section
    tokenizer = Tokenizer.from_file(os.path.join(data_dir, "tokenizer.model"))
    train_pairs = load_training_pairs(data_dir, sentences_only=True)
    test_pairs = load_tsv(os.path.join(data_dir, "test.tsv"))[: args.eval_sentences]
    stream = NumpyBatches(train_pairs, tokenizer, tokens_per_batch=args.tokens_per_batch,
                          max_sequence_length=args.max_sequence_length, seed=0, repeat=True,
                          pad_to_bucket=True, bucket_width=args.bucket_width)
    tokens, shapes = [], set()

    def counted():
        for features, labels in stream:
            tokens.append(int(np.sum(labels != 0)))
            shapes.add(labels.shape)
            yield features, labels

    set_precision(PRECISION)
    try:
        seed_everything()
        model = build_transformer(args.real_preset, vocabulary_size=tokenizer.vocabulary_size,
                                  normalize_first=True)
        compile_transformer(model, warmup_steps=args.warmup_steps, jit_compile=jit_compile)
        training_log = StepLog(time.monotonic() + train_seconds)
        log(f"real training: {len(train_pairs)} pairs, vocabulary "
            f"{tokenizer.vocabulary_size}, up to {train_seconds:.0f} s")
        model.fit(counted(), epochs=1, steps_per_epoch=10**7, callbacks=[training_log],
                  verbose=0)
        times, steps = training_log.times, len(training_log.times)
        half = steps // 2
        section.update({
            "vocabulary_size": tokenizer.vocabulary_size, "train_pairs": len(train_pairs),
            "steps": steps, "seconds": round(times[-1] - training_log.started, 2),
            "batch_shapes": len(shapes),
            # Keras' logged loss is the mean over the run (a running mean), not the last.
            "train_loss_mean": float(training_log.last_logs.get("loss", float("nan"))),
            "target_tokens_per_second": sum(tokens[:steps]) / (times[-1] - training_log.started),
        })
        if steps - half >= 2:
            section["target_tokens_per_second_second_half"] = (
                sum(tokens[half + 1: steps]) / (times[-1] - times[half]))
        log(f"real training: {steps} steps, mean loss {section['train_loss_mean']:.3f}")
        translator = Translator(model, tokenizer, batch_size=args.translate_batch_size,
                                max_sequence_length=args.max_sequence_length,
                                **({"max_length": args.translate_max_length}
                                   if args.translate_max_length else {}))
        sources = [source for source, _ in test_pairs]
        references = [target for _, target in test_pairs]
        section["test_sentences"] = len(test_pairs)
        section["bleu"] = {}
        greedy_seconds = None
        for method in ("greedy", "beam"):
            name = "greedy" if method == "greedy" else "beam 4"
            left = STARTED + args.hard_seconds - args.margin - time.monotonic()
            if greedy_seconds is not None and left < 1.5 * greedy_seconds:
                section["bleu"][name] = {"skipped": f"out of time: {max(left, 0):.0f} s left"}
                continue
            start = time.perf_counter()
            hypotheses = translator.translate(sources, method=method, progress=False,
                                              beam_size=4)
            seconds = time.perf_counter() - start
            greedy_seconds = greedy_seconds or seconds
            scores = score_translations(hypotheses, references)
            scores["seconds"] = round(seconds, 2)
            scores["example"] = {"source": sources[0], "reference": references[0],
                                 "translation": hypotheses[0]}
            section["bleu"][name] = scores
            log(f"real training: {name} BLEU {scores['bleu']} chrF {scores['chrf']}")
    finally:
        model = None
        set_precision("float32")
        free_memory()
    return section


class Output:
    """Writes the JSON once, to the saved stdout (everything else printed to stdout,
    from Python or C, goes to stderr) and to `--output`."""

    def __init__(self, path):
        self.path, self.lock, self.done = path, threading.Lock(), False
        self.fd = os.dup(1)
        sys.stdout.flush()
        os.dup2(2, 1)

    def write(self, result):
        with self.lock:
            if self.done:
                return False
            self.done = True
        for _ in range(5):
            try:
                text = json.dumps(result, indent=2, default=str)
                break
            except RuntimeError:  # changed by the main thread meanwhile (watchdog)
                time.sleep(0.05)
        else:
            text = json.dumps({"error": "could not serialize the result"})
        if self.path:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            with open(self.path, "w", encoding="utf-8") as file:
                file.write(text + "\n")
        os.write(self.fd, (text + "\n").encode())
        return True


def run_section(result, name, function, *arguments):
    log(f"{name}: start")
    result["current_section"] = name
    start = time.monotonic()
    try:
        value = function(*arguments)
    except Exception as error:
        traceback.print_exc()
        value = {"error": f"{type(error).__name__}: {error}"}
    value["section_seconds"] = round(time.monotonic() - start, 1)
    result[name] = value
    log(f"{name}: done in {value['section_seconds']} s")
    return value


# The sizes and limits of a run, and of `--smoke` (tiny, on a CPU).
SIZES = dict(big_batch_size=256, length=64, vocabulary_size=32000, timed_seconds=8.0, warmup=3,
             peak_size=8192, peak_seconds=4.0, decode_length=64, source_length=24,
             decode_repeats=2, decode_compile_guess=5.0, real_preset="base",
             tokens_per_batch=12000, max_sequence_length=128, bucket_width=32,
             warmup_steps=1000, eval_sentences=1000, translate_batch_size=1024,
             translate_max_length=None, eval_reserve_min=40.0, min_train_seconds=30.0,
             margin=15.0)
SMOKE = dict(presets=["tiny"], batch_size=8, length=16, vocabulary_size=200, timed_seconds=1.0,
             warmup=2, peak_size=256, peak_seconds=0.5, decode_batch_sizes=[1, 4],
             decode_length=8, source_length=8, decode_compile_guess=0.5, real_preset="tiny",
             tokens_per_batch=128, max_sequence_length=32, bucket_width=16, warmup_steps=10,
             eval_sentences=10, translate_batch_size=16, translate_max_length=12,
             train_minutes=0.1, eval_reserve_min=10.0, min_train_seconds=3.0, margin=5.0)


def parse_arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--minutes", type=float, default=7.0, help="bound of the whole run (default 7)")
    add("--data", default=None, help="a `keras-transformer prepare` folder (section 5)")
    add("--train-minutes", type=float, default=3.0, help="real training, at most")
    add("--output", default=None, help="also write the JSON here")
    add("--smoke", action="store_true", help="tiny sizes, on a CPU, about a minute")
    add("--presets", nargs="+", default=["base", "big"])
    add("--batch-size", type=int, default=256)
    add("--decode-batch-sizes", type=int, nargs="+", default=[1, 32, 256])
    args = parser.parse_args(argv)
    vars(args).update(SIZES)
    if args.smoke:
        vars(args).update(SMOKE, minutes=min(args.minutes, 3.0))
    args.hard_seconds = 60 * args.minutes
    return args


def main(argv=None):
    args = parse_arguments(argv)
    output = Output(args.output)
    backend = keras.backend.backend()
    devices, versions = describe_devices()
    # PyTorch: Keras' `jit_compile=True` is torch.compile, slow to compile and not the target.
    jit_compile = backend != "torch"
    result = {"backend": backend, "devices": devices, "versions": versions,
              "smoke": args.smoke, "minutes": args.minutes,
              "nominal_peak_flops": H200_BF16_DENSE_PEAK,
              "nominal_peak": "NVIDIA H200 dense bf16 (989 TFLOP/s)"}
    log(f"backend {backend}, devices {devices}")

    def watchdog():
        result["watchdog"] = (f"reached --minutes {args.minutes} during "
                              f"{result.get('current_section')}; the rest was not measured")
        result["tensorflow_loaded"] = tensorflow_loaded()
        result["elapsed_seconds"] = round(time.monotonic() - STARTED, 1)
        log(result["watchdog"])
        if output.write(result):
            os._exit(1 if args.smoke else 0)

    timer = threading.Timer(max(args.hard_seconds - (time.monotonic() - STARTED), 1.0),
                            watchdog)
    timer.daemon = True
    timer.start()

    weights = {"training": 0.30, "keras_hub": 0.10, "decoding": 0.15}
    if args.data or args.smoke:
        weights["real_training"] = 0.45
    budget = Budget(args.hard_seconds, args.margin, weights)

    peak = run_section(result, "matmul_peak", matmul_peak, args.peak_size, args.peak_seconds)
    peak_flops = peak.get("flops_per_second")
    training = run_section(result, "training", lambda: training_section(
        args, budget.take("training"), peak_flops, jit_compile))
    ours = next((row for row in training.get("runs", [])
                 if row["preset"] == args.presets[0] and "target_tokens_per_second" in row),
                None)
    run_section(result, "keras_hub", lambda: keras_hub_section(
        args, budget.take("keras_hub"), peak_flops, jit_compile, ours,
        training.get("longest_compile_and_warmup_seconds")))
    run_section(result, "decoding", lambda: decoding_section(args, budget.take("decoding")))
    if "real_training" in budget.weights:
        run_section(result, "real_training", lambda: real_section(
            args, budget.take("real_training"), jit_compile))
    else:
        result["real_training"] = {"skipped": "no --data folder given"}

    timer.cancel()
    result.pop("current_section", None)
    result["tensorflow_loaded"] = tensorflow_loaded()
    result["elapsed_seconds"] = round(time.monotonic() - STARTED, 1)
    failures = [name for name, value in result.items()
                if isinstance(value, dict) and "error" in value]
    failures += [f"training {row['preset']} {row['attention']}"
                 for row in result.get("training", {}).get("runs", []) if "error" in row]
    if not output.write(result):
        return 1  # the watchdog wrote first
    if args.smoke and backend != "tensorflow" and result["tensorflow_loaded"]:
        log("FAILED: a tensorflow module was loaded")
        return 1
    if args.smoke and failures:
        log(f"FAILED: {failures}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
