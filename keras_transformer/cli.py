"""The `keras-transformer` command.

Each subcommand registers its arguments in an `_add_<name>` function and runs through a
`_run_<name>` function that imports what it needs (so `--help` stays fast). User errors,
such as a missing corpus file, end with one `keras-transformer: error: ...` line and exit
code 2, like argparse's own argument errors.

Example:
>>> main(["prepare", "--help"])  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
SystemExit: 0
"""

import argparse
import json
import sys

PROG = "keras-transformer"


def _add_prepare(subparsers):
    parser = subparsers.add_parser(
        "prepare",
        help="clean and split a parallel corpus, train the tokenizer, tokenize, report",
        description=(
            "Read aligned files (--source/--target), TSV files (--tsv) and/or the Ding "
            "dictionary (--corpus, the default input), clean and split them, and write "
            "DIR/train.tsv, DIR/validation.tsv, DIR/test.tsv (source TAB target), "
            "DIR/tokenizer.model, the tokenized splits that `train` reads "
            "(DIR/*.bin, DIR/*.npy, DIR/tokens.json) and DIR/report.json. Files ending in "
            ".gz, .bz2 or .xz are decompressed on the fly."
        ),
    )
    parser.add_argument("--output", required=True, metavar="DIR", help="output folder")
    inputs = parser.add_argument_group("inputs (several are concatenated)")
    inputs.add_argument("--source", action="append", default=[], metavar="FILE",
                        help="source side of two aligned files, one sentence a line "
                             "(repeatable, each with its --target)")
    inputs.add_argument("--target", action="append", default=[], metavar="FILE",
                        help="target side of the --source file of the same position")
    inputs.add_argument("--tsv", action="append", default=[], metavar="FILE",
                        help="source<TAB>target lines (repeatable)")
    inputs.add_argument(
        "--corpus", metavar="PATH", default=None,
        help="Ding corpus file or URL, German :: English (the input when no other is "
             "given; default: $KT_CORPUS or /usr/share/trans/de-en)")
    inputs.add_argument("--reverse", action="store_true",
                        help="swap the sides of --tsv and --corpus input (e.g. English to "
                             "German from Ding)")
    held_out = parser.add_argument_group(
        "held-out splits (default: a stable hash split of the corpus; Ding: its own rule)")
    for split in ("validation", "test"):
        for side in ("source", "target"):
            held_out.add_argument(f"--{split}-{side}", metavar="FILE", default=None,
                                  help=f"{side} side of the {split} split, as given "
                                       f"(e.g. newstest201{3 if split == 'validation' else 4})")
    held_out.add_argument("--held-out-pairs", type=int, default=2000, metavar="N",
                          help="about how many pairs the hash split holds out for each of "
                               "validation and test, at most N (default: 2000)")
    cleaning = parser.add_argument_group("cleaning of training pairs (Moses clean-corpus-n)")
    cleaning.add_argument("--min-words", type=int, default=1, help="fewest words a side")
    cleaning.add_argument("--max-words", type=int, default=250, help="most words a side")
    cleaning.add_argument("--max-length-ratio", type=float, default=9.0,
                          help="most words of one side per word of the other")
    parser.add_argument(
        "--vocabulary-size", type=int, default=8000, help="shared BPE vocabulary size"
    )
    parser.add_argument(
        "--tokenizer", default=None, metavar="MODEL_DIR",
        help="tokenize with this model folder's tokenizer instead of training one (e.g. "
             "an imported OPUS-MT model, to fine-tune it with `train --initial-model`)")
    parser.add_argument(
        "--tokens-per-batch", type=int, default=25_000, help="token budget per side"
    )
    parser.add_argument(
        "--max-sequence-length", type=int, default=256, help="longest sequence in tokens"
    )
    parser.set_defaults(run=_run_prepare)


def _held_out_files(args, split):
    source, target = getattr(args, f"{split}_source"), getattr(args, f"{split}_target")
    if (source is None) != (target is None):
        given, missing = ("source", "target") if target is None else ("target", "source")
        raise ValueError(f"--{split}-{given} needs --{split}-{missing} (two aligned files); "
                         f"--{split}-{missing} was not given.")
    return None if source is None else (source, target)


