"""Translation speed and BLEU of our decoding against CTranslate2 on the same trained model.

The protocol of CTranslate2's own README table, on this machine: the test split's
sentences, greedy search at batch 1 and beam 4 at batch 32, a fixed number of CPU
threads (2 by default), target tokens/s (output pieces without the end token, best
hypothesis only) and sentences/s of the median of `--repeats` timed passes (3) after
a warm-up pass (XLA compiles each padded shape in the warm-up); the rows take turns in
each round of passes, so the shared machine's drift reaches them alike. Where two rows
give different translations, tokens/s credits the one with the longer outputs, and
sentences/s (the same sentences) compares the time. Every row sorts the sentences by
length into batches, as `Translator` and CTranslate2's `max_batch_size` do. Rows:

- ours, `kt.generate` compiled with XLA (float32 compute, as CTranslate2 float32: a
  model trained under mixed precision is decoded by a float32 copy in every row of ours);
- the same with `shrink_batch=False`: every batch searched whole until its last
  sentence ends (how `generate` worked before it searched the last quarter again in a
  smaller batch);
- ours through the exported SavedModel (`export_saved_model`, XLA inside);
- ours after Keras's post-training `model.quantize("int8")` (XLA);
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
equals ours (XLA, same decoding). BLEU is sacrebleu's against the references.

    python benchmarks/ctranslate2_speed.py --model runs/demo/model --sentences 200
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

OURS = "ours, XLA"
KERAS_HUB_CACHED = "KerasHub sampler, cached, XLA"
CT2_FLOAT32 = "CTranslate2 float32"


def float32_model(model):
    """`model` with float32 compute (a model trained under mixed precision), same weights.

    The layers' policies tell: a loaded mixed-precision model reports `float32` at the top.
    """
    import keras_transformer as kt

    layers = [model.token_embedding, *model.encoder_blocks, *model.decoder_blocks]
    if all(layer.dtype_policy.name == "float32" for layer in layers):
        return model
    copy = kt.Transformer.from_config({**model.get_config(), "dtype": "float32"})
    copy.set_weights(model.get_weights())
    return copy


def batches_by_length(lengths, batch_size):
    """Sentence indices sorted by length, longest first, in batches of `batch_size`."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def translate_all(translate, sources, batches):
    """One pass of `translate(batch) -> (strings, token counts)` over `batches` (lists of
    indices into `sources`): `(strings in input order, target tokens, seconds)`."""
    strings, tokens, start = [None] * len(sources), 0, time.perf_counter()
    for batch in batches:
        out, counts = translate([sources[i] for i in batch])
        tokens += counts
        for i, text in zip(batch, out, strict=True):
            strings[i] = text
    return strings, tokens, time.perf_counter() - start


def timed(runners, sources, batch_size, lengths, repeats=3):
    """Run every `translate(batch) -> (strings, token counts)` of `runners` (label ->
    function) over length-sorted batches: one warm-up pass each (XLA compiles every padded
    shape there), then `repeats` timed passes, the rows interleaved in each round (in a
    rotated order), so that the machine's drift reaches every row alike.

    Returns label -> `(strings in input order, tokens/s of each timed pass, seconds of
    each timed pass)`.
    """
    batches = batches_by_length(lengths, batch_size)
    labels = list(runners)
    strings = {}
    speeds = {label: [] for label in labels}
    seconds = {label: [] for label in labels}
    for label in labels:
        translate_all(runners[label], sources, batches)
    for round_ in range(repeats):
        for label in labels[round_ % len(labels):] + labels[: round_ % len(labels)]:
            strings[label], tokens, elapsed = translate_all(runners[label], sources, batches)
            speeds[label].append(tokens / elapsed)
            seconds[label].append(elapsed)
    return {label: (strings[label], speeds[label], seconds[label]) for label in labels}


