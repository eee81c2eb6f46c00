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
        help="split the corpus, train the tokenizer and write a data report",
        description=(
            "Write DIR/train.tsv, DIR/validation.tsv, DIR/test.tsv (German TAB English), "
            "DIR/tokenizer.model and DIR/report.json."
        ),
    )
    parser.add_argument("--output", required=True, metavar="DIR", help="output folder")
    parser.add_argument(
        "--corpus",
        metavar="PATH",
        default=None,
        help="Ding corpus file or URL (default: $KT_CORPUS or /usr/share/trans/de-en)",
    )
    parser.add_argument(
        "--vocabulary-size", type=int, default=8000, help="shared BPE vocabulary size"
    )
    parser.add_argument(
        "--tokens-per-batch", type=int, default=25_000, help="token budget per side"
    )
    parser.add_argument(
        "--max-sequence-length", type=int, default=256, help="longest sequence in tokens"
    )
    parser.set_defaults(run=_run_prepare)


def _run_prepare(args):
    from keras_transformer.data.prepare import prepare

    report = prepare(
        args.output,
        corpus=args.corpus,
        vocabulary_size=args.vocabulary_size,
        tokens_per_batch=args.tokens_per_batch,
        max_sequence_length=args.max_sequence_length,
    )
    padding = report["padding"]
    summary = {
        "output": args.output,
        "pairs": report["pairs"]["kept"],
        "splits": {name: split["pairs"] for name, split in report["splits"].items()},
        "unknown_share_test": report["tokenizer"]["unknown_share"]["test"],
        "padding_efficiency": {
            "bucketed": round(padding["bucketed"]["padding_efficiency"], 4),
            "naive": round(padding["naive"]["padding_efficiency"], 4),
        },
    }
    print(json.dumps(summary))


def build_parser():
    """Builds the argument parser with one subparser per subcommand."""
    parser = argparse.ArgumentParser(
        prog=PROG, description='The Transformer of "Attention Is All You Need" in Keras 3.'
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_prepare(subparsers)
    return parser


def main(argv=None):
    """Runs the command line `keras-transformer COMMAND ...`; returns the exit code."""
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