def _run_prepare(args):
    from keras_transformer.data.prepare import prepare
    from keras_transformer.data.sources import CleaningRules

    if len(args.source) != len(args.target):
        raise ValueError(f"Each --source needs its --target (aligned files): "
                         f"{len(args.source)} --source and {len(args.target)} --target given.")
    report = prepare(
        args.output,
        corpus=args.corpus,
        vocabulary_size=args.vocabulary_size,
        tokens_per_batch=args.tokens_per_batch,
        max_sequence_length=args.max_sequence_length,
        parallel=list(zip(args.source, args.target, strict=True)),
        tsv=args.tsv,
        reverse=args.reverse,
        validation=_held_out_files(args, "validation"),
        test=_held_out_files(args, "test"),
        held_out_pairs=args.held_out_pairs,
        cleaning=CleaningRules(args.min_words, args.max_words, args.max_length_ratio),
        tokenizer=args.tokenizer,
    )
    padding = report["padding"]
    summary = {
        "output": args.output,
        "pairs": report["pairs"]["kept"],
        "splits": {name: split["pairs"] for name, split in report["splits"].items()},
        "dropped": {name: count for name, count in report["pairs"].items()
                    if name.endswith(("_dropped", "_skipped")) and count},
        "unknown_share_test": report["tokenizer"]["unknown_share"]["test"],
        "padding_efficiency": {
            "bucketed": round(padding["bucketed"]["padding_efficiency"], 4),
            "naive": round(padding["naive"]["padding_efficiency"], 4),
        },
    }
    print(json.dumps(summary))


def _add_train(subparsers):
    import dataclasses

    from keras_transformer.training.config import TrainingConfig

    parser = subparsers.add_parser(
        "train",
        help="train (or resume) a model on a prepared data folder",
        description=(
            "Train on DIR's tokenized train split (written by `prepare`; a folder holding only "
            "TSV files is tokenized first) with DIR/tokenizer.model; MODEL_DIR receives "
            "model.keras, "
            "tokenizer.model, config.json, checkpoints/, backup/ (resume), logs/ "
            "(TensorBoard) and history.csv. Running it again resumes from backup/ with the "
            "settings saved in config.json; a flag that contradicts one of them stops "
            "before any work (only the run's length and cadence may change)."
        ),
    )
    parser.add_argument("--data", required=True, metavar="DIR", help="folder from `prepare`")
    parser.add_argument("--output", required=True, metavar="MODEL_DIR", help="model folder")
    # One flag per TrainingConfig setting; unset flags stay None, so a resumed run keeps
    # the saved value and only flags given on this command line are checked against it.
    for field in dataclasses.fields(TrainingConfig):
        meta = field.metadata
        if field.name in ("model_overrides", "verbose"):
            continue
        default = field.default
        shown = f" (default: {default})" if default is not None else ""
        flag = "--" + field.name.replace("_", "-")
        if field.type is bool:
            parser.add_argument(flag, action="store_const", const=True, default=None,
                                help=meta["help"])
        else:
            parser.add_argument(flag, type=meta["type"], choices=meta["choices"],
                                metavar=meta["metavar"], default=None,
                                help=meta["help"] + shown)
    parser.add_argument("--dropout", type=float, default=None,
                        help="override the preset's dropout (P_drop)")
    parser.add_argument("--normalize-first", action="store_true",
                        help="pre-LN blocks plus a final LayerNorm per stack (the paper: "
                             "post-LN; the demo uses pre-LN, which learns faster here)")
    parser.set_defaults(run=_run_train)


def _run_train(args):
    import dataclasses

    from keras_transformer.training.config import TrainingConfig
    from keras_transformer.training.trainer import train

    settings = {field.name: getattr(args, field.name)
                for field in dataclasses.fields(TrainingConfig)
                if getattr(args, field.name, None) is not None}
    if args.dropout is not None:
        settings["dropout"] = args.dropout
    if args.normalize_first:
        settings["normalize_first"] = True
    result = train(args.data, args.output, **settings)
    print(json.dumps(result))


