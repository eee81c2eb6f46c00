"""`BatchPlan` and `StoreBatches`: every pair once an epoch under the token budget, the
same batches for the same seed, a position computed from the step, workers' shares."""

import time

import numpy as np
import pytest

from keras_transformer.data import train_tokenizer
from keras_transformer.data.batch_plan import BatchPlan, StoreBatches
from keras_transformer.data.token_store import TokenStore, write_split
from keras_transformer.special_tokens import END_ID, PAD_ID, START_ID

LENGTHS = np.random.default_rng(0).integers(2, 60, size=2000)


def plan(**options):
    return BatchPlan(LENGTHS, **{"tokens_per_batch": 600, "max_sequence_length": 64,
                                 **options})


def test_an_epoch_holds_every_pair_once_within_the_budget():
    batches = plan().epoch(0)
    pairs = np.concatenate([rows for rows, _ in batches])
    assert sorted(pairs.tolist()) == list(range(len(LENGTHS)))
    longest = [int(LENGTHS[rows].max()) for rows, _ in batches]
    assert all(len(rows) * length <= 600 for (rows, _), length in zip(batches, longest,
                                                                      strict=True))


def test_epochs_differ_in_order_but_not_in_count_and_seeds_repeat():
    first, second = plan().epoch(0), plan().epoch(1)
    assert len(first) == len(second) == plan().num_batches
    assert [rows.tolist() for rows, _ in first] != [rows.tolist() for rows, _ in second]
    again = plan().epoch(1)
    assert [rows.tolist() for rows, _ in second] == [rows.tolist() for rows, _ in again]
    other = plan(seed=1).epoch(1)
    assert [rows.tolist() for rows, _ in second] != [rows.tolist() for rows, _ in other]


def test_a_batch_size_multiple_leaves_no_pair_out():
    batches = plan(batch_size_multiple=4).epoch(0)
    pairs = np.concatenate([rows for rows, _ in batches])
    assert sorted(pairs.tolist()) == list(range(len(LENGTHS)))
    full = [len(rows) for rows, bucket in batches if len(rows) == plan(
        batch_size_multiple=4).batch_sizes[bucket]]
    assert full and all(size % 4 == 0 for size in full)


def test_lengths_over_the_maximum_are_an_error():
    with pytest.raises(ValueError, match="must be at most `max_sequence_length` \\(8\\)"):
        BatchPlan([3, 9], tokens_per_batch=64, max_sequence_length=8)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    words = "der die das hund katze haus ist groß klein hier läuft schläft".split()
    rng = np.random.default_rng(0)
    pairs = [(" ".join(rng.choice(words, rng.integers(1, 20))) + ".",
              " ".join(rng.choice(words, rng.integers(1, 20))) + ".") for _ in range(300)]
    tokenizer = train_tokenizer([text for pair in pairs for text in pair], vocabulary_size=60)
    folder = str(tmp_path_factory.mktemp("store"))
    write_split(folder, "train", pairs, tokenizer)
    return TokenStore(folder, "train", "uint16")


def batches(store, **options):
    return StoreBatches(store, **{"tokens_per_batch": 256, "max_sequence_length": 16,
                                  **options})


def take(iterator, count):
    return [next(iterator) for _ in range(count)]


def assert_same(first, second):
    assert len(first) == len(second)
    for (features_a, labels_a), (features_b, labels_b) in zip(first, second, strict=True):
        np.testing.assert_array_equal(labels_a, labels_b)
        for key in features_a:
            np.testing.assert_array_equal(features_a[key], features_b[key])


def test_rows_are_the_teacher_forcing_shift_of_the_stored_pieces(store):
    stream = batches(store, long_sequences="truncate", shuffle=False)
    features, labels = next(stream.iterate())
    pair = stream.pairs[stream.plan.epoch(0)[0][0][0]]
    source, target = store.source(pair)[:15], store.target(pair)[:15]
    row = features["encoder_token_ids"][0]
    np.testing.assert_array_equal(row[:len(source) + 1], [*source, END_ID])
    assert (row[len(source) + 1:] == PAD_ID).all()
    np.testing.assert_array_equal(features["decoder_token_ids"][0][:len(target) + 1],
                                  [START_ID, *target])
    np.testing.assert_array_equal(labels[0][:len(target) + 1], [*target, END_ID])


def test_starting_at_a_step_gives_the_batches_an_uninterrupted_stream_gives_there(store):
    stream = batches(store)
    per_epoch = stream.num_batches
    uninterrupted = take(stream.iterate(), 3 * per_epoch)
    for start in (1, per_epoch - 1, per_epoch + 2, 2 * per_epoch):
        resumed = take(batches(store).iterate(start), 3 * per_epoch - start)
        assert_same(resumed, uninterrupted[start:])


def test_short_batches_get_rows_of_padding_not_fewer_pairs(store):
    for options in ({"batch_size_multiple": 3}, {"pad_to_bucket": True}):
        stream = batches(store, **options)
        real_rows = 0
        for rows, bucket in stream.plan.epoch(0):
            features, labels = stream.batch(rows, bucket)
            expected = (stream.plan.batch_sizes[bucket] if "pad_to_bucket" in options
                        else -(-len(rows) // 3) * 3)
            assert len(labels) == expected
            assert labels[:len(rows)].any(axis=1).all() and not labels[len(rows):].any()
            assert not features["decoder_token_ids"][len(rows):].any()
            real_rows += len(rows)
        assert real_rows == len(stream.pairs)


def test_workers_read_disjoint_shares_that_make_the_global_batch(store):
    whole = take(batches(store, batch_size_multiple=2).iterate(), 40)
    shares = [take(batches(store, batch_size_multiple=2, worker=(i, 2)).iterate(), 40)
              for i in range(2)]
    for step, (_, labels) in enumerate(whole):
        width = labels.shape[1]  # a share pads to its own longest
        rows = np.concatenate([np.pad(share[step][1], [(0, 0), (0, width - share[step][1]
                                                                .shape[1])])
                               for share in shares])
        np.testing.assert_array_equal(rows, labels)


def test_drop_and_sentences_only_filter_pairs(store):
    assert len(batches(store, long_sequences="drop").pairs) < len(store)
    assert len(batches(store, long_sequences="truncate").pairs) == len(store)
    with pytest.raises(ValueError, match="sentence pairs only"):
        store.sentences[:] = False
        batches(store, sentences_only=True)


def test_statistics_match_the_batches(store):
    stream = batches(store, seed=3)
    real = padded = 0
    for features, _ in stream.iterate(epochs=1):
        for ids in features.values():
            real += int((ids != PAD_ID).sum())
            padded += ids.size
    statistics = stream.statistics()
    assert (statistics["real_tokens"], statistics["tokens"]) == (real, padded)
    assert statistics["largest_side_tokens"] <= 256


def test_a_start_a_billion_steps_in_reads_only_its_own_epoch(store):
    stream = batches(store)
    started = time.perf_counter()
    features, labels = next(stream.iterate(10**9))
    assert time.perf_counter() - started < 1.0  # a replay would take hours
    epoch, batch = stream.plan.position(10**9)
    np.testing.assert_array_equal(labels, stream.batch(*stream.plan.epoch(epoch)[batch])[1])
