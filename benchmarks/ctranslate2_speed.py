"""Translation speed and BLEU of our decoding against CTranslate2 on the same trained model.

The protocol of CTranslate2's own README table, on this machine: the test split's
sentences, greedy search and beam 4 at batch 1 and 32 (`--settings`), a fixed number
of CPU threads (2 by default), target tokens/s (output pieces without the end token,
best hypothesis only) and sentences/s of the median of `--repeats` timed passes (3)
after a warm-up pass (XLA compiles each padded shape in the warm-up). Every row runs in
a worker process of its own (`common.Worker`: a Keras backend is fixed per process, so
rows on TensorFlow and JAX sit in one table), timed inside it (tokenizing, decoding,
detokenizing); the rows take turns in each round of passes, so the shared machine's
drift reaches them alike. A row that cannot start (JAX not installed, an option our
library lacks) is listed as skipped with its reason. Where two rows
give different translations, tokens/s credits the one with the longer outputs, and
sentences/s (the same sentences) compares the time. Every row sorts the sentences by
length into batches, as `Translator` and CTranslate2's `max_batch_size` do. Rows:

- ours, `kt.generate` compiled with XLA on TensorFlow (float32 compute, as CTranslate2
  float32: a model trained under mixed precision is decoded by a float32 copy in every
  float32 row of ours), and the same on JAX (`jax.jit`);
- the same with `shrink_batch=False`: every batch searched whole until its last
  sentence ends (how `generate` worked before it searched the last quarter again in a
  smaller batch);
- ours through the exported SavedModel (`export_saved_model`, XLA inside);
- ours in int8: `Translator.from_directory(..., quantization="int8")` (XLA);
- CTranslate2 float32 and int8 (`export_ctranslate2`, `quantization="int8"`);
- KerasHub's `GreedySampler` / `BeamSampler` (XLA) on the KerasHub-layers model holding
  our weights (`keras_hub_baseline.keras_hub_copy_of`: the same logits), which runs the
  whole decoder over the prompt at every step, as the keras.io recipe does;
- the same samplers with KerasHub's key/value cache (`TransformerDecoder`'s
  `self_attention_cache`, wired as KerasHub's BART does; `sampler_search(cached=True)`).

All rows decode alike: no length penalty (ours `alpha=0`, CTranslate2
`length_penalty=0`; their penalties differ, see the export guide), at most
`min(longest source of the batch + 50, --max-length)` output tokens (our rule, given to
CTranslate2 batch by batch as `max_decoding_length`), the end token allowed from the
first step, padding and the start token never generated. So the float32 rows should
give the same strings; the `same as ours` column counts the sentences whose translation
equals ours (TensorFlow, XLA, float32). BLEU is sacrebleu's against the references.

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

from common import (  # noqa: E402  (re-exported: decoding_profile.py and the tests use them)
    Row,
    Worker,
    WorkerError,
    batches_by_length,
    fix_threads,
    float32_model,
    machine,
    median_pass,
    padded_sources,
    positive_int,
    serve,
    setting,
    strings_and_count,
    table,
    test_pairs,
    time,
    timed,
    translate_all,
    worker_rounds,
)

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
# (beam size, batch size): greedy and beam 4 at batch 1 and 32
SETTINGS = ((1, 1), (4, 1), (1, 32), (4, 32))
__all__ = ["batches_by_length", "median_pass", "positive_int", "setting", "timed",
           "translate_all", "time"]


# --- the rows (each in its worker) -----------------------------------------------------


def our_runner(translator, beam_size, max_length, shrink_batch=True):
    """`translate(sentences) -> (strings, target tokens of each)` with `generate` on the
    translator's model (`Translator._generate`: its own tokenizing and padding)."""
    method = "greedy" if beam_size == 1 else "beam"

    def translate(sentences):
        out = translator._generate(translator.tokenize(sentences), method, dict(
            beam_size=beam_size, alpha=0.0, max_length=max_length, shrink_batch=shrink_batch))
        return strings_and_count(translator.tokenizer, out["token_ids"])

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
        ids = padded_sources(tokenizer, sentences, max_sequence_length)
        width = round_up(ids.shape[1], 16)  # as ours, to bound the compiled shapes
        ids = np.pad(ids, [(0, 0), (0, width - ids.shape[1])], constant_values=PAD_ID)
        longest = int(np.max(np.sum(ids != PAD_ID, axis=1)))
        limit = min(longest + MAX_LENGTH_OFFSET, max_length)
        return strings_and_count(tokenizer, search(ids, limit + 1))  # + the start token

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

    from keras_transformer.generation.search_input import MAX_LENGTH_OFFSET

    translator = ctranslate2.Translator(path, device="cpu", inter_threads=1,
                                        intra_threads=threads)
    processor = tokenizer._processor
    options = dict(beam_size=beam_size, length_penalty=0.0, min_decoding_length=0,
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


def build_row(row, model_dir, threads, max_length, work_dir):
    """A worker's `common.Row` for `row` (a key of `LABELS`): loads what it decodes with
    once; each beam size's runner is made on its first pass (the warm-up)."""
    fix_threads("jax" if row == "ours_jax" else "tensorflow", threads)
    from keras_transformer.generation import Translator

    options = {"quantization": "int8"} if row == "ours_int8" else {}
    loaded = Translator.from_directory(model_dir, method="greedy", **options)
    tokenizer = loaded.tokenizer
    limit = loaded.max_sequence_length or 128
    translator = loaded if row == "ours_int8" else Translator(
        float32_model(loaded.model), tokenizer, max_sequence_length=limit)
    hub = keras_hub_model(translator.model) if row.startswith("keras_hub") else None
    ct2_path = None
    if row.startswith("ct2_"):
        from keras_transformer.export import export_ctranslate2

        ct2_path = export_ctranslate2(model_dir, os.path.join(work_dir, row),
                                      quantization="int8" if row == "ct2_int8" else None,
                                      force=True)
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

    return Row(decode, lengths=lambda sentences: [
        len(ids) for ids in tokenizer.encode_as_ids(sentences)],
        info={"backend": keras.backend.backend()})


# --- the driver -------------------------------------------------------------------------


def start_workers(rows, model_dir, threads, max_length, work_dir):
    """A started `Worker` per row that can run here (label -> worker), and the reason of
    each row that cannot (label -> reason)."""
    workers, skipped = {}, {}
    for row in rows:
        needs = {"ours_jax": "jax", "ct2_float32": "ctranslate2", "ct2_int8": "ctranslate2",
                 "keras_hub": "keras_hub", "keras_hub_cached": "keras_hub"}.get(row)
        if needs and importlib.util.find_spec(needs) is None:
            skipped[LABELS[row]] = f"{needs} is not importable"
            continue
        command = [sys.executable, os.path.abspath(__file__), "--worker", row, "--model",
                   model_dir, "--threads", str(threads), "--max-length", str(max_length),
                   "--work-dir", work_dir]
        workers[LABELS[row]] = Worker(
            LABELS[row], command, os.path.join(work_dir, f"{row}.log"),
            env={"KERAS_BACKEND": "jax" if row == "ours_jax" else "tensorflow"})
    return workers, skipped


def benchmark(model_dir, sentences=None, threads=2, max_length=128, data=None, rows=ROWS,
              work_dir=None, settings=SETTINGS, repeats=3):
    """The table's rows (`rows` picks them) for each `(beam size, batch size)` of
    `settings`, on the first `sentences` pairs of `data` (a TSV; default: the test split
    of the data folder that config.json names); each row's speeds are the medians of
    `repeats` timed passes, the rows in worker processes taking turns."""
    from keras_transformer.evaluation import score_translations

    sources, references = test_pairs(model_dir, sentences, data)
    work_dir = work_dir or tempfile.mkdtemp(prefix="ct2-bench-")
    os.makedirs(work_dir, exist_ok=True)
    workers, skipped = start_workers(rows, model_dir, threads, max_length, work_dir)
    info, lengths, results = {}, None, []
    try:
        for label, worker in list(workers.items()):  # they load in parallel
            try:
                info[label] = worker.receive()
                answer = worker.call(sources=sources)
                lengths = lengths or answer.get("lengths")
            except WorkerError as error:
                skipped[label] = error.reason
                workers.pop(label).close()
        for beam_size, batch_size in settings:
            name = ("greedy" if beam_size == 1 else f"beam {beam_size}", batch_size)
            here = {label: worker for label, worker in workers.items()
                    if not (label == WHOLE_BATCH and batch_size == 1)}
            if not here:
                break
            message = {"beam_size": beam_size,
                       "batches": batches_by_length(lengths, batch_size)}
            errors = {}
            seconds, outputs = worker_rounds(here, message, repeats,
                                             name=f"{name[0]} b{batch_size}", errors=errors)
            for label, error in errors.items():
                skipped[label] = error
                workers.pop(label)
            ours = [text for text, _ in outputs[OURS]] if OURS in outputs else None
            for label, times in seconds.items():
                strings = [text for text, _ in outputs[label]]
                tokens = sum(count for _, count in outputs[label])
                middle = median_pass(times)
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
                print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        for worker in workers.values():
            worker.close()
    return {"model": model_dir, "sentences": len(sources), "threads": threads,
            "max_length": max_length, "repeats": repeats, "machine": machine(),
            "rows_info": info, "skipped": skipped, "rows": results}


def markdown(result):
    """The table of `benchmark`'s result, the skipped rows under it.

    Example:
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
    lines = table(["decoding", "batch", "method", "tokens/s", "sentences/s",
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
    parser.add_argument("--settings", type=setting, nargs="+", default=SETTINGS,
                        metavar="BEAMxBATCH",
                        help="beam size x batch size (default: 1x1 4x1 1x32 4x32)")
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=ROWS,
                        help="which rows to run (default: all)")
    parser.add_argument("--repeats", type=positive_int, default=3, metavar="N",
                        help="timed passes per row, the rows taking turns; the table shows "
                             "their medians (default: 3)")
    parser.add_argument("--work-dir", default=None, metavar="DIR",
                        help="exports and worker logs (default: a temporary folder)")
    parser.add_argument("--worker", choices=ROWS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        serve(lambda: build_row(args.worker, args.model, args.threads, args.max_length,
                                args.work_dir))
        return
    result = benchmark(args.model, args.sentences, args.threads, args.max_length, args.data,
                       rows=args.rows, work_dir=args.work_dir, settings=args.settings,
                       repeats=args.repeats)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            json.dump(result, file, indent=2)
    print(f"{result['sentences']} test sentences of {result['model']}, {result['threads']} "
          "threads, no length penalty:\n")
    print(markdown(result))


if __name__ == "__main__":
    main()