def _add_decoding_options(parser):
    group = parser.add_argument_group(
        "decoding (defaults: the paper's beam 4, alpha 0.6 and input length + 50; an "
        "imported model's own settings, saved in MODEL_DIR/config.json)")
    group.add_argument("--method", default=None, choices=["greedy", "beam", "sample"])
    group.add_argument("--beam-size", type=int, default=None)
    group.add_argument("--alpha", type=float, default=None, help="beam length penalty")
    group.add_argument("--length-penalty", default=None, choices=["gnmt", "average"],
                       help="beam ranking: gnmt ((5+|Y|)/6)^alpha, the paper's, or average "
                            "|Y|^alpha, Hugging Face's")
    group.add_argument("--max-length", type=int, default=None,
                       help="cap on output tokens (default: input length + 50)")
    group.add_argument("--no-repeat-ngram-size", type=int, default=None, metavar="N",
                       help="never repeat an N-gram in an output (default: off, as in "
                            "the paper)")
    group.add_argument("--min-length", type=int, default=None, metavar="N",
                       help="no output ends before N tokens (default: 1, so no empty "
                            "translation; 0 for an imported model)")
    group.add_argument("--quantization", default=None, choices=["int8"],
                       help="decode with int8 weights (default: the model's float weights)")
    parser.add_argument("--batch-size", type=int, default=32)


def _decoding_kwargs(args):
    """The decoding flags given on the command line (the others keep the model's)."""
    names = ("max_length", "no_repeat_ngram_size", "beam_size", "alpha", "length_penalty",
             "min_length")
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def _add_evaluate(subparsers):
    parser = subparsers.add_parser(
        "evaluate", help="sacrebleu BLEU and chrF on a split",
        description="Translate DIR/SPLIT.tsv and print JSON with bleu, chrf, signature "
                    "(sacrebleu's) and sentences; also written to MODEL_DIR/eval-SPLIT.json.",
    )
    parser.add_argument("--model", required=True, metavar="MODEL_DIR")
    parser.add_argument("--data", required=True, metavar="DIR", help="folder from `prepare`")
    parser.add_argument("--split", default="test", choices=["train", "validation", "test"])
    parser.add_argument("--limit", type=int, default=None, help="score the first N pairs only")
    _add_decoding_options(parser)
    parser.set_defaults(run=_run_evaluate)


def _run_evaluate(args):
    import os

    from keras_transformer.data.corpora import load_tsv
    from keras_transformer.evaluation import evaluate_translator
    from keras_transformer.generation import Translator

    translator = Translator.from_directory(args.model, batch_size=args.batch_size,
                                           quantization=args.quantization)
    pairs = load_tsv(os.path.join(args.data, f"{args.split}.tsv"))[: args.limit]
    result = evaluate_translator(translator, pairs, method=args.method, **_decoding_kwargs(args))
    with open(os.path.join(args.model, f"eval-{args.split}.json"), "w",
              encoding="utf-8") as file:
        json.dump(result, file, indent=2, ensure_ascii=False)
    result.pop("examples")
    print(json.dumps(result))


def _add_translate(subparsers):
    parser = subparsers.add_parser(
        "translate", help="translate stdin (or --input) line by line to stdout",
        description="One output line per input line, always (an empty line gives an empty "
                    "line). A progress bar goes to stderr.",
    )
    parser.add_argument("--model", required=True, metavar="MODEL_DIR")
    parser.add_argument("--input", default=None, metavar="FILE", help="default: stdin")
    _add_decoding_options(parser)
    parser.set_defaults(run=_run_translate)


def _run_translate(args):
    from keras_transformer.generation import Translator
    from keras_transformer.generation.translator import read_lines

    translator = Translator.from_directory(args.model, batch_size=args.batch_size,
                                           quantization=args.quantization)
    if args.input is None:
        lines = read_lines(getattr(sys.stdin, "buffer", sys.stdin), "<stdin>")
    else:
        with open(args.input, "rb") as file:
            lines = read_lines(file, args.input)
    translations = translator.translate(lines, method=args.method, **_decoding_kwargs(args))
    for line in translations:
        print(" ".join(line.splitlines()))


def _add_average(subparsers):
    parser = subparsers.add_parser(
        "average", help="average the last N checkpoints into model.keras (Section 6.1)",
        description="Average MODEL_DIR/checkpoints/ckpt-*.weights.h5 (the last N) and write "
                    "the result to MODEL_DIR/model.keras; the previous model is kept as "
                    "model.unaveraged.keras.",
    )
    parser.add_argument("--model", required=True, metavar="MODEL_DIR")
    parser.add_argument("--last", type=int, default=5, metavar="N")
    parser.set_defaults(run=_run_average)


