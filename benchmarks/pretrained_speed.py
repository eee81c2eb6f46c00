"""Decoding speed of an OPUS-MT-size Marian model: ours against `transformers` and CTranslate2.

A random `MarianMTModel` of OPUS-MT's size (d_model 512, 6+6 layers, a 58,101-entry
vocabulary padded with synthetic pieces), written by the importer tests' fixture; rows:
ours on TensorFlow (XLA), JAX (jit) and PyTorch (eager) from `import_marian`'s folder (the
goals take the fastest), `transformers`' `generate`, and CTranslate2 float32 from its own
converter. Greedy at batch 1 and beam 4 at batch 32 (`--settings`) on the same synthetic
sources and batches, at most `--max-length` new tokens, length penalty 1, no forced end
token, `shrink_batch=False` (a random model's outputs all run to the limit). Each row runs
in a worker process (`common.Worker`) on `--threads` threads: a warm-up pass, then
`--repeats` interleaved rounds; the table shows each row's median pass and how many outputs
equal `generate`'s. Protocol and figures: docs/guides/pretrained.md.

    nice -n 10 python benchmarks/pretrained_speed.py --output runs/pretrained_speed.json
"""

import argparse
import datetime
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

OUR_ROWS = {"tensorflow": "ours, TensorFlow (XLA)", "jax": "ours, JAX (jit)",
            "torch": "ours, PyTorch (eager)"}
TRANSFORMERS = "transformers generate"
CT2 = "CTranslate2 float32"
ROWS = {**OUR_ROWS, "transformers": TRANSFORMERS, "ctranslate2": CT2}
SETTINGS = ((1, 1), (4, 32))  # (beam size, batch size)
LENGTH_PENALTY = 1.0  # Hugging Face's default, OPUS-MT's generation configs keep it
OPUS_MT_VOCABULARY = 58101  # opus-mt-de-en's vocab_size


GOAL = 2.0  # ours / transformers


def build_snapshot(folder, hidden_dim=512, layers=6, heads=8, ffn=2048,
                   vocabulary_size=OPUS_MT_VOCABULARY, seed=0):
    """A random OPUS-MT snapshot of this size in `folder` (the fixture's, its vocabulary
    padded with synthetic pieces to `vocabulary_size`); returns the vocabulary size."""
    sys.path.insert(0, common.ROOT)
    from tests.importers.marian_fixtures import (
        ENGLISH_SENTENCES,
        GERMAN_SENTENCES,
        spm_pieces,
        train_spm,
        write_marian_snapshot,
    )

    # The fixture's own vocabulary: both spm models' pieces, `</s>`, `<unk>` and `<pad>`.
    pieces = set(spm_pieces(train_spm(GERMAN_SENTENCES)) + spm_pieces(train_spm(ENGLISH_SENTENCES)))
    size = max(vocabulary_size, len(pieces) + 3)
    write_marian_snapshot(folder, shared=True, seed=seed, d_model=hidden_dim, layers=layers,
                          heads=heads, ffn=ffn, max_positions=512, vocab_size=size,
                          decoder_vocab_size=size, pad_token_id=size - 1,
                          decoder_start_token_id=size - 1)
    path = os.path.join(folder, "vocab.json")
    with open(path, encoding="utf-8") as file:
        vocabulary = json.load(file)
    del vocabulary["<pad>"]
    for number in range(size - 1 - len(vocabulary)):
        vocabulary[f"\u2581synthetic{number}"] = len(vocabulary)
    vocabulary["<pad>"] = size - 1
    with open(path, "w", encoding="utf-8") as file:
        json.dump(vocabulary, file, ensure_ascii=False)
    path = os.path.join(folder, "generation_config.json")
    with open(path, encoding="utf-8") as file:
        generation = json.load(file)
    generation.update(pad_token_id=size - 1, decoder_start_token_id=size - 1,
                      bad_words_ids=[[size - 1]])
    with open(path, "w", encoding="utf-8") as file:
        json.dump(generation, file, indent=2)
    return size


