"""What the benchmark scripts share: the machine, timing, worker processes, tables, goals.

Read this first; each script then holds only what it compares. Nothing here imports a
framework at module level (`gpu.py` runs where TensorFlow must never load).
"""

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STARTED = time.monotonic()
LENGTH_BUCKET = 16  # keras_transformer.generation.search_input's (not imported: no Keras here)


def log(message):
    """A progress line on stderr, with the seconds since this process started."""
    print(f"[{time.monotonic() - STARTED:7.1f} s] {message}", file=sys.stderr, flush=True)


def versions(names):
    """`{name: installed version or None}`, without importing the packages."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def machine(libraries=()):
    """The CPU's name, its CPUs and bf16 flags, the date, and the versions of `libraries`."""
    name, flags = platform.processor() or platform.machine() or "unknown", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as file:
            fields = [line.partition(":") for line in file]
        names = [value.strip() for key, _, value in fields if key.strip() == "model name"]
        flags = next((set(value.split()) for key, _, value in fields
                      if key.strip() == "flags"), flags)
        name = names[0] if names else name
    except OSError:
        pass
    return {"cpu": name, "cores": os.cpu_count(), "avx512_bf16": "avx512_bf16" in flags,
            "avx512f": "avx512f" in flags, "amx_bf16": "amx_bf16" in flags,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            **versions(libraries)}


def write_json(path, data):
    """Write `data` to `path` (its folder made), or nothing when `path` is None."""
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w", encoding="utf-8") as file:
            json.dump(data, file, indent=2, ensure_ascii=False)


def positive_int(text):
    """An int >= 1 for argparse, or an error that names the value."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


def setting(text):
    """`"4x32"` -> `(4, 32)`: beam size 4 (1 is greedy) at batch size 32."""
    try:
        beam_size, batch_size = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not BEAMxBATCH, e.g. 4x32 (beam 4, batch 32) or 1x1 (greedy)"
        ) from None
    if beam_size < 1 or batch_size < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: beam and batch sizes must be >= 1")
    return beam_size, batch_size


def setting_name(beam_size, batch_size):
    """`(4, 32)` -> `"beam4 b32"`, `(1, 1)` -> `"greedy b1"`."""
    return f"{'greedy' if beam_size == 1 else f'beam{beam_size}'} b{batch_size}"


def median_pass(seconds):
    """The index of the median pass (the slower middle one of an even count).

    >>> median_pass([3.0, 1.0, 2.0]), median_pass([4.0, 1.0, 3.0, 2.0])
    (2, 2)
    """
    order = sorted(range(len(seconds)), key=seconds.__getitem__)
    return order[len(order) // 2]


def best_rate(run, repeats, count):
    """`(seconds of an untimed first call, best count/s of `repeats` timed calls, last
    count)`; the best, not the mean: on a shared machine other tenants only slow a call."""
    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    best, produced = 0.0, 0
    for _ in range(repeats):
        start = time.perf_counter()
        produced = int(count(run()))
        best = max(best, produced / (time.perf_counter() - start))
    return first, best, produced


def interleaved(labels, run_once, repeats):
    """`repeats` rounds of `run_once(label)` for every label, the order rotated by one each
    round (the machine's drift reaches every label alike); `{label: [results]}`.

    >>> calls = []
    >>> interleaved("abc", lambda label: calls.append(label) or len(calls), 3)
    {'a': [1, 6, 8], 'b': [2, 4, 9], 'c': [3, 5, 7]}
    """
    labels = list(labels)
    results = {label: [] for label in labels}
    for round_ in range(repeats if labels else 0):
        shift = round_ % len(labels)
        for label in labels[shift:] + labels[:shift]:
            results[label].append(run_once(label))
    return results


def translate_all(translate, sources, batches):
    """One pass of `translate(batch) -> (strings, token counts)` over `batches` (index
    lists into `sources`): `(strings in input order, target tokens, seconds)`."""
    strings, tokens, start = [None] * len(sources), 0, time.perf_counter()
    for batch in batches:
        out, counts = translate([sources[i] for i in batch])
        tokens += counts if isinstance(counts, int) else sum(counts)
        for i, text in zip(batch, out, strict=True):
            strings[i] = text
    return strings, tokens, time.perf_counter() - start


def timed(runners, sources, batch_size, lengths, repeats=3):
    """In-process rows (label -> `translate`) over length-sorted batches: a warm-up pass
    each, then `repeats` interleaved passes; label -> `(strings, tokens/s, seconds)`."""
    batches = batches_by_length(lengths, batch_size)
    for translate in runners.values():
        translate_all(translate, sources, batches)
    passes = interleaved(runners, lambda label: translate_all(runners[label], sources,
                                                              batches), repeats)
    return {label: (runs[-1][0], [tokens / seconds for _, tokens, seconds in runs],
                    [seconds for _, _, seconds in runs]) for label, runs in passes.items()}


def fix_threads(framework, threads):
    """Fix this process's CPU threads for `tensorflow`, `jax` or `torch`, before it starts."""
    if framework == "jax":  # XLA:CPU sizes its pool from the CPUs the process may use
        cpus = sorted(os.sched_getaffinity(0))
        if threads < len(cpus):
            os.sched_setaffinity(0, cpus[:threads])
    if framework == "torch":
        import torch

        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
    if framework == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)