def _run_average(args):
    import os
    import shutil

    import keras

    import keras_transformer.models  # noqa: F401  (registers the model class)
    from keras_transformer.folders import CHECKPOINTS_DIR, MODEL_FILE, UNAVERAGED_MODEL_FILE
    from keras_transformer.training.averaging import average_checkpoints

    path = os.path.join(args.model, MODEL_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"`{path}` is missing: train a model into MODEL_DIR first.")
    model = keras.models.load_model(path)
    steps = average_checkpoints(model, os.path.join(args.model, CHECKPOINTS_DIR), args.last)
    shutil.copyfile(path, os.path.join(args.model, UNAVERAGED_MODEL_FILE))
    model.save(path)
    print(json.dumps({"model": path, "averaged_steps": steps}))


def _add_export(subparsers):
    parser = subparsers.add_parser(
        "export", help="write a SavedModel or a CTranslate2 model: strings in, translations out",
        description="Export MODEL_DIR. --format saved_model (the default) writes a SavedModel "
                    "with signatures serving_default (text -> translation, token_ids, scores), "
                    "nbest and metadata; it loads with TensorFlow and tensorflow_text alone. "
                    "--format ctranslate2 writes a folder that ctranslate2.Translator loads, "
                    "with the tokenizer files beside it (pip install "
                    "\"keras-transformer[ctranslate2]\"). See docs/guides/export.md.",
    )
    parser.add_argument("--model", required=True, metavar="MODEL_DIR")
    parser.add_argument("--output", required=True, metavar="EXPORT_DIR")
    parser.add_argument("--format", default="saved_model", choices=["saved_model", "ctranslate2"],
                        help="what to write (default: saved_model)")
    parser.add_argument("--beam-size", type=int, default=None,
                        help="1 is greedy decoding (default: 4, or an imported model's own)")
    parser.add_argument("--alpha", type=float, default=None,
                        help="beam length penalty (default: 0.6, or an imported model's)")
    parser.add_argument("--max-length", type=int, default=None,
                        help="cap on output tokens (default: input length + 50, or an "
                             "imported model's own)")
    parser.add_argument("--no-repeat-ngram-size", type=int, default=None, metavar="N",
                        help="saved_model: never repeat an N-gram in an output (default: off)")
    parser.add_argument("--min-length", type=int, default=None, metavar="N",
                        help="saved_model: no output ends before N tokens (default: 1, or an "
                             "imported model's 0); CTranslate2 takes min_decoding_length at "
                             "run time")
    parser.add_argument("--quantization", default=None, metavar="TYPE",
                        help="ctranslate2: weight type, e.g. int8, int8_float32, float16; "
                             "saved_model: int8 (default: float32)")
    parser.add_argument("--force", action="store_true",
                        help="ctranslate2: replace EXPORT_DIR if it is not empty")
    parser.set_defaults(run=_run_export)


def _run_export(args):
    if args.no_repeat_ngram_size and args.format == "ctranslate2":
        raise ValueError("`--no-repeat-ngram-size` is a decoding option of CTranslate2 "
                         "(`translate_batch(no_repeat_ngram_size=N)`), not of its export.")
    if args.min_length is not None and args.format == "ctranslate2":
        raise ValueError("`--min-length` is a decoding option of CTranslate2 "
                         "(`translate_batch(min_decoding_length=N)`), not of its export.")
    if args.format == "ctranslate2":
        from keras_transformer.export import export_ctranslate2

        try:
            path = export_ctranslate2(args.model, args.output, quantization=args.quantization,
                                      force=args.force)
        except ImportError as error:  # one error line, as for the other user errors
            raise ValueError(str(error)) from error
        print(json.dumps({"export": path, "format": "ctranslate2",
                          "quantization": args.quantization or "float32"}))
        return
    if args.force:
        raise ValueError("`--force` applies to `--format ctranslate2` only.")
    if args.quantization not in (None, "int8"):
        raise ValueError("`--quantization` of a SavedModel must be int8. Received: "
                         f"{args.quantization}")
    from keras_transformer.export import export_saved_model

    options = {name: getattr(args, name) for name in ("beam_size", "alpha", "max_length",
                                                      "no_repeat_ngram_size", "min_length",
                                                      "quantization")
               if getattr(args, name) is not None}
    path = export_saved_model(args.model, args.output, **options)
    print(json.dumps({"export": path, **options}))