def source_sentences(count, seed=7):
    """`count` German-like sources: 1 or 2 of the fixture's sentences each."""
    import random

    sys.path.insert(0, common.ROOT)
    from tests.importers.marian_fixtures import GERMAN_WORDS, synthetic_sentences

    parts = synthetic_sentences(GERMAN_WORDS, 2 * count, seed)
    rng = random.Random(seed)
    return [" ".join(parts[2 * i : 2 * i + rng.randint(1, 2)]) for i in range(count)]


def ours_decoder(snapshot, model_dir, shrink_batch=False):
    """Our `generate` on the running backend: Marian id lists in and out."""
    import numpy as np

    from keras_transformer.data.marian_tokenizer import MarianTokenizer
    from keras_transformer.generation import Translator, generate
    from keras_transformer.special_tokens import END_ID, PAD_ID

    translator = Translator.from_directory(model_dir)
    orders = MarianTokenizer.from_snapshot(snapshot)
    source = {marian: ours for ours, marian in reversed(list(enumerate(orders.source_order)))}
    target = np.asarray(orders.target_order)
    defaults = dict(translator.generate_options)
    for name in ("method", "beam_size", "max_length", "max_length_offset", "force_end"):
        defaults.pop(name, None)

    def decode(batch, beam_size, max_length):
        out = generate(translator.model, common.padded(batch, PAD_ID),
                       "greedy" if beam_size == 1 else "beam", beam_size=beam_size,
                       max_length=max_length, max_length_offset=max_length, force_end=False,
                       shrink_batch=shrink_batch, **defaults)
        return [[int(target[i]) for i in row if i not in (PAD_ID, END_ID)]
                for row in out["token_ids"]]

    return common.Row(decode, lambda ids: [source[i] for i in ids],
                      info={"generate_options": {**defaults, "shrink_batch": shrink_batch}})


def transformers_decoder(snapshot):
    """The same for `MarianMTModel.generate`."""
    import torch
    import transformers

    model = transformers.MarianMTModel.from_pretrained(snapshot).eval()
    config = model.config
    pad, eos = config.pad_token_id, config.eos_token_id
    # No forced end token. `generate` fills what a `GenerationConfig` leaves unset from
    # the model's own, so that one is changed.
    model.generation_config.forced_eos_token_id = None
    model.generation_config.max_length = None

    @functools.cache
    def settings(beam_size, max_length):
        generation = model.generation_config.to_dict()
        generation.update(num_beams=beam_size, do_sample=False, max_new_tokens=max_length,
                          length_penalty=LENGTH_PENALTY, bad_words_ids=[[pad]],
                          early_stopping=True if beam_size > 1 else None)
        return transformers.GenerationConfig(**generation)

    def decode(batch, beam_size, max_length):
        ids = torch.from_numpy(common.padded(batch, pad)).long()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=(ids != pad).long(),
                                 generation_config=settings(beam_size, max_length))
        return [[int(i) for i in row[1:] if i not in (pad, eos)] for row in out.tolist()]

    return common.Row(decode, list,
                      info={"attention": getattr(config, "_attn_implementation", None)})


def ctranslate2_decoder(snapshot, ct2_dir, threads):
    """The same for CTranslate2 float32 (pieces in and out, mapped from Marian ids)."""
    import ctranslate2

    with open(os.path.join(snapshot, "vocab.json"), encoding="utf-8") as file:
        vocabulary = json.load(file)
    pieces = {marian: piece for piece, marian in vocabulary.items()}
    translator = ctranslate2.Translator(ct2_dir, device="cpu", compute_type="float32",
                                        inter_threads=1, intra_threads=threads)

    def decode(batch, beam_size, max_length):
        results = translator.translate_batch(
            batch, beam_size=beam_size, length_penalty=LENGTH_PENALTY,
            max_decoding_length=max_length, max_input_length=0)
        return [[vocabulary[piece] for piece in result.hypotheses[0]] for result in results]

    return common.Row(decode, lambda ids: [pieces[i] for i in ids],
                      info={"compute_type": "float32"})


VERSIONS = {"tensorflow": ["keras", "tensorflow"], "jax": ["keras", "jax", "jaxlib"],
            "torch": ["keras", "torch"], "transformers": ["transformers", "torch"],
            "ctranslate2": ["ctranslate2"]}


