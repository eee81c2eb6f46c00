"""Decoding speed and BLEU of a trained model: ours against CTranslate2 and KerasHub's samplers.

CTranslate2's README protocol on this machine: the test sentences sorted by length into
batches, greedy and beam 4 at batch 1 and 32 (`--settings`), `--threads` CPU threads, no
length penalty, at most the longest source + 50 output tokens (our rule, given to every
row), padding and the start token never generated; CTranslate2 at 1 thread or `--threads`,
whichever a probe finds faster (`rows_info`). Each row (`--rows`: ours on TensorFlow
and JAX, with `shrink_batch=False`, its SavedModel and int8, CTranslate2 float32 and int8,
KerasHub's samplers uncached and cached on `keras_hub_copy_of` the same weights) runs in
a worker process of its own (`common.Worker`); after a warm-up pass, `--repeats` rounds
with the rows taking turns; target tokens/s and sentences/s of each row's median pass,
BLEU, and how many translations equal ours (TensorFlow, XLA, float32). A row that cannot
start is listed as skipped with its reason. Protocol and figures: docs/guides/export.md.

    python benchmarks/ctranslate2_speed.py --model runs/demo/model --sentences 200
    python benchmarks/ctranslate2_speed.py --rows ours ours_jax ct2_float32 --settings 1x1 4x32
"""

import argparse
import importlib.util
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

OURS = "ours, XLA"  # TensorFlow, float32: the reference of `same as ours`
KERAS_HUB_CACHED = "KerasHub sampler, cached, XLA"
CT2_FLOAT32 = "CTranslate2 float32"
SAVED_MODEL = "ours, SavedModel"
INT8 = "ours, int8 (XLA)"
WHOLE_BATCH = "ours, XLA, whole batch"
# --rows name: table label (in this order)
LABELS = {"saved_model": SAVED_MODEL, "ours": OURS, "ours_jax": "ours, JAX (jit)",
          "ours_whole_batch": WHOLE_BATCH, "ours_int8": INT8, "ct2_float32": CT2_FLOAT32,
          "ct2_int8": "CTranslate2 int8", "keras_hub": "KerasHub sampler, XLA",
          "keras_hub_cached": KERAS_HUB_CACHED}
ROWS = tuple(LABELS)
SETTINGS = ((1, 1), (4, 1), (1, 32), (4, 32))  # (beam size, batch size)


def our_runner(translator, beam_size, max_length, shrink_batch=True):
    """`translate(sentences) -> (strings, target tokens of each)` with `generate` on the
    translator's model (`Translator._generate`: its own tokenizing and padding)."""
    method = "greedy" if beam_size == 1 else "beam"

    def translate(sentences):
        out = translator._generate(translator.tokenize(sentences), method, dict(
            beam_size=beam_size, alpha=0.0, max_length=max_length, shrink_batch=shrink_batch))
        return common.strings_and_count(translator.tokenizer, out["token_ids"])

    return translate


def keras_hub_runner(copy, tokenizer, beam_size, max_length, max_sequence_length,
                     cached=False):
    """KerasHub's sampler on `copy` (`keras_hub_model`), with our limit as the prompt;
    `cached`: with KerasHub's key/value cache (`sampler_search(cached=True)`)."""
    from keras_hub_baseline import sampler_search

    from keras_transformer.generation.search_input import MAX_LENGTH_OFFSET, round_up
    from keras_transformer.special_tokens import PAD_ID

    search = sampler_search(copy, "greedy" if beam_size == 1 else "beam", beam_size,
                            cached=cached)

    def translate(sentences):
        ids = common.padded_sources(tokenizer, sentences, max_sequence_length)
        width = round_up(ids.shape[1], 16)  # as ours, to bound the compiled shapes
        ids = np.pad(ids, [(0, 0), (0, width - ids.shape[1])], constant_values=PAD_ID)
        longest = int(np.max(np.sum(ids != PAD_ID, axis=1)))
        limit = min(longest + MAX_LENGTH_OFFSET, max_length)
        return common.strings_and_count(tokenizer, search(ids, limit + 1))  # + the start token

    return translate


def keras_hub_model(model):
    """The KerasHub-layers copy of `model`, with padding and the start token banned as in
    every other row (their output biases set to -1e9)."""
    from keras_hub_baseline import keras_hub_copy_of

    from keras_transformer.special_tokens import PAD_ID, START_ID

    copy = keras_hub_copy_of(model)
    output = copy.decoder.get_layer("output")
    bias = np.asarray(output.bias.numpy()).copy()
    bias[[PAD_ID, START_ID]] = -1e9
    output.bias.assign(bias)
    return copy


