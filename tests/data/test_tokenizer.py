import io
import unicodedata

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from keras_transformer.data import Tokenizer, train_tokenizer, unknown_share
from keras_transformer.special_tokens import END_ID, PAD_ID, START_ID, UNK_ID


def test_fixed_special_ids(small_tokenizer):
    processor = sentencepiece.SentencePieceProcessor(model_proto=small_tokenizer.model_bytes)
    assert (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id()) == (
        PAD_ID,
        UNK_ID,
        START_ID,
        END_ID,
    )
    assert small_tokenizer.vocabulary_size == processor.get_piece_size() <= 200


def test_tokenize_round_trip(small_tokenizer, small_pairs):
    texts = [text for pair in small_pairs for text in pair]
    ids = small_tokenizer.tokenize(texts)
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    assert not np.isin(ids.flat_values.numpy(), [PAD_ID, START_ID, END_ID]).any()
    assert [text.decode() for text in small_tokenizer.detokenize(ids).numpy()] == texts


def test_detokenize_drops_special_ids_from_padded_ids(small_tokenizer):
    pieces = small_tokenizer.tokenize(["Ich bin hier.", "Hund"])
    padded = tf.concat(
        [tf.fill([2, 1], START_ID), pieces.to_tensor(), tf.fill([2, 1], END_ID)], axis=1
    )
    padded = tf.pad(padded, [[0, 0], [0, 3]])  # trailing PAD_ID
    assert small_tokenizer.detokenize(padded).numpy().tolist() == [b"Ich bin hier.", b"Hund"]
    single = small_tokenizer.detokenize(padded[0])
    assert single.shape == () and single.numpy() == b"Ich bin hier."


def test_tokenize_in_graph(small_tokenizer):
    dataset = tf.data.Dataset.from_tensor_slices(["Wie spät ist es?"]).map(small_tokenizer.tokenize)
    (ids,) = list(dataset)
    assert small_tokenizer.detokenize(ids).numpy().decode() == "Wie spät ist es?"


def test_from_file_and_save(small_tokenizer, tmp_path):
    path = str(tmp_path / "tokenizer.model")
    small_tokenizer.save(path)
    loaded = Tokenizer.from_file(path)
    assert loaded.model_bytes == small_tokenizer.model_bytes
    ids = loaded.tokenize(["Guter Wein muss reifen."])
    assert ids.to_list() == small_tokenizer.tokenize(["Guter Wein muss reifen."]).to_list()


def test_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="Tokenizer file not found"):
        Tokenizer.from_file(str(tmp_path / "missing.model"))
    with pytest.raises(ValueError, match="`vocabulary_size` must be an int above 4"):
        train_tokenizer(["a b c"], vocabulary_size=3)
    with pytest.raises(ValueError, match="`texts` must hold at least one"):
        train_tokenizer([" ", ""])
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(["ein Hund", "a dog"] * 5),
        model_writer=model,
        vocab_size=20,
        hard_vocab_limit=False,
        minloglevel=2,
    )  # default ids: unk=0, bos=1, eos=2, no pad
    with pytest.raises(ValueError, match="pad_id=0, unk_id=1, bos_id=2 and eos_id=3"):
        Tokenizer(model.getvalue())


def test_python_api_gives_the_graph_ops_ids_and_strings(real_tokenizer, real_splits):
    # Translator uses SentencePiece's Python API; tf.data and the SavedModel use the ops.
    texts = [text for pair in real_splits["test"][:1000] for text in pair]
    texts += ["  doppelte  Leerzeichen ", "Ünïcödé … ﬁ", "", "\u00e4\u0308 \U0001f600"]
    graph_ids = real_tokenizer.tokenize(texts).to_list()
    assert real_tokenizer.encode_as_ids(texts) == graph_ids
    padded = [ids + [PAD_ID, END_ID] for ids in graph_ids]
    graph_strings = [s.decode() for s in real_tokenizer.detokenize(
        tf.ragged.constant(padded, dtype=tf.int32)).numpy()]
    assert real_tokenizer.decode_ids(padded) == graph_strings


def test_real_round_trip_and_unknown_share(real_tokenizer, real_splits):
    assert real_tokenizer.vocabulary_size == 8000
    test_texts = [text for pair in real_splits["test"] for text in pair]
    # Ordinary sentences (unchanged by NFKC, single spaces) come back exactly.
    ordinary = [t for t in test_texts if unicodedata.normalize("NFKC", t) == t][:2000]
    assert len(ordinary) > 1500
    decoded = real_tokenizer.detokenize(real_tokenizer.tokenize(ordinary)).numpy()
    assert [text.decode() for text in decoded] == ordinary
    assert unknown_share(real_tokenizer, test_texts) < 0.01


def test_saved_model_keeps_the_tokenizer(small_tokenizer, tmp_path):
    module = tf.Module()
    module.tokenizer = small_tokenizer.graph_tokenizer
    module.round_trip = tf.function(
        lambda strings: small_tokenizer.detokenize(small_tokenizer.tokenize(strings)),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    tf.saved_model.save(module, str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    assert loaded.round_trip(tf.constant(["Ich bin hier."])).numpy().tolist() == [b"Ich bin hier."]


def test_tokenizer_survives_reseeding():
    import keras

    from keras_transformer.data import train_tokenizer

    tokenizer = train_tokenizer(["Guten Morgen.", "Good morning."] * 10, vocabulary_size=40)
    before = tokenizer.tokenize(["Guten Morgen."]).to_list()
    keras.utils.set_random_seed(3)
    assert tokenizer.tokenize(["Guten Morgen."]).to_list() == before
    assert tokenizer.detokenize(before).numpy().tolist() == [b"Guten Morgen."]


def test_tokenizer_survives_reseeding_inside_tf_data():
    import keras

    tokenizer = train_tokenizer(["Guten Morgen.", "Good morning."] * 10, vocabulary_size=40)
    before = tokenizer.tokenize(["Guten Morgen."]).to_list()
    keras.utils.set_random_seed(3)  # drops the SentencePiece resource
    dataset = tf.data.Dataset.from_tensor_slices(["Guten Morgen."]).map(tokenizer.tokenize)
    assert [ids.numpy().tolist() for ids in dataset] == before