def build_row(row, snapshot, model_dir, ct2_dir, threads, shrink_batch=False):
    """A row's worker (`common.serve`)."""
    common.fix_threads({"transformers": "torch", "ctranslate2": None}.get(row, row), threads)
    if row in OUR_ROWS:
        served = ours_decoder(snapshot, model_dir, shrink_batch)
    elif row == "transformers":
        served = transformers_decoder(snapshot)
    else:
        served = ctranslate2_decoder(snapshot, ct2_dir, threads)
    served.info["versions"] = common.versions(VERSIONS[row])
    return served


def prepare_models(work_dir, args):
    """The snapshot, our import and CTranslate2's conversion in `work_dir` (reused for the
    same sizes): `(snapshot, ours, ct2, sizes)`."""
    sizes = {"hidden_dim": args.hidden_dim, "layers": args.layers, "heads": args.heads,
             "ffn": args.ffn or 4 * args.hidden_dim, "vocabulary_size": args.vocabulary_size,
             "seed": 0}
    snapshot, ours, ct2 = (os.path.join(work_dir, name)
                           for name in ("snapshot", "ours", "ctranslate2"))
    spec_path = os.path.join(work_dir, "sizes.json")
    if os.path.exists(spec_path):
        with open(spec_path) as file:
            spec = json.load(file)
        if spec.get("requested") == sizes and all(map(os.path.isdir, (snapshot, ours, ct2))):
            return snapshot, ours, ct2, spec
    for folder in (snapshot, ours, ct2):
        shutil.rmtree(folder, ignore_errors=True)
    started = time.perf_counter()
    vocabulary = build_snapshot(snapshot, sizes["hidden_dim"], sizes["layers"],
                                sizes["heads"], sizes["ffn"], sizes["vocabulary_size"])
    env = {**os.environ, "KERAS_BACKEND": "torch", "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": os.pathsep.join(filter(None, [common.ROOT,
                                                       os.environ.get("PYTHONPATH")]))}
    code = ("import sys; from keras_transformer.importers import import_marian; "
            "import_marian(sys.argv[1], sys.argv[2])")
    convert = ("import sys, ctranslate2; ctranslate2.converters.TransformersConverter("
               "sys.argv[1]).convert(sys.argv[2], force=True)")
    processes = [subprocess.Popen([sys.executable, "-c", source, snapshot, target], env=env,
                                  stdout=subprocess.DEVNULL)  # both at once
                 for source, target in ((code, ours), (convert, ct2))]
    for process in processes:
        if process.wait():
            raise RuntimeError(f"{process.args[:3]} failed (exit status {process.returncode})")
    spec = {"requested": sizes, **sizes, "vocabulary_size": vocabulary,
            "preparation_seconds": round(time.perf_counter() - started, 1)}
    with open(spec_path, "w") as file:
        json.dump(spec, file)
    return snapshot, ours, ct2, spec


def sentence_counts(sentences, settings):
    """`--sentences`: one count for every setting, or one per setting.

    >>> sentence_counts([64], [(1, 1), (4, 32)]), sentence_counts([16, 32], [(1, 1), (4, 32)])
    ([64, 64], [16, 32])
    """
    if len(sentences) == 1:
        return list(sentences) * len(settings)
    if len(sentences) != len(settings):
        raise SystemExit(f"--sentences: give one count, or one per setting ({len(settings)}); "
                         f"received {len(sentences)}")
    return list(sentences)


