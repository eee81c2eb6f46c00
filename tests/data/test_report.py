import random

from keras_transformer.data import compare_padding


def test_compare_padding_small(small_tokenizer, small_pairs):
    report = compare_padding(small_pairs * 3, small_tokenizer, 64, 32, seed=0)
    bucketed, naive = report["bucketed"], report["naive"]
    assert bucketed["sentences"] == naive["sentences"] == 3 * len(small_pairs)
    assert bucketed["real_tokens"] == naive["real_tokens"]
    assert bucketed["largest_side_tokens"] <= 64
    assert 0 < naive["padding_efficiency"] <= bucketed["padding_efficiency"] <= 1


def test_real_padding_efficiency(real_tokenizer, real_splits):
    # A seeded 100k sample of the train split keeps the test fast; prepare's report
    # measures the whole split (87% bucketed, 16% naive with 25k tokens per batch).
    pairs = random.Random(0).sample(real_splits["train"], 100_000)
    report = compare_padding(pairs, real_tokenizer, tokens_per_batch=25_000, seed=0)
    bucketed, naive = report["bucketed"], report["naive"]
    print(
        f"padding efficiency: bucketed {bucketed['padding_efficiency']:.1%} "
        f"({bucketed['batches']} batches), naive {naive['padding_efficiency']:.1%} "
        f"({naive['batches']} batches)"
    )
    assert bucketed["largest_side_tokens"] <= 25_000
    assert bucketed["padding_efficiency"] >= 0.85
    assert naive["padding_efficiency"] < bucketed["padding_efficiency"]
