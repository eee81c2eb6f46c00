"""Training and decoding speed on each Keras backend, fused against explicit attention.

Each backend runs in its own process (a backend is chosen once per process) on the
same synthetic batches: training target tokens/s of the `small` preset in float32
(`fit` on fixed-shape batches, after warm-up), and cached greedy decoding target
tokens/s at batch 1 and 32 (`kt.generate`, compiled per backend). Attention runs
fused (`keras.ops.dot_product_attention`) or explicit, chosen with `KT_ATTENTION`.
Prints a Markdown table and writes the JSON rows to `--output`.

    python benchmarks/backends.py --seconds 20
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import best_rate, log, run_child, table, write_json  # noqa: E402

BACKENDS = ("tensorflow", "jax", "torch")
ATTENTION = ("explicit", "fused")


def measure(preset, seconds, batch_size=32, length=32, vocabulary_size=8000):
    """One backend and attention setting (from the environment): a dict of figures."""
    import keras
    import numpy as np

    import keras_transformer as kt

    rng = np.random.default_rng(0)
    ids = rng.integers(4, vocabulary_size, (batch_size, length)).astype("int32")
    features = {"encoder_token_ids": ids, "decoder_token_ids": ids}
    keras.utils.set_random_seed(0)
    model = kt.build_transformer(preset, vocabulary_size=vocabulary_size, dropout=0.0)
    kt.compile_transformer(model, jit_compile=keras.backend.backend() != "torch")
    for _ in range(3):  # compile and warm up
        model.train_on_batch(features, ids)
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        model.train_on_batch(features, ids)
        steps += 1
    training = steps * ids.size / (time.perf_counter() - started)

    decoding = {}
    source = np.concatenate([ids[:, :23], np.full((batch_size, 1), kt.END_ID, "int32")], 1)
    for batch in (1, 32):
        decoding[batch] = best_rate(
            lambda batch=batch: kt.generate(model, source[:batch], max_length=32), 3,
            lambda out: np.sum(out["token_ids"] != kt.PAD_ID))[1]
    return {"training_tokens_per_second": training,
            "greedy_batch_1_tokens_per_second": decoding[1],
            "greedy_batch_32_tokens_per_second": decoding[32]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="training time per row")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--output", default=None, help="write the rows as JSON here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.preset, args.seconds)))
        return
    rows = []
    for backend in BACKENDS:
        for attention in ATTENTION:
            done = run_child([sys.executable, __file__, "--child", "--preset", args.preset,
                              "--seconds", str(args.seconds)], None,
                             env={"KERAS_BACKEND": backend, "KT_ATTENTION": attention,
                                  "TF_CPP_MIN_LOG_LEVEL": "3"})
            if "error" in done:
                log(f"{backend} {attention}: failed: {done['error']}")
                continue
            row = {"backend": backend, "attention": attention, **done}
            rows.append(row)
            log(json.dumps(row))
    print("\n".join(table(
        ["backend", "attention", f"training tokens/s ({args.preset}, float32)",
         "greedy batch 1 tokens/s", "greedy batch 32 tokens/s"],
        [[row["backend"], row["attention"], f"{row['training_tokens_per_second']:,.0f}",
          f"{row['greedy_batch_1_tokens_per_second']:,.0f}",
          f"{row['greedy_batch_32_tokens_per_second']:,.0f}"] for row in rows])))
    write_json(args.output, rows)


if __name__ == "__main__":
    main()