def run_benchmark(args):
    """Build the models, start the workers, run the rounds; the result as a dict."""
    import transformers

    work_dir = args.work_dir or tempfile.mkdtemp(prefix="pretrained-speed-")
    os.makedirs(work_dir, exist_ok=True)
    snapshot, ours_dir, ct2_dir, sizes = prepare_models(work_dir, args)
    common.log(f"models ready in {work_dir}: {json.dumps(sizes)}")
    counts = sentence_counts(args.sentences, args.settings)
    sentences = source_sentences(max(counts))
    tokenizer = transformers.MarianTokenizer.from_pretrained(snapshot)
    sources = [list(ids) for ids in tokenizer(sentences)["input_ids"]]  # end token included

    workers, info = {}, {}
    load = os.getloadavg()
    started = time.perf_counter()
    try:
        for row in args.backends:  # loading in parallel; the timed passes never are
            command = [sys.executable, os.path.abspath(__file__), "--worker", row,
                       "--snapshot", snapshot, "--model-dir", ours_dir, "--ct2-dir", ct2_dir,
                       "--threads", str(args.threads)] + ["--shrink-batch"] * args.shrink_batch
            workers[row] = common.Worker(
                ROWS[row], command, os.path.join(work_dir, f"{row}.log"),
                env={"KERAS_BACKEND": row if row in OUR_ROWS else "torch"})
        for row, process in workers.items():
            info[ROWS[row]] = process.receive()
            info[ROWS[row]].pop("ready")
            process.call(sources=sources)
        common.log(f"workers ready after {time.perf_counter() - started:.1f} s")
        rows = []
        for (beam_size, batch_size), count in zip(args.settings, counts, strict=True):
            lengths = [len(ids) for ids in sources[:count]]
            batches = common.batches_by_length(lengths, batch_size)
            message = {"beam_size": beam_size, "max_length": args.max_length,
                       "batches": batches}
            seconds, outputs = common.worker_rounds(
                workers, message, args.repeats, name=common.setting_name(beam_size, batch_size),
                warm_up={**message, "batches": common.warm_up_batches(batches, lengths)})
            outputs = {row: ids[:count] for row, ids in outputs.items()}
            rows += setting_rows(beam_size, batch_size, seconds, outputs, count)
    finally:
        for process in workers.values():
            process.close()
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": common.machine(), "threads": args.threads,
        "sentences": {common.setting_name(*pair): count
                      for pair, count in zip(args.settings, counts, strict=True)},
        "source_pieces": {"min": min(map(len, sources)), "max": max(map(len, sources))},
        "max_length": args.max_length, "repeats": args.repeats,
        "model": {key: sizes[key] for key in ("hidden_dim", "layers", "heads", "ffn",
                                              "vocabulary_size")},
        "load_average": {"start": [round(x, 2) for x in load],
                         "end": [round(x, 2) for x in os.getloadavg()]},
        "seconds": round(time.perf_counter() - started, 1),
        "work_dir": work_dir, "rows_info": info, "rows": rows, "goals": goals(rows),
    }


def setting_rows(beam_size, batch_size, seconds, outputs, sentences):
    """A setting's table rows: each row's median pass, against `transformers`'."""
    significant = common.significant
    rows = []
    reference = outputs.get("transformers")
    base = seconds.get("transformers")
    base = base[common.median_pass(base)] if base else None
    for row, times in seconds.items():
        median = times[common.median_pass(times)]
        tokens = sum(map(len, outputs[row]))
        entry = {"setting": common.setting_name(beam_size, batch_size),
                 "beam_size": beam_size, "batch_size": batch_size, "sentences": sentences,
                 "row": row, "method": ROWS[row], "seconds": significant(median),
                 "seconds_runs": list(map(significant, times)), "output_tokens": tokens,
                 "tokens_per_second": significant(tokens / median),
                 "sentences_per_second": significant(sentences / median)}
        if base is not None:
            entry["vs_transformers"] = significant(base / median)
            entry["same_as_transformers"] = round(sum(
                a == b for a, b in zip(outputs[row], reference, strict=True)) / sentences, 4)
        rows.append(entry)
    return rows