def saved_model_runner(translator, beam_size, max_length, path):
    """The SavedModel `export_saved_model` writes to `path` (XLA inside), served."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    from keras_transformer.export import export_saved_model
    from keras_transformer.special_tokens import END_ID, PAD_ID

    export_saved_model(translator, path, beam_size=beam_size, alpha=0.0,
                       max_length=max_length)
    serve_ = tf.saved_model.load(path).signatures["serving_default"]

    def translate(sentences):
        out = serve_(text=tf.constant(sentences))
        ids = out["token_ids"].numpy()
        counts = np.sum((ids != PAD_ID) & (ids != END_ID), axis=1).tolist()
        return [text.decode("utf-8") for text in out["translation"].numpy()], counts

    return translate


def ctranslate2_runner(path, tokenizer, beam_size, max_length, max_sequence_length, threads):
    import ctranslate2

    from keras_transformer.generation.search_input import DEFAULT_MIN_LENGTH, MAX_LENGTH_OFFSET

    translator = ctranslate2.Translator(path, device="cpu", inter_threads=1,
                                        intra_threads=threads)
    processor = tokenizer._processor
    options = dict(beam_size=beam_size, length_penalty=0.0, min_decoding_length=DEFAULT_MIN_LENGTH,
                   max_input_length=0, suppress_sequences=[["<pad>"], ["<s>"]])

    def translate(sentences):
        # Our sources: at most `max_sequence_length - 1` pieces, then the end token
        # (which CTranslate2 adds); our limit: the batch's longest source + 50, capped.
        pieces = [row[: max_sequence_length - 1]
                  for row in processor.encode(sentences, out_type=str)]
        limit = min(max(len(row) + 1 for row in pieces) + MAX_LENGTH_OFFSET, max_length)
        results = translator.translate_batch(pieces, max_decoding_length=limit, **options)
        hypotheses = [result.hypotheses[0] for result in results]
        return [processor.decode_pieces(h) for h in hypotheses], list(map(len, hypotheses))

    return translate


def fastest_ct2_threads(path, tokenizer, max_length, limit, threads, model_dir, data=None,
                        probe=16):
    """1 or `threads`, whichever CTranslate2 runs faster here: greedy at batch 1 on the
    first `probe` test sentences, the second pass of each. On an Intel Xeon with AVX512
    (2026-12-08) it ran 5x slower with 2 threads than with 1; on an AMD EPYC, not."""
    if threads <= 1:
        return threads
    sources, _ = common.test_pairs(model_dir, probe, data)
    one_by_one = [[index] for index in range(len(sources))]
    seconds = {}
    for count in (1, threads):
        translate = ctranslate2_runner(path, tokenizer, 1, max_length, limit, count)
        common.translate_all(translate, sources, one_by_one)  # the first pass warms up
        seconds[count] = common.translate_all(translate, sources, one_by_one)[2]
    common.log(f"CTranslate2 probe, {probe} sentences greedy at batch 1: " + ", ".join(
        f"{count} thread(s) {value:.2f} s" for count, value in seconds.items()))
    return min(seconds, key=seconds.get)


def build_row(row, model_dir, threads, max_length, work_dir, data=None):
    """A worker's `common.Row` for `row` (a key of `LABELS`); a beam size's runner is made
    on its first pass (the warm-up)."""
    common.fix_threads("jax" if row == "ours_jax" else "tensorflow", threads)
    from keras_transformer.generation import Translator

    options = {"quantization": "int8"} if row == "ours_int8" else {}
    loaded = Translator.from_directory(model_dir, method="greedy", **options)
    tokenizer = loaded.tokenizer
    limit = loaded.max_sequence_length or 128
    translator = loaded if row == "ours_int8" else Translator(
        common.float32_model(loaded.model), tokenizer, max_sequence_length=limit)
    hub = keras_hub_model(translator.model) if row.startswith("keras_hub") else None
    ct2_path = None
    if row.startswith("ct2_"):
        from keras_transformer.export import export_ctranslate2

        ct2_path = export_ctranslate2(model_dir, os.path.join(work_dir, row),
                                      quantization="int8" if row == "ct2_int8" else None,
                                      force=True)
        threads = fastest_ct2_threads(ct2_path, tokenizer, max_length, limit, threads,
                                      model_dir, data)
    runners = {}

    def runner(beam_size):
        if row in ("ours", "ours_jax", "ours_int8", "ours_whole_batch"):
            return our_runner(translator, beam_size, max_length,
                              shrink_batch=row != "ours_whole_batch")
        if row == "saved_model":
            return saved_model_runner(translator, beam_size, max_length,
                                      os.path.join(work_dir, f"saved_model_beam{beam_size}"))
        if ct2_path:
            return ctranslate2_runner(ct2_path, tokenizer, beam_size, max_length, limit,
                                      threads)
        return keras_hub_runner(hub, tokenizer, beam_size, max_length, limit,
                                cached=row == "keras_hub_cached")

    def decode(sentences, beam_size):
        if beam_size not in runners:
            runners[beam_size] = runner(beam_size)
        strings, counts = runners[beam_size](sentences)
        return [[text, int(count)] for text, count in zip(strings, counts, strict=True)]

    import keras

    return common.Row(decode, lengths=lambda sentences: [
        len(ids) for ids in tokenizer.encode_as_ids(sentences)],
        info={"backend": keras.backend.backend(), "threads": threads})


def start_workers(rows, model_dir, threads, max_length, work_dir, data=None):
    """`(label -> started Worker, label -> why a row cannot run here)`."""
    workers, skipped = {}, {}
    for row in rows:
        needs = {"ours_jax": "jax", "ct2_float32": "ctranslate2", "ct2_int8": "ctranslate2",
                 "keras_hub": "keras_hub", "keras_hub_cached": "keras_hub"}.get(row)
        if needs and importlib.util.find_spec(needs) is None:
            skipped[LABELS[row]] = f"{needs} is not importable"
            continue
        command = [sys.executable, os.path.abspath(__file__), "--worker", row, "--model",
                   model_dir, "--threads", str(threads), "--max-length", str(max_length),
                   "--work-dir", work_dir] + (["--data", data] if data else [])
        workers[LABELS[row]] = common.Worker(
            LABELS[row], command, os.path.join(work_dir, f"{row}.log"),
            env={"KERAS_BACKEND": "jax" if row == "ours_jax" else "tensorflow"})
    return workers, skipped


def benchmark(model_dir, sentences=None, threads=2, max_length=128, data=None, rows=ROWS,
              work_dir=None, settings=SETTINGS, repeats=3):
    """The rows (`rows` picks them) in each `(beam size, batch size)` of `settings` on the
    first `sentences` pairs of `data` (default: the model's test split)."""
    from keras_transformer.evaluation import score_translations

    sources, references = common.test_pairs(model_dir, sentences, data)
    work_dir = work_dir or tempfile.mkdtemp(prefix="ct2-bench-")
    os.makedirs(work_dir, exist_ok=True)
    workers, skipped = start_workers(rows, model_dir, threads, max_length, work_dir, data)
    info, lengths, results = {}, None, []
    try:
        for label, worker in list(workers.items()):  # they load in parallel
            try:
                info[label] = worker.receive()
                answer = worker.call(sources=sources)
                lengths = lengths or answer.get("lengths")
            except common.WorkerError as error:
                skipped[label] = error.reason
                workers.pop(label).close()
        for beam_size, batch_size in settings:
            name = ("greedy" if beam_size == 1 else f"beam {beam_size}", batch_size)
            here = {label: worker for label, worker in workers.items()
                    if not (label == WHOLE_BATCH and batch_size == 1)}
            if not here:
                break
            message = {"beam_size": beam_size,
                       "batches": common.batches_by_length(lengths, batch_size)}
            errors = {}
            seconds, outputs = common.worker_rounds(
                here, message, repeats, name=f"{name[0]} b{batch_size}", errors=errors)
            for label, error in errors.items():
                skipped[label] = error
                workers.pop(label)
            ours = [text for text, _ in outputs[OURS]] if OURS in outputs else None
            for label, times in seconds.items():
                strings = [text for text, _ in outputs[label]]
                tokens = sum(count for _, count in outputs[label])
                middle = common.median_pass(times)
                row = {"decoding": name[0], "batch_size": batch_size, "method": label,
                       "target_tokens_per_second": round(tokens / times[middle], 1),
                       "sentences_per_second": round(len(sources) / times[middle], 2),
                       "tokens_per_second_runs": [round(tokens / t, 1) for t in times],
                       "bleu": score_translations(strings, references)["bleu"]}
                if ours is not None:
                    row["same_as_ours"] = round(
                        float(np.mean([a == b for a, b in zip(strings, ours, strict=True)])),
                        4)
                results.append(row)
                common.log(json.dumps(row))
    finally:
        for worker in workers.values():
            worker.close()
    return {"model": model_dir, "sentences": len(sources), "threads": threads,
            "max_length": max_length, "repeats": repeats, "machine": common.machine(),
            "rows_info": info, "skipped": skipped, "rows": results}


def markdown(result):
    """The table of `benchmark`'s result, the skipped rows under it.

    >>> row = {"decoding": "greedy", "batch_size": 1, "target_tokens_per_second": 20.0,
    ...        "sentences_per_second": 2.0, "bleu": 9.5, "same_as_ours": 0.5}
    >>> text = markdown({"rows": [{**row, "method": CT2_FLOAT32}, {**row, "method": OURS}],
    ...                  "skipped": {INT8: "TypeError: quantization"}})
    >>> for line in text.splitlines()[2:]:
    ...     print(line)
    | greedy | 1 | CTranslate2 float32 | 20.0 | 2.00 | 1.00x | 9.50 | 50.0% |
    | greedy | 1 | ours, XLA | 20.0 | 2.00 | 1.00x | 9.50 | 50.0% |
    <BLANKLINE>
    Skipped: ours, int8 (XLA): TypeError: quantization
    """
    reference = {(row["decoding"], row["batch_size"]): row["target_tokens_per_second"]
                 for row in result["rows"] if row["method"] == CT2_FLOAT32}
    rows = []
    for row in result["rows"]:
        base = reference.get((row["decoding"], row["batch_size"]))
        speed = row["target_tokens_per_second"]
        same = row.get("same_as_ours")
        sentences = row.get("sentences_per_second")
        rows.append([row["decoding"], row["batch_size"], row["method"], f"{speed:,.1f}",
                     "" if sentences is None else f"{sentences:,.2f}",
                     f"{speed / base:.2f}x" if base else "n/a", f"{row['bleu']:.2f}",
                     "" if same is None else f"{100 * same:.1f}%"])
    lines = common.table(["decoding", "batch", "method", "tokens/s", "sentences/s",
                          "vs CTranslate2 float32", "BLEU", "same as ours"], rows)
    skipped = result.get("skipped", {})
    if skipped:
        lines += [""] + [f"Skipped: {label}: {reason}" for label, reason in skipped.items()]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/demo/model", metavar="DIR",
                        help="a trained model folder (its config.json names the data folder)")
    parser.add_argument("--sentences", type=int, default=None, metavar="N",
                        help="the first N test sentences (default: all)")
    parser.add_argument("--data", default=None, metavar="TSV",
                        help="source<TAB>reference pairs (default: the model's test split)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=128, help="most output tokens")
    parser.add_argument("--output", default=None, metavar="JSON", help="write the result here")
    parser.add_argument("--settings", type=common.setting, nargs="+", default=SETTINGS,
                        metavar="BEAMxBATCH",
                        help="beam size x batch size (default: 1x1 4x1 1x32 4x32)")
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=ROWS,
                        help="which rows to run (default: all)")
    parser.add_argument("--repeats", type=common.positive_int, default=3, metavar="N",
                        help="timed passes per row, the rows taking turns; the table shows "
                             "their medians (default: 3)")
    parser.add_argument("--work-dir", default=None, metavar="DIR",
                        help="exports and worker logs (default: a temporary folder)")
    parser.add_argument("--worker", choices=ROWS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        common.serve(lambda: build_row(args.worker, args.model, args.threads,
                                       args.max_length, args.work_dir, args.data))
        return
    result = benchmark(args.model, args.sentences, args.threads, args.max_length, args.data,
                       rows=args.rows, work_dir=args.work_dir, settings=args.settings,
                       repeats=args.repeats)
    common.write_json(args.output, result)
    other = {label: info["threads"] for label, info in result["rows_info"].items()
             if info.get("threads", result["threads"]) != result["threads"]}
    print(f"{result['sentences']} test sentences of {result['model']}, {result['threads']} "
          "threads" + "".join(f" ({label}: {count}, faster in a probe)"
                              for label, count in other.items()) + ", no length penalty:\n")
    print(markdown(result))


if __name__ == "__main__":
    main()