@dataclasses.dataclass
class Row:
    """What a worker serves: `decode(items, **options) -> outputs` (JSON values, one per
    item), `prepare(item)` (untimed, once per source), `lengths(sources)` (sent back with
    the sources: the driver batches by them) and `info` (sent when ready)."""

    decode: callable
    prepare: callable = None
    lengths: callable = None
    info: dict = dataclasses.field(default_factory=dict)


def serve(build):
    """A worker's side: `build() -> Row`, then a JSON line on stdout for each on stdin:
    `{"sources": [...]}` (kept, prepared untimed); `{"batches": [[indices]], **options}`,
    a timed pass answered `{"seconds", "outputs"}`; a failure, `{"error": traceback}`."""
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # library prints go to stderr
    sys.stdout = sys.stderr

    def send(answer):
        protocol.write(json.dumps(answer) + "\n")
        protocol.flush()

    try:
        row = build()
    except Exception:
        send({"error": traceback.format_exc()})
        return
    send({"ready": True, **row.info})
    sources = []
    for line in sys.stdin:
        message = json.loads(line)
        try:
            if "sources" in message:
                sources = [row.prepare(item) if row.prepare else item
                           for item in message["sources"]]
                answer = {"sources": len(sources)}
                if row.lengths:
                    answer["lengths"] = row.lengths(message["sources"])
            else:
                options = {key: value for key, value in message.items() if key != "batches"}
                outputs = [None] * len(sources)
                start = time.perf_counter()
                for batch in message["batches"]:
                    decoded = row.decode([sources[i] for i in batch], **options)
                    for i, output in zip(batch, decoded, strict=True):
                        outputs[i] = output
                answer = {"seconds": time.perf_counter() - start, "outputs": outputs}
        except Exception:
            answer = {"error": traceback.format_exc()}
        send(answer)


class WorkerError(RuntimeError):
    """A worker's failure; `reason`: the last line of its error (e.g. the exception)."""

    def __init__(self, message, reason):
        super().__init__(message)
        self.reason = reason


class Worker:
    """A row's worker process (`command`, which calls `serve`), its stderr in `log`;
    `env` is added to this process's environment (the repository on PYTHONPATH)."""

    def __init__(self, name, command, log, env=None):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1",
               **(env or {})}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
        self.name, self.log = name, log
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=open(log, "w"),
                                        text=True, env=env)

    def receive(self):
        """The next answer; a `WorkerError` with the worker's log for an error."""
        line = self.process.stdout.readline()
        answer = json.loads(line) if line else {"error": "the worker exited"}
        if "error" in answer:
            with open(self.log, encoding="utf-8", errors="replace") as file:
                tail = file.read()[-3000:]
            reason = answer["error"].strip().splitlines()[-1][:300]
            raise WorkerError(f"{self.name} failed:\n{answer['error']}\n"
                              f"log ({self.log}):\n{tail}", reason)
        return answer

    def call(self, **message):
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        return self.receive()

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def worker_rounds(workers, message, repeats, warm_up=None, name="", errors=None):
    """Every worker (label -> `Worker`) once over `warm_up` (default `message`), untimed,
    then `repeats` interleaved rounds of `message`: `(label -> seconds of each round,
    label -> outputs of the last)`. With `errors` (a dict), a failing worker is closed and
    left out, its reason kept there; without, the failure is raised."""
    live = dict(workers)

    def call(label, **sent):
        try:
            return live[label].call(**sent)
        except WorkerError as error:
            if errors is None:
                raise
            errors[label] = error.reason
            log(f"{name} {label} failed: {error.reason}")
            live.pop(label).close()
            return None

    for label in list(live):
        answer = call(label, **(warm_up or message))
        if answer:
            log(f"{name} warm-up {label}: {answer['seconds']:.2f} s")

    def timed_pass(label):
        answer = call(label, **message) if label in live else None
        if answer:
            log(f"{name} {label}: {answer['seconds']:.2f} s")
        return answer

    passes = interleaved(list(live), timed_pass, repeats)
    seconds = {label: [answer["seconds"] for answer in runs]
               for label, runs in passes.items() if label in live}
    outputs = {label: passes[label][-1]["outputs"] for label in seconds}
    return seconds, outputs


