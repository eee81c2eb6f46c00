"""`make bench`: every benchmark on this machine in one run, as JSON, markdown and one goals table.

Sections, each bounded in time but `quality` (two models trained to 2,000 steps, about two
hours on 2 cores): `peak` (`mfu.py`), `translation` (`generation_speed.py`), `ctranslate2`
(`ctranslate2_speed.py` on `--ct2-model`), `training` (`training_speed.py` and
`training_profile.py`, the whole split and the sentence pairs), `quality` and
`quality_minutes` (`quality.py`). Results go to `runs/bench/results.json` and `results.md`
and replace the part of `docs/results.md` between the bench markers; the goals of
`data_scale.py` and `pretrained_speed.py` (run alone) join the table where their JSON is.
With `--only`, the other sections are kept from the previous `results.json`.

    python benchmarks/run.py --minutes 12       # quality_minutes's training budget per model
    python benchmarks/run.py --only quality --quality-steps 500 1000 2000
"""

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import Goal, goals_table, machine, table, write_json  # noqa: E402
from ctranslate2_speed import CT2_FLOAT32, INT8, KERAS_HUB_CACHED, OURS, SAVED_MODEL  # noqa: E402
from quality import STEPS, check_milestones  # noqa: E402

SECTIONS = ("peak", "translation", "ctranslate2", "training", "quality", "quality_minutes")
PLOT = "quality_by_steps.png"  # under docs/images/
START, END = "<!-- bench:start -->", "<!-- bench:end -->"
UNCACHED = "uncached greedy (tutorial loop)"
LIBRARIES = ("tensorflow", "keras", "keras_hub")
PEAK_DTYPE = {"float32": "float32", "mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}


def run_section(name, args):
    if name == "training":
        from training_profile import benchmark as profile
        from training_speed import benchmark

        result = benchmark(args.data, args.preset, args.batches, args.passes,
                           minutes=args.section_minutes)
        # The demo's data: the sentence pairs alone make longer rows, fewer to a batch.
        result["sentence_pairs"] = benchmark(
            args.data, args.preset, args.batches, args.passes,
            minutes=args.section_minutes, sentences_only=True)
        # The same batches op by op: the measured reason of a row below 1.5x KerasHub.
        for part, sentences_only in ((result, False), (result["sentence_pairs"], True)):
            try:
                part["profile"] = profile(args.data, args.preset, args.batches,
                                          sentences_only=sentences_only)
            except Exception as error:  # the speed rows above are kept either way
                part["profile"] = {"runs": [], "error": f"{type(error).__name__}: {error}"}
        return result
    if name == "peak":
        from mfu import matmul_peak

        peaks = {dtype: matmul_peak(dtype) for dtype in ("float32", "bfloat16")}
        # What the XLA rows multiply with: XLA's own CPU kernel.
        return peaks | {f"{dtype} (XLA)": matmul_peak(dtype, jit_compile=True)
                        for dtype in ("float32", "bfloat16")}
    if name == "translation":
        from generation_speed import benchmark

        return benchmark(args.preset, minutes=args.section_minutes)
    if name == "ctranslate2":
        if not os.path.exists(os.path.join(args.ct2_model, "model.keras")):
            return {"error": f"skipped: no trained model in {args.ct2_model} (make demo)"}
        from ctranslate2_speed import ROWS, benchmark

        # Not the uncached KerasHub sampler: about half an hour alone at beam 4, batch 32.
        return benchmark(args.ct2_model, args.ct2_sentences,
                         rows=[row for row in ROWS if row != "keras_hub"])
    if name == "quality":
        from quality import benchmark_by_steps

        return benchmark_by_steps(args.quality_steps, args.data,
                                  os.path.join(args.output, "quality"))
    from quality import benchmark

    return benchmark(args.minutes, args.data, os.path.join(args.output, "quality_minutes"))


def _ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "n/a"


def _speed(runs, model, precision, jit_compile, batching="bucketed"):
    for run in runs:
        if (run.get("model"), run.get("precision"), run.get("jit_compile"),
                run.get("batching")) == (model, precision, jit_compile, batching):
            return run.get("target_tokens_per_second")
    return None


def _end_to_end(runs, precision):
    """Ours on our batches and the KerasHub recipe on its own, both without XLA."""
    return (_speed(runs, "ours", precision, False),
            _speed(runs, "keras_hub", precision, False, "recipe"))


def _padding_table(batching):
    return table(["batching", "batches", "padding efficiency"],
                  [[name, stats["batches"], f"{100 * stats['padding_efficiency']:.1f}%"]
                   for name, stats in batching.items()])


def _command(results, name):
    command = results.get("commands", {}).get(name)
    return [f"Command: `{command}`", ""] if command else []


PRODUCTS, LOSS, ATTENTION, ELSE = (
    "matrix products", "loss, other ops", "attention, other ops",
    "everything else (norms, dropout, activations, embeddings, optimizer, metrics)")


def _op_kinds(run):
    """A profiled run's op time per step (ms) in four kinds."""
    kinds = dict.fromkeys((PRODUCTS, LOSS, ATTENTION, ELSE), 0.0)
    for part, ms in run["by_part"].items():
        kind = (PRODUCTS if part.endswith(": matmul") else LOSS if part == "loss: other ops"
                else ATTENTION if part == "attention: other ops" else ELSE)
        kinds[kind] += ms
    return kinds


def _profile_table(profile):
    """Per-step op time of each (model, precision) by kind, from `training_profile.py`."""
    runs = [run for run in profile["runs"] if "error" not in run]
    rows = [["step, wall clock"] + [f"{run['step_ms']:,.0f}" for run in runs],
            ["all ops, summed"] + [f"{run['op_ms_per_step']:,.0f}" for run in runs]]
    rows += [[kind] + [f"{_op_kinds(run)[kind]:,.0f}" for run in runs]
             for kind in (PRODUCTS, LOSS, ATTENTION, ELSE)]
    return table([""] + [f"{run['model']}, {run['precision']}" for run in runs], rows)


def _below_reasons(runs, profile, peak=None):
    """One line per row of ours below 1.5x KerasHub, with its measured reason."""
    from training_profile import ceilings, floor_ms, products_and_loss

    bounds = ceilings(profile) if profile else {}
    raw = {(run["model"], run["precision"]): run
           for run in (profile or {}).get("runs", []) if "error" not in run}
    profiled = {key: _op_kinds(run) | {"all": run["op_ms_per_step"]} for key, run in raw.items()}
    lines = []
    for precision in ("float32", "mixed_bfloat16"):
        plain = (_speed(runs, "ours", precision, False),
                 _speed(runs, "keras_hub", precision, False))
        for jit in (False, True):
            ours, theirs = (_speed(runs, "ours", precision, jit),
                            _speed(runs, "keras_hub", precision, jit))
            if not (ours and theirs) or ours >= 1.5 * theirs:
                continue
            row = f"- {precision}{', XLA' if jit else ''}, {ours / theirs:.2f}x: "
            mine, other = profiled.get(("ours", precision)), profiled.get(("keras_hub", precision))
            if jit and all(plain):
                ours_gain, their_gain = ours / plain[0], theirs / plain[1]
                reason = (f"with XLA KerasHub runs at {their_gain:.2f}x its speed without, "
                          f"ours at {ours_gain:.2f}x")
                if their_gain > 1.02 * ours_gain:
                    reason += (". XLA fuses the element-wise and reduction work around the "
                               "products, which KerasHub's step has more of (attention, other "
                               f"ops, in the profile), so the {plain[0] / plain[1]:.2f}x "
                               f"without XLA becomes {plain[0] / plain[1]:.2f} x "
                               f"{ours_gain:.2f} / {their_gain:.2f}.")
                else:
                    reason += (": XLA changes both steps alike, so this row keeps the reason "
                               f"of the row without XLA ({plain[0] / plain[1]:.2f}x).")
                lines.append(row + reason + _xla_peak_note(peak, PEAK_DTYPE.get(precision)))
            elif precision in bounds:
                bound = bounds[precision]
                ours_run, their_run = raw[("ours", precision)], raw[("keras_hub", precision)]
                own, floor = products_and_loss(ours_run), floor_ms(ours_run, their_run)
                if bound < 1.5:
                    reason = (f"even with nothing outside its matrix products and loss, and "
                              "those as fast as in the faster model (the same FLOPs), ours "
                              f"would be about {bound:.2f}x")
                else:
                    reason = (f"with nothing outside the products and loss, at the faster "
                              f"model's {floor:,.0f} ms, ours would be about {bound:.2f}x; "
                              f"1.5x leaves {max(other['all'] / 1.5 - floor, 0):,.0f} ms a step "
                              f"beyond that, and ours spends {mine['all'] - floor:,.0f}: "
                              f"{own - floor:,.0f} more in its products and loss, "
                              f"{mine[ATTENTION]:,.0f} in the attention's other ops and "
                              f"{mine[ELSE]:,.0f} in everything else (KerasHub: "
                              f"{other[ELSE]:,.0f})")
                lines.append(row + reason + " (the profile, op time summed per step).")
            else:
                lines.append(row + "no profile of these batches in this run.")
    return lines


def _xla_peak_note(peak, dtype):
    """XLA's matrix-product peak, where it is clearly below TensorFlow's kernel's."""
    compiled = (peak or {}).get(f"{dtype} (XLA)")
    if not compiled or dtype not in peak or compiled > 0.9 * peak[dtype]:
        return ""
    return (f" XLA's own CPU matrix product reaches {compiled / 1e9:,.0f} GFLOP/s "
            f"in {dtype}, TensorFlow's {peak[dtype] / 1e9:,.0f} (the peaks above): the same "
            "products take longer in both steps, which pulls the ratio toward 1.")


def _profile_markdown(runs, profile, peak=None):
    reasons = _below_reasons(runs, profile, peak)
    if not reasons:
        return []
    lines = ["", "Rows of ours below 1.5x KerasHub, and why (measured):", "", *reasons]
    if profile:
        lines += ["", "The same batches under TensorFlow's profiler, without XLA, one pass "
                  "(`training_profile.py`; ms per step; both cores run ops at once, so the "
                  "ops add up to more than the step):", "", *_profile_table(profile)]
    return lines


def training_markdown(training, peak):
    runs = training["runs"]
    per_token = training["flops_per_target_token"]
    lines = [
        "### Training throughput", "",
        f"Preset `{training['preset']}`, the same {training['batches']} batches of the Ding "
        f"training data ({training['sentences']} sentences, our token-budget bucketing at "
        f"{training['tokens_per_batch']} tokens a side) for every row but those of the recipe's "
        "batching (the first batches of the same sentences, 64 a batch, each padded to the "
        f"length limit {training['max_sequence_length']}, as the keras.io recipe does); "
        f"target (non-pad) tokens/s in steady state (the best of {training.get('passes', 1)} "
        "timed passes after a first pass that traces and compiles every shape). "
        f"Model FLOPs: {per_token / 1e6:.1f} M per target token "
        "(matmuls only, real tokens only, forward + backward; `benchmarks/mfu.py`). "
        "MFU is against the measured matmul peak of the same dtype. Peak memory is the "
        "process's maximum resident set; the next column subtracts the set before the "
        "model was built (TensorFlow, KerasHub and the batches).", "",
    ]
    rows = []
    for run in runs:
        if "error" in run:
            rows.append([run["model"], run["precision"], run["jit_compile"], run["batching"],
                         run["error"], "", "", "", "", ""])
            continue
        speed = run["target_tokens_per_second"]
        other = _speed(runs, "keras_hub", run["precision"], run["jit_compile"])
        versus = _ratio(speed, other) if run["model"] == "ours" else ""
        mfu = ""
        if peak and PEAK_DTYPE.get(run["precision"]) in peak:
            mfu = f"{100 * speed * per_token / peak[PEAK_DTYPE[run['precision']]]:.1f}%"
        rows.append([run["model"], run["precision"], run["jit_compile"], run["batching"],
                     f"{speed:,.0f}", versus, f"{run['first_pass_tokens_per_second']:,.0f}",
                     f"{run['peak_memory_mib']:,.0f}",
                     f"{run['peak_memory_mib'] - run.get('memory_before_training_mib', 0):,.0f}",
                     mfu])
    lines += table(["model", "precision", "jit_compile", "batches", "tokens/s",
                     "ours vs KerasHub", "first pass tokens/s", "peak MiB",
                     "of it training MiB", "MFU"], rows)
    levers = [(f"length bucketing (KerasHub model, {precision})",
               _speed(runs, "keras_hub", precision, False),
               _speed(runs, "keras_hub", precision, False, "recipe"))
              for precision in ("float32", "mixed_bfloat16")]
    levers += [(f"our model, same batches ({precision}, no XLA)",
                _speed(runs, "ours", precision, False),
                _speed(runs, "keras_hub", precision, False))
               for precision in ("float32", "mixed_bfloat16")]
    levers += [
        ("mixed_bfloat16 (ours, no XLA)", _speed(runs, "ours", "mixed_bfloat16", False),
         _speed(runs, "ours", "float32", False)),
        ("XLA (ours, float32)", _speed(runs, "ours", "float32", True),
         _speed(runs, "ours", "float32", False)),
        ("XLA (ours, mixed_bfloat16)", _speed(runs, "ours", "mixed_bfloat16", True),
         _speed(runs, "ours", "mixed_bfloat16", False)),
    ]
    levers += [(f"end to end, {precision}: ours (bucketed, no XLA) vs the recipe (its batching)",
                *_end_to_end(runs, precision)) for precision in ("float32", "mixed_bfloat16")]
    lines += ["", *table(["lever", "speed-up"],
                          [[name, _ratio(a, b)] for name, a, b in levers])]
    lines += _profile_markdown(runs, training.get("profile"), peak)
    if "distinct_shapes" in training:
        shapes = training["distinct_shapes"]
        lines += ["", f"XLA compiles once per batch shape: the first {shapes['batches']} "
                  f"batches of the stream have {shapes['shapes']} distinct `(B, S, T)` shapes, "
                  "so the first pass's compile cost is paid that many times per run."]
    lines += ["", "Padding efficiency (real tokens / all tokens, both sides) of the same "
              "sentences batched three ways:", ""]
    lines += _padding_table(training["batching"])
    sentences = training.get("sentence_pairs")
    if sentences:
        lines += ["", f"The batches above come from the whole training split, 96% dictionary "
                  f"words and phrases: about {training['sentences'] // training['batches']} "
                  "short rows a batch. The demo trains on the sentence pairs alone; the same "
                  f"comparison on {sentences['batches']} batches of them "
                  f"({sentences['sentences']} sentences, about "
                  f"{sentences['sentences'] // sentences['batches']} a batch):", ""]
        rows = []
        for run in sentences["runs"]:
            speed = run.get("target_tokens_per_second")
            batching = run.get("batching", "bucketed")
            other = _speed(sentences["runs"], "keras_hub", run["precision"], run["jit_compile"])
            ours, recipe = _end_to_end(sentences["runs"], run["precision"])
            rows.append([run["model"], run["precision"], run["jit_compile"], batching,
                         f"{speed:,.0f}" if speed else run.get("error", ""),
                         _ratio(speed, other) if run["model"] == "ours" else "",
                         _ratio(ours, recipe)
                         if run["model"] == "ours" and not run["jit_compile"] else ""])
        lines += table(["model", "precision", "jit_compile", "batches", "tokens/s",
                         "ours vs KerasHub, same batches", "ours vs the recipe's batching"],
                        rows)
        lines += _profile_markdown(sentences["runs"], sentences.get("profile"), peak)
        lines += ["", "Padding efficiency of these sentences:", ""]
        lines += _padding_table(sentences["batching"])
    return lines


def markdown(results):
    """The markdown report of a `results` dict (any subset of the sections)."""
    info = results.get("machine", {})
    lines = [f"Measured on {info.get('cpu', '?')} ({info.get('cores', '?')} "
             f"cores), TensorFlow {info.get('tensorflow', '?')}, Keras {info.get('keras', '?')},"
             f" KerasHub {info.get('keras_hub', '?')}, {info.get('date', '?')} (the last run); "
             "each section names the command that measured it (`make bench` runs them all).",
             ""]
    peak = results.get("peak")
    if peak:
        lines += ["Matmul peak of this machine (2048 x 2048 x 2048, best of 3 s): " + ", ".join(
            f"{dtype} {value / 1e9:,.0f} GFLOP/s" for dtype, value in peak.items()) + ".", ""]
    if "training" in results:
        lines += training_markdown(results["training"], peak) + [""]
        lines += _command(results, "training")
    if "translation" in results:
        translation = results["translation"]
        lines += ["### Translation throughput", "",
                  f"Preset `{translation['preset']}`, random weights, "
                  f"{translation['source_length']} source ids, at most {translation['length']} "
                  "output tokens; target tokens/s, the best of 3 timed runs after a warm-up (beam "
                  "rows count the best hypothesis). "
                  "The uncached loop runs the whole model over the prefix at every step; the "
                  "KerasHub rows run its samplers on the KerasHub model (`next` runs its "
                  "decoder over the whole prompt).", ""]
        uncached = {row["batch_size"]: row.get("target_tokens_per_second")
                    for row in translation["rows"] if row["method"] == UNCACHED}
        rows = []
        for row in translation["rows"]:
            speed = row.get("target_tokens_per_second")
            rows.append([row["batch_size"], row["method"],
                         f"{speed:,.1f}" if speed else row.get("error", ""),
                         _ratio(speed, uncached.get(row["batch_size"]))])
        lines += table(["batch", "method", "tokens/s", "vs uncached greedy loop"], rows)
        lines += [""] + _command(results, "translation")
    if "ctranslate2" in results:
        lines += ctranslate2_markdown(results["ctranslate2"]) + [""]
        lines += _command(results, "ctranslate2")
    if "steps" in results.get("quality", {}):
        lines += quality_steps_markdown(results["quality"]) + [""]
        lines += _command(results, "quality")
    if "quality_minutes" in results:
        lines += quality_minutes_markdown(results["quality_minutes"]) + [""]
        lines += _command(results, "quality_minutes")
    lines += ["### Goals", "", "Every goal the figures above (and the scripts run alone, "
              "where their results exist) check, with its measured value:", ""]
    lines += goals_table(goal_rows(results))
    return "\n".join(lines).rstrip() + "\n"


def quality_steps_markdown(quality):
    from quality import steps_table

    settings = ", ".join(f"`{key}={value}`" for key, value in quality.get("recipe", {}).items())
    steps = ", ".join(f"{step:,}" for step in quality["steps"])
    return ["### Quality by training steps", "",
            f"Both models trained to {steps} steps on the same batches in the same order, "
            "the demo's recipe (`DEMO_TRAINING`) with the same tokenizer, schedule, seed and "
            "precision; sacrebleu on the Ding test split at each step count. Beam search of "
            "width 4 (ours with its length penalty 0.6, KerasHub's `BeamSampler` has none) "
            "and greedy decoding; KerasHub decodes with its key/value cache. Minutes are "
            "this machine's time in `fit` (validation passes included; setup, saving and "
            "scoring not), the only figure its load moves.", "", f"Recipe: {settings}.", "",
            steps_table(quality)] + (
        ["", f"![BLEU by steps and by minutes](images/{PLOT})"] if quality.get("plot") else [])


def quality_minutes_markdown(quality):
    methods = quality["methods"]
    settings = ", ".join(f"`{key}={value}`" for key, value in quality["recipe"].items())
    lines = ["### Quality under the same training budget", "",
             f"{quality['minutes_per_model']:g} minutes of training each on this machine, "
             "the demo's recipe (`DEMO_TRAINING`), the same tokenizer, batches and "
             "schedule; sacrebleu on the Ding test split. Beam search of width 4 (the "
             "paper's decoding; ours with its length penalty 0.6, KerasHub's `BeamSampler` "
             "has none) is the headline; greedy decoding next to it.", "",
             f"Recipe: {settings}.", ""]
    rows = []
    for side, name in (("ours", "ours"), ("keras_hub", "KerasHub baseline")):
        entry = quality.get(side, {})
        if "error" in entry or not entry:
            rows.append([name, entry.get("error", "not run")] + [""] * (2 + 2 * len(methods)))
            continue
        cells = [entry["scores"][method][key] for method in methods for key in ("bleu", "chrf")]
        rows.append([name, entry["steps"], _round(entry["train_loss"]),
                     _round(entry["validation_loss"]), *cells])
    header = ["model", "steps", "train loss", "validation loss"]
    for method in methods:
        header += [f"BLEU, {method}", f"chrF, {method}"]
    lines += table(header, rows)
    return lines


def ctranslate2_markdown(result):
    lines = ["### Against CTranslate2", ""]
    if "error" in result:
        return lines + [result["error"]]
    from ctranslate2_speed import markdown as table

    return lines + [
        f"The trained model `{result['model']}`, the first {result['sentences']} sentences "
        f"of its test split, {result['threads']} CPU threads, at most {result['max_length']} "
        f"output tokens, no length penalty on either side; target tokens/s and sentences/s "
        f"of the median of {result.get('repeats', 1)} timed passes after a warm-up pass "
        "(`benchmarks/ctranslate2_speed.py`, each row in a worker process of its own). "
        "`same as ours` counts the translations equal to ours (TensorFlow, XLA, float32, "
        "the same decoding); where they differ, tokens/s credits the longer "
        "outputs and sentences/s compares the time.", "", table(result)]


def _round(value):
    return "" if value is None else f"{value:.3f}"


def goal_rows(results):
    """Every goal the benchmarks check (`common.Goal`), from the figures in `results`."""
    out = []

    def mark(text, value, target, note=""):
        out.append(Goal(text, value, target, unit="", note=note))

    training = results.get("training", {})
    for name, section in (("whole training split", training),
                          ("sentence pairs", training.get("sentence_pairs", {}))):
        runs = section.get("runs", [])
        for precision in ("float32", "mixed_bfloat16"):
            ours, recipe = _end_to_end(runs, precision)
            if ours and recipe:
                mark(f"training tokens/s, ours (bucketed) / the KerasHub recipe (its "
                     f"batching), {precision}, {name}", ours / recipe, 1.5)
        for precision in ("float32", "mixed_bfloat16"):
            for jit in (False, True):
                ours = _speed(runs, "ours", precision, jit)
                theirs = _speed(runs, "keras_hub", precision, jit)
                if ours and theirs:
                    why = (" (the training section says why, measured)"
                           if ours < 1.5 * theirs and section.get("profile") else "")
                    mark(f"training tokens/s, ours / KerasHub on the same batches, {precision}"
                         f"{', XLA' if jit else ''}, {name}", ours / theirs, 1.5, why)
    rows = results.get("translation", {}).get("rows", [])
    speed = {(row["batch_size"], row["method"]): row.get("target_tokens_per_second")
             for row in rows}
    for batch in sorted({row["batch_size"] for row in rows}):
        base = speed.get((batch, UNCACHED))
        greedy, beam = speed.get((batch, "cached greedy, XLA")), speed.get(
            (batch, "cached beam 4, XLA"))
        if base and greedy and batch == 32:
            mark("cached greedy / uncached loop at batch 32", greedy / base, 10)
        if base and beam:
            mark(f"beam 4 / uncached greedy loop at batch {batch}", beam / base, 3)
    out += decoding_goals(results.get("ctranslate2", {}))
    quality = results.get("quality", {})
    if "rows" in quality.get("ours", {}) and "rows" in quality.get("keras_hub", {}):
        theirs = {row["steps"]: row for row in quality["keras_hub"]["rows"]}
        for row in quality["ours"]["rows"]:
            if row["steps"] in theirs:
                for method in quality["methods"]:
                    mark(f"BLEU ours - KerasHub at {row['steps']:,} steps (points, {method})",
                         row["scores"][method]["bleu"]
                         - theirs[row["steps"]]["scores"][method]["bleu"], 0)
    minutes = results.get("quality_minutes", {})
    if "bleu" in minutes.get("ours", {}) and "bleu" in minutes.get("keras_hub", {}):
        mark(f"BLEU ours - KerasHub after {minutes['minutes_per_model']:g} minutes each "
             f"(points, {minutes['method']}; no target, the machine's load moves it)",
             minutes["ours"]["bleu"] - minutes["keras_hub"]["bleu"], None)
    for goal in results.get("data_scale", {}).get("goals", []):
        out.append(Goal(f"data scale: {goal['goal']}", shown=goal["figures"],
                        wanted="as stated", verdict=goal["met"],
                        note=f" ({results['data_scale']['path']}, run alone)"))
    pretrained = results.get("pretrained_speed", {})
    for goal in pretrained.get("goals", []):
        where = f" ({pretrained['path']}, run alone; fastest: {goal['fastest_ours']})"
        if "vs_transformers" in goal:
            out.append(Goal(f"OPUS-MT size, ours / transformers generate ({goal['setting']})",
                            goal["vs_transformers"], 2.0, verdict=goal["met"], note=where))
        if "vs_ctranslate2" in goal:
            out.append(Goal(f"OPUS-MT size, ours / CTranslate2 float32 ({goal['setting']})",
                            goal["vs_ctranslate2"], None, note=where))
    return out


def decoding_goals(decoding):
    """The decoding table's goals, by sentences/s on the same sentences (the time)."""
    by_setting = {(row["decoding"], row["batch_size"], row["method"]): row
                  for row in decoding.get("rows", [])}
    out = []

    def versus(setting, method, base, target, text, show_same=False):
        row, other = by_setting.get((*setting, method)), by_setting.get((*setting, base))
        if not (row and other and other.get("sentences_per_second")):
            return
        note = ""
        if show_same:
            tokens = _ratio(row["target_tokens_per_second"], other["target_tokens_per_second"])
            note = (f"; by target tokens/s {tokens} ({100 * other.get('same_as_ours', 0):.0f}% "
                    "of its translations are ours)")
        out.append(Goal(f"decoding, {text}, {setting[0]} at batch {setting[1]}, by "
                        "sentences/s on the same sentences",
                        row["sentences_per_second"] / other["sentences_per_second"], target,
                        unit="", note=note))

    settings = list(dict.fromkeys(key[:2] for key in by_setting))
    for setting in settings:
        versus(setting, OURS, KERAS_HUB_CACHED, 1.5, "ours / KerasHub's cached sampler",
               show_same=True)
    for setting in (("greedy", 1), ("beam 4", 32)):
        versus(setting, OURS, CT2_FLOAT32, 1.0, "ours (XLA) / CTranslate2 float32")
    for setting in settings:
        versus(setting, SAVED_MODEL, OURS, 0.9, "the SavedModel / ours in-process")
    for setting in settings:
        versus(setting, INT8, OURS, 1.2, "ours int8 / ours float32")
    for label, reason in decoding.get("skipped", {}).items():
        out.append(Goal(f"decoding row {label}", note=f": skipped, {reason}"))
    return out


def external_goals(path):
    """`{"path", "goals"}` of a script run alone (its JSON with a `goals` list), or {}."""
    if not path or not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as file:
        return {"path": path, "goals": json.load(file).get("goals", [])}


def write_docs(text, path):
    """Replace the text between the bench markers of `path` (created if absent)."""
    block = f"{START}\n{text}{END}"
    if os.path.exists(path):
        with open(path, encoding="utf-8") as file:
            page = file.read()
    else:
        page = "# Results\n"
    if START in page and END in page:
        page = page[: page.index(START)] + block + page[page.index(END) + len(END):]
    else:
        page = page.rstrip("\n") + "\n\n" + block + "\n"
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as file:
        file.write(page)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=12.0,
                        help="training budget per model of the quality_minutes section")
    parser.add_argument("--quality-steps", type=int, nargs="+", default=list(STEPS),
                        help="step counts of the quality section")
    parser.add_argument("--section-minutes", type=float, default=12.0,
                        help="bound of each of the training and translation sections")
    parser.add_argument("--only", nargs="*", choices=SECTIONS, default=list(SECTIONS),
                        help="sections to run; none: only rewrite the reports")
    parser.add_argument("--data", default="runs/data")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--batches", type=int, default=8, help="training batches per pass")
    parser.add_argument("--passes", type=int, default=3,
                        help="timed training passes (the best counts)")
    parser.add_argument("--ct2-model", default="runs/demo/model",
                        help="trained model folder of the ctranslate2 section")
    parser.add_argument("--ct2-sentences", type=int, default=500,
                        help="test sentences of the ctranslate2 section")
    parser.add_argument("--data-scale-results", default="runs/data_scale/results.json",
                        help="data_scale.py's results (run alone): its goals join the table")
    parser.add_argument("--pretrained-results", default="runs/pretrained_speed.json",
                        help="pretrained_speed.py --output (run alone): its goals join the "
                             "table")
    parser.add_argument("--output", default="runs/bench")
    parser.add_argument("--docs", default="docs/results.md")
    args = parser.parse_args()
    if "quality" in args.only:
        try:  # before hours of other sections, not after
            check_milestones(args.quality_steps)
        except ValueError as error:
            parser.error(str(error).replace("--steps", "--quality-steps"))

    path = os.path.join(args.output, "results.json")
    results = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as file:
            results = json.load(file)
    if args.only:
        results["machine"] = machine(LIBRARIES)
    for name, source in (("data_scale", args.data_scale_results),
                         ("pretrained_speed", args.pretrained_results)):
        results.pop(name, None)
        if external_goals(source):
            results[name] = external_goals(source)
    # Decoding before training: after it, in the same process, decoding measured 1.5-3x slower.
    for name in SECTIONS:
        if name in args.only:
            print(f"--- {name}", flush=True)
            results[name] = run_section(name, args)
            results.setdefault("commands", {})[name] = " ".join(
                ["python benchmarks/run.py", *sys.argv[1:]])
    write_json(path, results)
    text = markdown(results)
    with open(os.path.join(args.output, "results.md"), "w", encoding="utf-8") as file:
        file.write("# Benchmarks\n\n" + text)
    write_docs(text, args.docs)
    plot = results.get("quality", {}).get("plot")
    if "quality" in args.only and plot and os.path.exists(plot):
        images = os.path.join(os.path.dirname(args.docs) or ".", "images")
        os.makedirs(images, exist_ok=True)
        shutil.copyfile(plot, os.path.join(images, PLOT))
    print(text)


if __name__ == "__main__":
    main()
