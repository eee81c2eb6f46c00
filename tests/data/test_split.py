import hashlib

from keras_transformer.data import is_sentence_pair, load_ding, sentence_pairs_only, split_pairs


def test_is_sentence_pair():
    assert is_sentence_pair("Wie spät ist es?", "What time is it?")
    assert is_sentence_pair("Komm sofort her!", "Come here at once!")
    assert not is_sentence_pair("wie spät ist es?", "What time is it?")  # lower-case start
    assert not is_sentence_pair("Er kommt.", "He comes.")  # 2 words
    assert not is_sentence_pair("Wie spät ist es?", "What time is it")  # no end mark
    assert not is_sentence_pair("Aas", "carrion")


def test_split_follows_the_md5_rule(small_pairs):
    splits = split_pairs(small_pairs)
    assert sum(len(split) for split in splits.values()) == len(small_pairs)
    for name, bucket in (("test", 0), ("validation", 1)):
        for source, target in splits[name]:
            assert is_sentence_pair(source, target)
            assert int(hashlib.md5(source.encode()).hexdigest(), 16) % 10 == bucket
    assert ("Wie spät ist es?", "What time is it?") in splits["test"]
    assert ("Er ist krank.", "He is ill.") in splits["validation"]
    # Phrase pairs always train, whatever their hash.
    phrases = [pair for pair in small_pairs if not is_sentence_pair(*pair)]
    assert all(pair in splits["train"] for pair in phrases)
    assert sentence_pairs_only(small_pairs) == [p for p in small_pairs if p not in phrases]


def test_real_split_sizes_and_determinism(real_splits, real_pairs, ding_path):
    assert 1_600 <= len(real_splits["test"]) <= 2_200
    assert 1_600 <= len(real_splits["validation"]) <= 2_200
    assert not set(real_splits["test"]) & set(real_splits["train"])
    assert 15_000 <= len(sentence_pairs_only(real_pairs)) <= 22_000
    # A fresh load gives the very same split.
    again = split_pairs(load_ding(ding_path))
    assert again["test"] == real_splits["test"]
    assert again["validation"] == real_splits["validation"]
