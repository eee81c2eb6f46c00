"""How often a trained model's outputs loop, and what `no_repeat_ngram_size` does to that
and to BLEU.

An output "repeats" when one 3-gram of its pieces occurs twice or one piece occurs 4 or
more times. For greedy and beam search, with blocking off and with each size given, the
script reports the share of repeating outputs on the test split with BLEU and chrF.

    python benchmarks/repetition.py --model runs/demo/model --data runs/demo/data
"""

import argparse
import collections
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import log, table, write_json  # noqa: E402


def repeats(pieces):
    """
    >>> repeats([5, 6, 7, 5, 6, 7]), repeats([5, 5, 5, 5]), repeats([5, 6, 5, 7])
    (True, True, False)
    """
    trigrams = collections.Counter(zip(pieces, pieces[1:], pieces[2:], strict=False))
    return (any(count > 1 for count in trigrams.values())
            or any(count >= 4 for count in collections.Counter(pieces).values()))


def measure(model_dir, data_dir, sizes=(3,), methods=("greedy", "beam"), sentences=None):
    from keras_transformer.data import load_tsv
    from keras_transformer.evaluation import score_translations
    from keras_transformer.folders import TEST_FILE
    from keras_transformer.generation import Translator

    translator = Translator.from_directory(model_dir)
    pairs = load_tsv(os.path.join(data_dir, TEST_FILE))[:sentences]
    sources = [source for source, _ in pairs]
    references = [target for _, target in pairs]
    rows = []
    for method in methods:
        for size in (None, *sizes):
            started = time.perf_counter()
            hypotheses = translator.translate(sources, method=method, progress=False,
                                              no_repeat_ngram_size=size)
            seconds = time.perf_counter() - started
            pieces = translator.tokenizer.encode_as_ids(hypotheses)
            share = sum(repeats(list(ids)) for ids in pieces) / len(pieces)
            scores = score_translations(hypotheses, references)
            rows.append({"method": method, "no_repeat_ngram_size": size,
                         "repeating_share": round(share, 4), "bleu": scores["bleu"],
                         "chrf": scores["chrf"], "seconds": round(seconds, 1),
                         "sentences": len(pairs)})
            log(json.dumps(rows[-1]))
    return rows


def markdown(rows):
    return "\n".join(table(
        ["method", "no_repeat_ngram_size", "outputs that repeat", "BLEU", "chrF"],
        [[row["method"], row["no_repeat_ngram_size"] or "off",
          f"{100 * row['repeating_share']:.1f}%", f"{row['bleu']:.2f}", f"{row['chrf']:.2f}"]
         for row in rows]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/demo/model")
    parser.add_argument("--data", default="runs/demo/data")
    parser.add_argument("--sizes", type=int, nargs="+", default=[3])
    parser.add_argument("--sentences", type=int, default=None, help="default: all")
    parser.add_argument("--output", default=None, help="write the rows as JSON here")
    args = parser.parse_args()
    rows = measure(args.model, args.data, tuple(args.sizes), sentences=args.sentences)
    write_json(args.output, rows)
    print(markdown(rows))


if __name__ == "__main__":
    main()