def goals(rows):
    """Per setting: the fastest of ours against `transformers` (the goal) and CTranslate2,
    as ratios of the median passes' times."""
    lines = []
    for name in dict.fromkeys(row["setting"] for row in rows):
        here = {row["row"]: row for row in rows if row["setting"] == name}
        ours = [here[row] for row in OUR_ROWS if row in here]
        if not ours:
            continue
        best = min(ours, key=lambda row: row["seconds"])
        entry = {"setting": name, "fastest_ours": best["method"]}
        if "transformers" in here:
            ratio = here["transformers"]["seconds"] / best["seconds"]
            met = "met" if ratio >= GOAL else "missed"
            entry.update(vs_transformers=common.significant(ratio), met=ratio >= GOAL,
                         line=f"ours ≥ {GOAL:g}x transformers ({name}): {met} ({ratio:.2f})")
        if "ctranslate2" in here:
            ratio = here["ctranslate2"]["seconds"] / best["seconds"]
            entry["vs_ctranslate2"] = common.significant(ratio)
            entry["ctranslate2_line"] = (f"ours / CTranslate2 float32 ({name}): {ratio:.2f} "
                                         f"({best['method']})")
        lines.append(entry)
    return lines


def markdown(result):
    """The setup, the table, then the goal lines."""
    cpu, model = result["machine"], result["model"]
    lines = [
        f"Random Marian, d_model {model['hidden_dim']}, {model['layers']}+{model['layers']} "
        f"layers, {model['heads']} heads, FF {model['ffn']}, vocabulary "
        f"{model['vocabulary_size']:,}; synthetic sources of "
        f"{result['source_pieces']['min']}-{result['source_pieces']['max']} pieces, "
        f"at most {result['max_length']} new tokens, {result['threads']} threads, median of "
        f"{result['repeats']} interleaved passes.",
        f"CPU: {cpu['cpu']} ({cpu['cores']} CPUs; avx512_bf16: "
        f"{'yes' if cpu['avx512_bf16'] else 'no'}, avx512f: "
        f"{'yes' if cpu['avx512f'] else 'no'}); load average at the start "
        f"{result['load_average']['start'][0]:.2f}; {result['date']}",
        "",
    ]
    lines += common.table(
        ["setting", "sentences", "method", "tokens/s", "sentences/s", "vs transformers",
         "same as transformers", "output tokens"],
        [[row["setting"], row["sentences"], row["method"], f"{row['tokens_per_second']:,.1f}",
          f"{row['sentences_per_second']:,.3f}",
          "n/a" if row.get("vs_transformers") is None else f"{row['vs_transformers']:.2f}x",
          "n/a" if row.get("same_as_transformers") is None
          else f"{100 * row['same_as_transformers']:.1f}%", f"{row['output_tokens']:,}"]
         for row in result["rows"]])
    lines.append("")
    for goal in result["goals"]:
        lines += [goal[key] for key in ("line", "ctranslate2_line") if key in goal]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--hidden-dim", type=common.positive_int, default=512)
    add("--layers", type=common.positive_int, default=6, help="encoder and decoder")
    add("--heads", type=common.positive_int, default=8)
    add("--ffn", type=common.positive_int, default=None, help="default: 4 x hidden dim")
    add("--vocabulary-size", type=common.positive_int, default=OPUS_MT_VOCABULARY)
    add("--sentences", type=common.positive_int, nargs="+", default=[64], metavar="N",
        help="sources per setting: one count for all, or one per setting (default: 64)")
    add("--max-length", type=common.positive_int, default=64, help="most new tokens")
    add("--threads", type=common.positive_int, default=2)
    add("--settings", type=common.setting, nargs="+", default=SETTINGS, metavar="BEAMxBATCH",
        help="beam size x batch size (default: 1x1 4x32)")
    add("--backends", nargs="+", choices=list(ROWS), default=list(ROWS), help="the rows")
    add("--repeats", type=common.positive_int, default=3, metavar="N", help="timed rounds")
    add("--shrink-batch", action="store_true",
        help="ours: generate's default shrink_batch=True (a short first search, wasted when "
             "every output runs to the limit)")
    add("--work-dir", default=None, metavar="DIR",
        help="the models, reused by a later run of the same sizes (default: a temporary one)")
    add("--output", default=None, metavar="JSON", help="write the result here")
    for hidden in ("--worker", "--snapshot", "--model-dir", "--ct2-dir"):
        add(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        common.serve(lambda: build_row(args.worker, args.snapshot, args.model_dir,
                                       args.ct2_dir, args.threads, args.shrink_batch))
        return
    result = run_benchmark(args)
    common.write_json(args.output, result)
    print(markdown(result))


if __name__ == "__main__":
    main()