def _add_import(subparsers):
    parser = subparsers.add_parser(
        "import", help="turn a pretrained OPUS-MT (Marian) snapshot into a model folder",
        description="Read a local Hugging Face snapshot (config.json, model.safetensors or "
                    "pytorch_model.bin, source.spm, target.spm, vocab.json, and "
                    "generation_config.json if present) and write MODEL_DIR: model.keras, "
                    "the tokenizer and config.json with the snapshot's decoding settings. "
                    "translate, evaluate, export, average and train (--initial-model) "
                    "accept it. Needs pip install \"keras-transformer[marian]\"; download "
                    "snapshots with huggingface_hub (docs/guides/pretrained.md).",
    )
    parser.add_argument("--from", dest="source_format", required=True, choices=["marian"],
                        help="the checkpoint's kind")
    parser.add_argument("--model", required=True, metavar="DIR", help="the snapshot folder")
    parser.add_argument("--output", required=True, metavar="MODEL_DIR")
    parser.add_argument("--force", action="store_true",
                        help="replace MODEL_DIR if it is not empty")
    parser.set_defaults(run=_run_import)


def _run_import(args):
    from keras_transformer.importers import import_marian

    try:
        summary = import_marian(args.model, args.output, force=args.force)
    except (ImportError, FileExistsError) as error:  # one error line, as for the others
        raise ValueError(str(error)) from error
    print(json.dumps({"model": args.output, **{key: summary[key] for key in (
        "vocabulary_size", "source_vocabulary_size", "parameters", "generation")}}))


def _add_demo(subparsers):
    parser = subparsers.add_parser(
        "demo", help="the main job: prepare, train, evaluate and translate (resumable)",
        description="Prepare the Ding corpus, train a small model for --minutes, print BLEU "
                    "and chrF on the test split and a few translations. Run it again to "
                    "continue training.",
    )
    parser.add_argument("--workdir", default="runs/demo")
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--corpus", default=None, metavar="PATH")
    parser.add_argument("--method", default="beam", choices=["greedy", "beam"])
    parser.set_defaults(run=_run_demo)


def _run_demo(args):
    from keras_transformer.demo import run_demo

    summary = run_demo(args.workdir, args.minutes, args.corpus, method=args.method)
    print("\nTranslations of the test split:")
    for example in summary["examples"]:
        print(f"  source:      {example['source']}\n  reference:   {example['reference']}\n"
              f"  translation: {example['translation']}\n")
    test = summary["test"]
    print(f"Test split ({test['sentences']} sentences, {test['method']}): "
          f"BLEU {test['bleu']:.2f}, chrF {test['chrf']:.2f}  [{test['signature']}]")
    print(f"Trained to step {summary['step']} ({summary['stopped']}).")
    print(f"Data: {summary['data']}\nModel: {summary['model']} (model.keras, tokenizer.model, "
          "config.json, checkpoints/, logs/, eval-test.json)")
    if summary.get("export"):
        print(f"SavedModel: {summary['export']}")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage dump), exit code 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _version():
    """`keras-transformer 0.1.0 (memory allocator: tcmalloc)`."""
    from keras_transformer.allocator import running_allocator
    from keras_transformer.version import __version__

    return f"{PROG} {__version__} (memory allocator: {running_allocator()})"


def build_parser():
    """Builds the argument parser with one subparser per subcommand."""
    parser = _Parser(
        prog=PROG, description='The Transformer of "Attention Is All You Need" in Keras 3.'
    )
    parser.add_argument("--version", action="version", version=_version(),
                        help="print the version and the memory allocator in use, and exit")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )
    for add in (_add_prepare, _add_train, _add_evaluate, _add_translate, _add_average,
                _add_export, _add_import, _add_demo):
        add(subparsers)
    return parser


def main(argv=None):
    """Runs the command line `keras-transformer COMMAND ...`; returns the exit code.

    As the program itself, it runs on tcmalloc where that is installed (the package
    restarts the process with it preloaded before Keras loads, see
    `keras_transformer.allocator`; `KT_ALLOCATOR=system` opts out), and stderr loses the
    frameworks' start-up lines (`keras_transformer.startup_noise`'s filter). Called as a
    function, `main(["train", ...])`, it runs in the calling process as it is."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.run(args)
    except (FileNotFoundError, ValueError) as error:
        message = " ".join(str(error).split())
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