def run_child(command, timeout, env=None):
    """Run `command` (which prints one JSON object as its last `{` line) with `env` added:
    that object, or `{"error": ...}` (its stderr's last line, or the timeout)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1])


def batches_by_length(lengths, batch_size):
    """Sentence indices sorted by length, longest first, in batches of `batch_size`.

    >>> batches_by_length([3, 9, 5], 2)
    [[1, 2], [0]]
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def warm_up_batches(batches, lengths):
    """One batch of each input shape our `generate` compiles (sources padded to a multiple
    of 16; the batch's rows), the warm-up pass of every row.

    >>> warm_up_batches([[0], [1], [2]], [20, 30, 40])
    [[0], [2]]
    """
    shapes = {}
    for batch in batches:
        width = -(-max(lengths[i] for i in batch) // LENGTH_BUCKET) * LENGTH_BUCKET
        shapes.setdefault((width, len(batch)), batch)
    return list(shapes.values())


def padded(rows, value, width=None):
    """Int32 `(len(rows), width or the longest)`: each id list, then `value`."""
    import numpy as np

    ids = np.full((len(rows), width or max(map(len, rows))), value, "int32")
    for row, values in enumerate(rows):
        ids[row, : len(values)] = values
    return ids


def padded_sources(tokenizer, sentences, max_sequence_length):
    """Source ids `(B, S)`: pieces then the end token, padded to the longest."""
    from keras_transformer.special_tokens import PAD_ID, with_end

    return padded([with_end(row, max_sequence_length)
                   for row in tokenizer.encode_as_ids(sentences)], PAD_ID)


def strings_and_count(tokenizer, token_ids):
    """The detokenized outputs, and each one's target tokens (no end, no padding)."""
    import numpy as np

    from keras_transformer.special_tokens import END_ID, PAD_ID

    token_ids = np.asarray(token_ids)
    counts = np.sum((token_ids != PAD_ID) & (token_ids != END_ID), axis=1)
    return list(tokenizer.decode_ids(token_ids)), [int(count) for count in counts]


def float32_model(model):
    """`model` computing in float32 (one trained under mixed precision), same weights."""
    import keras_transformer as kt

    layers = [model.token_embedding, *model.encoder_blocks, *model.decoder_blocks]
    if all(layer.dtype_policy.name == "float32" for layer in layers):
        return model
    copy = kt.Transformer.from_config({**model.get_config(), "dtype": "float32"})
    copy.set_weights(model.get_weights())
    return copy


def test_pairs(model_dir, sentences=None, data=None):
    """`(sources, references)`: the first `sentences` pairs of `data` (a TSV; default: the
    test split of the data folder that the model folder's config.json names)."""
    from keras_transformer.data.corpora import load_tsv
    from keras_transformer.folders import CONFIG_FILE, TEST_FILE

    if data is None:
        with open(os.path.join(model_dir, CONFIG_FILE)) as file:
            data = os.path.join(json.load(file)["data_dir"], TEST_FILE)
    pairs = load_tsv(data)[:sentences]
    return [source for source, _ in pairs], [target for _, target in pairs]


def load_decoding_setup(model_dir, sentences=None, data=None, threads=2):
    """An in-process decoding row's inputs: `(sources, references, source lengths in
    pieces, tokenizer, float32 model, max_sequence_length)`, TensorFlow on `threads`."""
    try:
        fix_threads("tensorflow", threads)
    except RuntimeError:  # TensorFlow already started: its threads
        log("warning: TensorFlow's thread pools were already set; ours use them")
    from keras_transformer.generation import Translator

    sources, references = test_pairs(model_dir, sentences, data)
    loaded = Translator.from_directory(model_dir)
    lengths = [len(ids) for ids in loaded.tokenizer.encode_as_ids(sources)]
    return (sources, references, lengths, loaded.tokenizer, float32_model(loaded.model),
            loaded.max_sequence_length or 128)


def table(header, rows):
    """Markdown table lines."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def significant(value, digits=5):
    """`value` rounded to `digits` significant digits, for the JSON."""
    return float(f"{value:.{digits}g}")


@dataclasses.dataclass
class Goal:
    """A goal: `value` (None: not measured) against `target`, met when `value >= target`
    (`at_most`: `<=`); one checked elsewhere gives text (`shown`, `wanted`) and `verdict`."""

    goal: str
    value: float = None
    target: float = None
    unit: str = "x"
    at_most: bool = False
    note: str = ""  # appended to the goal's text as it is
    shown: str = None
    wanted: str = None
    verdict: bool = None

    @property
    def met(self):
        if self.verdict is not None:
            return self.verdict
        if self.value is None or self.target is None:
            return None
        return self.value <= self.target if self.at_most else self.value >= self.target


def goals_table(goals):
    """The goals as one markdown table: goal, measured, goal value, met or missed.

    >>> print("\\n".join(goals_table([Goal("ours / theirs", 1.234, 1.5), Goal("x", None, 2)])))
    | goal | measured | goal value | verdict |
    |---|---|---|---|
    | ours / theirs | 1.23x | >= 1.5x | missed |
    | x | n/a | >= 2x | not measured |
    """
    rows = []
    for goal in goals:
        shown = goal.shown or ("n/a" if goal.value is None else f"{goal.value:.2f}{goal.unit}")
        verdict = {True: "met", False: "missed", None: "not measured"}[goal.met]
        if goal.met is None and goal.value is not None:
            verdict = "reported (no goal)"
        target = goal.wanted or ("" if goal.target is None else (
            f"{'<=' if goal.at_most else '>='} {goal.target:g}{goal.unit}"))
        rows.append([goal.goal + goal.note, shown, target, verdict])
    return table(["goal", "measured", "goal value", "verdict"], rows)
