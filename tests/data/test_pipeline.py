import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data import (
    batch_by_token_budget,
    bucket_boundaries,
    encode_pairs,
    make_dataset,
    teacher_forcing,
)
from keras_transformer.special_tokens import END_ID, PAD_ID, START_ID


def batches_as_numpy(dataset):
    return [
        (features["encoder_token_ids"].numpy(), features["decoder_token_ids"].numpy(), y.numpy())
        for features, y in dataset
    ]


def test_teacher_forcing_on_a_ragged_batch():
    source = tf.ragged.constant([[5, 6], []], dtype=tf.int32)
    target = tf.ragged.constant([[7], [8, 9]], dtype=tf.int32)
    features, labels = teacher_forcing(source, target)
    assert features["encoder_token_ids"].to_list() == [[5, 6, END_ID], [END_ID]]
    assert features["decoder_token_ids"].to_list() == [[START_ID, 7], [START_ID, 8, 9]]
    assert labels.to_list() == [[7, END_ID], [8, 9, END_ID]]


def test_examples_follow_the_contract(small_tokenizer, small_pairs):
    examples = list(encode_pairs(small_pairs, small_tokenizer, max_sequence_length=64))
    assert len(examples) == len(small_pairs)
    for (source, target), (features, labels) in zip(small_pairs, examples, strict=True):
        pieces = small_tokenizer.tokenize([source, target]).to_list()
        assert features["encoder_token_ids"].numpy().tolist() == pieces[0] + [END_ID]
        assert features["decoder_token_ids"].numpy().tolist() == [START_ID] + pieces[1]
        assert labels.numpy().tolist() == pieces[1] + [END_ID]


def test_long_sequences_drop_or_truncate(small_tokenizer, small_pairs):
    lengths = [
        max(len(s), len(t)) + 1
        for s, t in zip(
            small_tokenizer.tokenize([p[0] for p in small_pairs]).to_list(),
            small_tokenizer.tokenize([p[1] for p in small_pairs]).to_list(),
            strict=True,
        )
    ]
    limit = sorted(lengths)[len(lengths) // 2]
    kept = list(encode_pairs(small_pairs, small_tokenizer, limit, long_sequences="drop"))
    assert len(kept) == sum(length <= limit for length in lengths) < len(small_pairs)
    cut = list(encode_pairs(small_pairs, small_tokenizer, limit, long_sequences="truncate"))
    assert len(cut) == len(small_pairs)
    for features, labels in cut:
        assert len(features["encoder_token_ids"]) <= limit
        assert len(labels) == len(features["decoder_token_ids"]) <= limit
        assert features["encoder_token_ids"][-1] == END_ID and labels[-1] == END_ID


def test_batches_respect_budget_and_teacher_forcing(small_tokenizer, small_pairs):
    dataset = make_dataset(
        small_pairs * 4, small_tokenizer, tokens_per_batch=64, max_sequence_length=32, seed=1
    )
    spec = dataset.element_spec
    assert spec[0]["encoder_token_ids"].dtype == tf.int32 and spec[1].dtype == tf.int32
    assert spec[0]["encoder_token_ids"].shape.as_list() == [None, None]
    sentences = 0
    for encoder, decoder, labels in batches_as_numpy(dataset):
        assert encoder.size <= 64 and decoder.size <= 64
        assert decoder.shape == labels.shape
        sentences += len(encoder)
        real = decoder != PAD_ID
        np.testing.assert_array_equal(real, labels != PAD_ID)
        # Position by position: the decoder sees START then the labels shifted right.
        assert (decoder[:, 0] == START_ID).all()
        np.testing.assert_array_equal(decoder[:, 1:][real[:, 1:]], labels[:, :-1][real[:, 1:]])
        last = real.sum(axis=1) - 1
        assert (labels[np.arange(len(labels)), last] == END_ID).all()
        assert (encoder[np.arange(len(encoder)), (encoder != PAD_ID).sum(1) - 1] == END_ID).all()
    assert sentences == 4 * len(small_pairs)


def test_seeded_shuffle_is_deterministic_and_repeat(small_tokenizer, small_pairs):
    def first_batches(seed, repeat=False):
        dataset = make_dataset(small_pairs, small_tokenizer, 64, 32, seed=seed, repeat=repeat)
        return [b[0].tolist() for b in batches_as_numpy(dataset.take(3))]

    assert first_batches(3) == first_batches(3)
    assert first_batches(3) != first_batches(4)
    repeated = make_dataset(small_pairs, small_tokenizer, 64, 32, seed=0, repeat=True)
    assert sum(len(b[0]) for b in batches_as_numpy(repeated.take(50))) > len(small_pairs)
    unshuffled = make_dataset(small_pairs, small_tokenizer, 64, 32, shuffle=False)
    assert sum(len(b[0]) for b in batches_as_numpy(unshuffled)) == len(small_pairs)


def test_bucket_boundaries_and_batch_sizes():
    boundaries = bucket_boundaries(256)
    assert boundaries[:3] == [2, 3, 4] and boundaries[-1] <= 256
    assert all(b > a for a, b in zip(boundaries, boundaries[1:], strict=False))


def test_argument_errors(small_tokenizer, small_pairs):
    with pytest.raises(ValueError, match="`long_sequences` must be one of"):
        encode_pairs(small_pairs, small_tokenizer, long_sequences="cut")
    with pytest.raises(ValueError, match="`max_sequence_length` must be an integer of at least 2"):
        encode_pairs(small_pairs, small_tokenizer, max_sequence_length=1)
    examples = encode_pairs(small_pairs, small_tokenizer, max_sequence_length=32)
    with pytest.raises(ValueError, match="`tokens_per_batch` must be an integer of at least"):
        batch_by_token_budget(examples, tokens_per_batch=16, max_sequence_length=32)
    with pytest.raises(ValueError, match="`pairs` must hold at least one"):
        make_dataset([], small_tokenizer)


def test_batch_size_multiple(small_tokenizer, small_pairs):
    examples = encode_pairs(small_pairs * 3, small_tokenizer, max_sequence_length=32)
    batches = batch_by_token_budget(examples, 96, 32, batch_size_multiple=3)
    sizes = [len(labels) for _, labels in batches]
    assert all(size % 3 == 0 and size > 0 for size in sizes)
    # Only the remainders (fewer than 3 a bucket) are dropped.
    assert 3 * len(small_pairs) - 2 * len(bucket_boundaries(32)) <= sum(sizes)
    with pytest.raises(ValueError, match="`batch_size_multiple` must be a positive integer"):
        batch_by_token_budget(examples, 96, 32, batch_size_multiple=0)
    with pytest.raises(ValueError, match=r"`max_sequence_length \* batch_size_multiple` \(96\)"):
        batch_by_token_budget(examples, 95, 32, batch_size_multiple=3)