def median_pass(seconds):
    """The index of the median of the timed passes (the slower middle one of an even
    count), so that a row's tokens/s and sentences/s come from the same pass.

    Example:
    >>> median_pass([3.0, 1.0, 2.0]), median_pass([4.0, 1.0, 3.0, 2.0])
    (2, 2)
    """
    order = sorted(range(len(seconds)), key=seconds.__getitem__)
    return order[len(order) // 2]


def padded_sources(tokenizer, sentences, max_sequence_length):
    """Source ids `(B, S)`: pieces then the end token, padded to the longest."""
    from keras_transformer.special_tokens import PAD_ID, with_end

    ids = [with_end(row, max_sequence_length) for row in tokenizer.encode_as_ids(sentences)]
    padded = np.full((len(ids), max(map(len, ids))), PAD_ID, "int32")
    for row, values in enumerate(ids):
        padded[row, : len(values)] = values
    return padded


def strings_and_count(tokenizer, token_ids):
    """The detokenized outputs and their number of target tokens (no end, no padding)."""
    from keras_transformer.special_tokens import END_ID, PAD_ID

    count = int(np.sum((token_ids != PAD_ID) & (token_ids != END_ID)))
    return list(tokenizer.decode_ids(token_ids)), count


def our_runner(model, tokenizer, beam_size, max_length, max_sequence_length,
               shrink_batch=True):
    from keras_transformer.generation import generate

    method = "greedy" if beam_size == 1 else "beam"

    def translate(sentences):
        out = generate(model, padded_sources(tokenizer, sentences, max_sequence_length),
                       method, beam_size=beam_size, alpha=0.0, max_length=max_length,
                       shrink_batch=shrink_batch)
        return strings_and_count(tokenizer, out["token_ids"])

    return translate


def keras_hub_runner(copy, tokenizer, beam_size, max_length, max_sequence_length,
                     cached=False):
    """KerasHub's sampler on `copy` (`keras_hub_copy_of`), with our limit as the prompt;
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


def saved_model_runner(path):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    from keras_transformer.special_tokens import END_ID, PAD_ID

    serve = tf.saved_model.load(path).signatures["serving_default"]

    def translate(sentences):
        out = serve(text=tf.constant(sentences))
        ids = out["token_ids"].numpy()
        count = int(np.sum((ids != PAD_ID) & (ids != END_ID)))
        return [text.decode("utf-8") for text in out["translation"].numpy()], count

    return translate


def ctranslate2_runner(path, tokenizer, beam_size, max_length, max_sequence_length, threads):
    import ctranslate2

    translator = ctranslate2.Translator(path, device="cpu", inter_threads=1,
                                        intra_threads=threads)
    from keras_transformer.generation.search_input import MAX_LENGTH_OFFSET

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
        return ([processor.decode_pieces(h) for h in hypotheses],
                sum(len(h) for h in hypotheses))

    return translate


ROWS = ("ours", "ours_whole_batch", "saved_model", "keras_int8", "ct2_float32", "ct2_int8",
        "keras_hub", "keras_hub_cached")


SETTINGS = ((1, 1), (4, 32))  # (beam size, batch size): CTranslate2's own protocol


def load_decoding_setup(model_dir, sentences=None, data=None, threads=2):
    """What every decoding row needs, loaded once: `(sources, references, source lengths in
    pieces, tokenizer, float32 model, max_sequence_length)` for the first `sentences` pairs
    of `data` (a TSV; default: the test split of the data folder config.json names), with
    TensorFlow's thread pools set to `threads`."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # TensorFlow already started (`benchmarks/run.py`): its threads
        print("warning: TensorFlow's thread pools were already set; ours use them",
              file=sys.stderr)

    from keras_transformer.data.corpora import load_tsv
    from keras_transformer.folders import CONFIG_FILE, TEST_FILE
    from keras_transformer.generation import Translator

    with open(os.path.join(model_dir, CONFIG_FILE)) as file:
        config = json.load(file)
    pairs = load_tsv(data or os.path.join(config["data_dir"], TEST_FILE))[:sentences]
    sources = [source for source, _ in pairs]
    references = [target for _, target in pairs]
    loaded = Translator.from_directory(model_dir)
    lengths = [len(ids) for ids in loaded.tokenizer.encode_as_ids(sources)]
    return (sources, references, lengths, loaded.tokenizer, float32_model(loaded.model),
            config.get("max_sequence_length", 128))


def benchmark(model_dir, sentences=None, threads=2, max_length=128, data=None, rows=ROWS,
              work_dir=None, settings=SETTINGS, repeats=3):
    """The table's rows (`rows` picks them) for each `(beam size, batch size)` of
    `settings`, on the first `sentences` pairs of `data` (a TSV; default: the test split
    of the data folder that config.json names); each row's speeds are the medians of
    `repeats` timed passes (see `timed`)."""
    import keras

    from keras_transformer.evaluation import score_translations
    from keras_transformer.export import export_ctranslate2, export_saved_model
    from keras_transformer.generation import Translator

    (sources, references, lengths, tokenizer, model,
     max_sequence_length) = load_decoding_setup(model_dir, sentences, data, threads)
    work_dir = work_dir or tempfile.mkdtemp(prefix="ct2-bench-")

    ct2_paths = {}
    for name, quantization in (("ct2_float32", None), ("ct2_int8", "int8")):
        if name in rows:
            ct2_paths[name] = export_ctranslate2(model_dir, os.path.join(work_dir, name),
                                                 quantization=quantization, force=True)
    int8_model = None
    if "keras_int8" in rows:  # a second copy: quantizing changes a model in place
        int8_model = float32_model(keras.models.load_model(
            os.path.join(model_dir, "model.keras")))
        int8_model.quantize("int8")
    hub_model = (keras_hub_model(model) if {"keras_hub", "keras_hub_cached"} & set(rows)
                 else None)

    results = []
    for beam_size, batch_size in settings:
        runners = {}
        if "ours" in rows:
            runners[OURS] = our_runner(model, tokenizer, beam_size, max_length,
                                       max_sequence_length)
        if "ours_whole_batch" in rows and batch_size > 1:
            runners["ours, XLA, whole batch"] = our_runner(
                model, tokenizer, beam_size, max_length, max_sequence_length,
                shrink_batch=False)
        if "saved_model" in rows:
            path = os.path.join(work_dir, f"saved_model_beam{beam_size}")
            translator = Translator(model, tokenizer, max_sequence_length=max_sequence_length)
            export_saved_model(translator, path, beam_size=beam_size, alpha=0.0,
                               max_length=max_length)
            runners["ours, SavedModel"] = saved_model_runner(path)
        if int8_model is not None:
            runners["ours, Keras int8 (XLA)"] = our_runner(
                int8_model, tokenizer, beam_size, max_length, max_sequence_length)
        for name, label in (("ct2_float32", CT2_FLOAT32),
                            ("ct2_int8", "CTranslate2 int8")):
            if name in ct2_paths:
                runners[label] = ctranslate2_runner(ct2_paths[name], tokenizer, beam_size,
                                                    max_length, max_sequence_length, threads)
        for name, label, cached in (("keras_hub", "KerasHub sampler, XLA", False),
                                    ("keras_hub_cached", KERAS_HUB_CACHED, True)):
            if name in rows:
                runners[label] = keras_hub_runner(hub_model, tokenizer, beam_size, max_length,
                                                  max_sequence_length, cached=cached)
        timings = timed(runners, sources, batch_size, lengths, repeats)
        ours = timings[OURS][0] if OURS in timings else None
        for label, (strings, speeds, seconds) in timings.items():
            middle = median_pass(seconds)
            row = {"decoding": "greedy" if beam_size == 1 else f"beam {beam_size}",
                   "batch_size": batch_size, "method": label,
                   "target_tokens_per_second": round(speeds[middle], 1),
                   "sentences_per_second": round(len(sources) / seconds[middle], 2),
                   "tokens_per_second_runs": [round(speed, 1) for speed in speeds],
                   "bleu": score_translations(strings, references)["bleu"]}
            if ours is not None:
                row["same_as_ours"] = round(
                    float(np.mean([a == b for a, b in zip(strings, ours, strict=True)])), 4)
            results.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return {"model": model_dir, "sentences": len(sources), "threads": threads,
            "max_length": max_length, "repeats": repeats, "rows": results}


def markdown(result):
    lines = ["| decoding | batch | method | tokens/s | sentences/s | vs CTranslate2 float32 "
             "| BLEU | same as ours |", "|---|---|---|---|---|---|---|---|"]
    reference = {(row["decoding"], row["batch_size"]): row["target_tokens_per_second"]
                 for row in result["rows"] if row["method"] == CT2_FLOAT32}
    for row in result["rows"]:
        base = reference.get((row["decoding"], row["batch_size"]))
        speed = row["target_tokens_per_second"]
        same = row.get("same_as_ours")
        sentences = row.get("sentences_per_second")
        lines.append(f"| {row['decoding']} | {row['batch_size']} | {row['method']} | "
                     f"{speed:,.1f} | {'' if sentences is None else f'{sentences:,.2f}'} | "
                     f"{f'{speed / base:.2f}x' if base else 'n/a'} | "
                     f"{row['bleu']:.2f} | {'' if same is None else f'{100 * same:.1f}%'} |")
    return "\n".join(lines)


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


def positive_int(text):
    """An int >= 1 for argparse, or an error that names the value."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


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
                        metavar="BEAMxBATCH", help="beam size x batch size (default: 1x1 4x32)")
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=ROWS,
                        help="which rows to run (default: all)")
    parser.add_argument("--repeats", type=positive_int, default=3, metavar="N",
                        help="timed passes per row, the rows taking turns; the table shows "
                             "their medians (default: 3)")
    args = parser.parse_args()
    result = benchmark(args.model, args.sentences, args.threads, args.max_length, args.data,
                       rows=args.rows, settings=args.settings, repeats=args.repeats)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            json.dump(result, file, indent=2)
    print(f"{result['sentences']} test sentences of {result['model']}, {result['threads']} "
          "threads, no length penalty:\n")
    print(markdown(result))


if __name__ == "__main__":
    main()
