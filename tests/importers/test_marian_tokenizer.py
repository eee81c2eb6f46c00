import json
import os
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data.marian_tokenizer import (
    _GRAPH_STRIP,
    MarianTokenizer,
    is_marian_directory,
    marian_id_order,
)
from keras_transformer.special_tokens import END_ID, PAD_ID, START_ID, UNK_ID
from tests.importers.marian_fixtures import write_marian_snapshot

transformers = pytest.importorskip("transformers")

# Literal special strings and unknown characters inside texts, as users may write them.
SPECIAL_TEXTS = [
    "Der Hund </s> mag<unk>den Ball!<pad>",
    "</s></s>",
    "<pad>",
    "x</s>y",
    "<<unk>>",
    "😀",
]


def hugging_face(snapshot):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses."
        return transformers.MarianTokenizer.from_pretrained(snapshot)


def copy_snapshot(snapshot, tmp_path):
    return shutil.copytree(snapshot, tmp_path / "snapshot")


def edit_json(path, **changes):
    content = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as file:
            content = json.load(file)
    for key, value in changes.items():
        if value is None:
            content.pop(key, None)
        else:
            content[key] = value
    with open(path, "w", encoding="utf-8") as file:
        json.dump(content, file)


@pytest.fixture(scope="module", params=["shared", "separate"])
def snapshot(request):
    return request.getfixturevalue(f"marian_{request.param}")


@pytest.fixture(scope="module")
def tokenizers(snapshot):
    return MarianTokenizer.from_snapshot(snapshot), hugging_face(snapshot)


@pytest.fixture(scope="module")
def marian_codes(tmp_path_factory):
    """A shared snapshot whose vocabulary lists language codes, as multilingual OPUS-MT do."""
    return write_marian_snapshot(tmp_path_factory.mktemp("marian_codes"),
                                 language_codes=[">>fr<<", ">>en_US<<"])


def test_marian_id_order():
    vocabulary = {"</s>": 0, "<unk>": 1, "a": 2, "b": 3, "<pad>": 4}
    assert marian_id_order(vocabulary, pad_id=4, eos_id=0, unk_id=1, start_id=4) == [
        4, 1, 4, 0, 2, 3]
    # Any ids: a separate start id appears once, unk need not be 1, ids need not start at 0.
    vocabulary = {"<unk>": 7, "<s>": 9, "x": 5, "</s>": 6, "<pad>": 8, "y": 10}
    assert marian_id_order(vocabulary, pad_id=8, eos_id=6, unk_id=7, start_id=9) == [
        8, 7, 9, 6, 5, 10]
    with pytest.raises(ValueError, match="`pad_id`, `eos_id` and `unk_id` must be three"):
        marian_id_order({"</s>": 0, "<pad>": 1}, pad_id=1, eos_id=0, unk_id=0, start_id=1)
    with pytest.raises(ValueError, match=r"`unk_id`=5 is not an id of the vocabulary"):
        marian_id_order({"</s>": 0, "<pad>": 1}, pad_id=1, eos_id=0, unk_id=5, start_id=1)
    with pytest.raises(ValueError, match="gives the id 1 to both 'a' and 'b'"):
        marian_id_order({"</s>": 0, "a": 1, "b": 1}, pad_id=1, eos_id=0, unk_id=1, start_id=1)
    with pytest.raises(ValueError, match="`start_id`=0 must not be the eos or unk id"):
        marian_id_order({"</s>": 0, "<unk>": 1, "<pad>": 2}, pad_id=2, eos_id=0, unk_id=1,
                        start_id=0)


def test_from_snapshot_orders_and_pieces(tokenizers, snapshot):
    ours, _ = tokenizers
    with open(os.path.join(snapshot, "config.json")) as file:
        config = json.load(file)
    pad = config["pad_token_id"]
    assert pad == config["vocab_size"] - 1
    for order, pieces, file in [(ours.source_order, ours.source_pieces, "vocab.json"),
                                (ours.target_order, ours.target_pieces,
                                 "vocab.json" if ours.shared else "target_vocab.json")]:
        with open(os.path.join(snapshot, file), encoding="utf-8") as handle:
            vocabulary = json.load(handle)
        assert order == [pad, 1, pad, 0] + list(range(2, pad))
        assert len(pieces) == len(vocabulary) + 1  # the pad row twice
        marian_piece = {i: piece for piece, i in vocabulary.items()}
        assert [marian_piece[i] for i in order[4:]] == pieces[4:]
        assert pieces[:4] == ["<pad>", "<unk>", "<start>", "</s>"]
    with open(os.path.join(snapshot, "tokenizer_config.json")) as file:
        assert ours.shared == (not json.load(file)["separate_vocabs"])
    assert ours.vocabulary_size == len(ours.target_pieces)
    assert ours.source_vocabulary_size == len(ours.source_pieces)
    assert ours.id_to_piece(END_ID) == "</s>"


def test_source_ids_equal_hugging_face(tokenizers, marian_sentences):
    ours, theirs = tokenizers
    texts = marian_sentences + SPECIAL_TEXTS
    expected = theirs(texts)["input_ids"]
    ids = ours.encode_as_ids(texts)
    assert [[ours.source_order[i] for i in row] + [theirs.eos_token_id] for row in ids] == expected
    assert UNK_ID in ids[texts.index("Unbekannt: 😀 漢字 Ω")]
    assert ids[texts.index("</s></s>")] == [END_ID, END_ID]
    assert max(max(row, default=0) for row in ids) >= 40  # the pieces, not only specials


def test_target_ids_equal_hugging_face(tokenizers, marian_target_sentences):
    ours, theirs = tokenizers
    texts = marian_target_sentences + SPECIAL_TEXTS
    expected = theirs(text_target=texts)["input_ids"]
    ids = ours.encode_targets_as_ids(texts)
    assert [[ours.target_order[i] for i in row] + [theirs.eos_token_id] for row in ids] == expected
    if not ours.shared:  # a target-only vocabulary gives other ids than the source one
        assert ids != ours.encode_as_ids(texts)


def test_decode_equals_hugging_face(tokenizers, marian_target_sentences):
    ours, theirs = tokenizers
    ids = ours.encode_targets_as_ids(marian_target_sentences)
    rng = np.random.default_rng(0)
    ids += [rng.integers(0, ours.vocabulary_size, size=n).tolist() for n in range(0, 60, 2)]
    ids += [[START_ID, 9, UNK_ID, 10, END_ID, PAD_ID, PAD_ID], [UNK_ID, PAD_ID, START_ID]]
    expected = theirs.batch_decode([[ours.target_order[i] for i in row] for row in ids],
                                   skip_special_tokens=True)
    assert ours.decode_ids(ids) == expected
    # Ordinary sentences come back.
    assert ours.decode_ids(ids[:3]) == marian_target_sentences[:3]
    padded = np.zeros((2, 8), np.int32)
    padded[0, :3] = ids[0][:3]
    assert ours.decode_ids(padded) == ours.decode_ids([ids[0][:3], []])
    with pytest.raises(ValueError, match=r"Id -1 is outside the target vocabulary \(ids 0 to"):
        ours.decode_ids([[5, -1]])
    with pytest.raises(ValueError, match=f"Id {ours.vocabulary_size} is outside"):
        ours.decode_ids([[ours.vocabulary_size]])


def test_language_codes_equal_hugging_face(marian_codes):
    ours, theirs = MarianTokenizer.from_snapshot(marian_codes), hugging_face(marian_codes)
    texts = [">>fr<< Der Hund mag den Ball.", ">>en_US<<Hund", ">>xx<< unbekannter Code",
             ">>fr<<", " >>fr<< nicht am Anfang", "Mitten >>fr<< drin", "</s>>>fr<<Hund",
             ">>a\nb<< Zeile", ">> ohne Ende", ">><<leer"]
    for encode, order, expected in [
        (ours.encode_as_ids, ours.source_order, theirs(texts)["input_ids"]),
        (ours.encode_targets_as_ids, ours.target_order, theirs(text_target=texts)["input_ids"]),
    ]:
        ids = encode(texts)
        assert [[order[i] for i in row] + [0] for row in ids] == expected
    fr = ours.source_pieces.index(">>fr<<")
    assert ours.encode_as_ids([">>fr<<"]) == [[fr]]
    assert ours.encode_as_ids([">>xx<<"]) == [[UNK_ID]]
    # A code decodes as its text, as with Hugging Face.
    rows = [[fr, 20, 21], [22, fr]]
    assert ours.decode_ids(rows) == theirs.batch_decode(
        [[ours.target_order[i] for i in row] for row in rows], skip_special_tokens=True)
    assert ours.tokenize(texts).to_list() == ours.encode_as_ids(texts)
    assert [s.decode() for s in ours.detokenize(tf.ragged.constant(rows)).numpy()] == (
        ours.decode_ids(rows))


def test_clean_up_tokenization_spaces_equals_hugging_face(marian_shared, tmp_path):
    folder = copy_snapshot(marian_shared, tmp_path)
    edit_json(folder / "tokenizer_config.json", clean_up_tokenization_spaces=True)
    ours, theirs = MarianTokenizer.from_snapshot(folder), hugging_face(folder)
    texts = ["The dog 's ball , isn't it ?", "I 'm here . You 're there !", "it ' s"]
    ids = ours.encode_targets_as_ids(texts)
    decoded = ours.decode_ids(ids)
    assert decoded == theirs.batch_decode([[ours.target_order[i] for i in row] for row in ids],
                                          skip_special_tokens=True)
    assert decoded[0] == "The dog's ball, isn't it?"
    graph = ours.detokenize(tf.ragged.constant(ids)).numpy()
    assert [s.decode() for s in graph] == decoded
    ours.save(tmp_path / "saved")
    assert MarianTokenizer.from_directory(tmp_path / "saved").decode_ids(ids) == decoded


def test_graph_ops_equal_python(tokenizers, marian_sentences, marian_target_sentences):
    ours, _ = tokenizers
    sources = marian_sentences + SPECIAL_TEXTS
    ids = ours.tokenize(sources)
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    assert ids.to_list() == ours.encode_as_ids(sources)
    targets = marian_target_sentences + SPECIAL_TEXTS
    target_ids = ours.encode_targets_as_ids(targets)
    assert ours.tokenize_targets(tf.constant(targets)).to_list() == target_ids
    single = ours.tokenize(sources[0])
    assert single.dtype == tf.int32
    assert single.numpy().tolist() == ours.encode_as_ids(sources[:1])[0]
    assert ours.tokenize([]).to_list() == []

    rng = np.random.default_rng(1)
    rows = target_ids + [rng.integers(0, ours.vocabulary_size, size=n).tolist()
                         for n in range(0, 60, 3)]
    expected = ours.decode_ids(rows)
    ragged = tf.ragged.constant(rows, dtype=tf.int32)
    assert [s.decode() for s in ours.detokenize(ragged).numpy()] == expected
    dense = ragged.to_tensor(default_value=PAD_ID)  # padded with PAD_ID, as models output
    assert [s.decode() for s in ours.detokenize(dense).numpy()] == expected
    one = ours.detokenize(dense[0])
    assert one.shape == () and one.numpy().decode() == expected[0]
    assert ours.detokenize(tf.cast(dense, tf.int64)).numpy().tolist() == [
        s.encode() for s in expected]


def test_graph_ops_in_tf_data_after_reseeding(marian_shared, marian_sentences):
    import keras

    tokenizer = MarianTokenizer.from_snapshot(marian_shared)
    texts = marian_sentences[:4]
    expected = tokenizer.encode_as_ids(texts)

    def tokenized():  # the graph tokenizer is first built inside tf.data's trace
        dataset = tf.data.Dataset.from_tensor_slices(texts).map(tokenizer.tokenize)
        return [ids.numpy().tolist() for ids in dataset]

    assert tokenized() == expected
    keras.utils.set_random_seed(3)  # clears TensorFlow's eager kernel cache
    assert tokenized() == expected
    assert tokenizer.tokenize(texts).to_list() == expected
    assert tokenizer.detokenize(tf.ragged.constant(expected)).numpy().tolist() == [
        s.encode() for s in tokenizer.decode_ids(expected)]


def test_saved_model_keeps_the_tokenizer(tokenizers, marian_sentences, marian_target_sentences,
                                         tmp_path):
    ours, _ = tokenizers
    module = tf.Module()
    module.tokenizer = ours.graph_tokenizer
    strings = tf.TensorSpec([None], tf.string)
    module.tokenize = tf.function(lambda s: ours.tokenize(s).to_tensor(-1),
                                  input_signature=[strings])
    module.tokenize_targets = tf.function(lambda s: ours.tokenize_targets(s).to_tensor(-1),
                                          input_signature=[strings])
    module.detokenize = tf.function(ours.detokenize,
                                    input_signature=[tf.TensorSpec([None, None], tf.int32)])
    tf.saved_model.save(module, str(tmp_path / "saved"))
    del module
    loaded = tf.saved_model.load(str(tmp_path / "saved"))

    def rows(padded):
        return [[i for i in row if i != -1] for row in padded.numpy().tolist()]

    sources = marian_sentences + SPECIAL_TEXTS
    assert rows(loaded.tokenize(tf.constant(sources))) == ours.encode_as_ids(sources)
    targets = marian_target_sentences + SPECIAL_TEXTS
    target_ids = ours.encode_targets_as_ids(targets)
    assert rows(loaded.tokenize_targets(tf.constant(targets))) == target_ids
    padded = tf.ragged.constant(target_ids, dtype=tf.int32).to_tensor(default_value=PAD_ID)
    assert [s.decode() for s in loaded.detokenize(padded).numpy()] == (
        ours.decode_ids(target_ids))


def test_save_and_from_directory(tokenizers, marian_sentences, marian_target_sentences,
                                 tmp_path):
    ours, _ = tokenizers
    assert not is_marian_directory(tmp_path)
    ours.save(tmp_path / "model")
    assert is_marian_directory(tmp_path / "model") and is_marian_directory(str(tmp_path / "model"))
    with open(tmp_path / "model" / "vocabulary.json", encoding="utf-8") as file:
        vocabulary = json.load(file)
    assert vocabulary["source"] == ours.source_pieces
    assert vocabulary["target"] == (None if ours.shared else ours.target_pieces)
    loaded = MarianTokenizer.from_directory(tmp_path / "model")
    assert (loaded.shared, loaded.source_pieces, loaded.target_pieces) == (
        ours.shared, ours.source_pieces, ours.target_pieces)
    assert (loaded.source_model, loaded.target_model) == (ours.source_model, ours.target_model)
    assert loaded.encode_as_ids(marian_sentences) == ours.encode_as_ids(marian_sentences)
    target_ids = ours.encode_targets_as_ids(marian_target_sentences)
    assert loaded.encode_targets_as_ids(marian_target_sentences) == target_ids
    assert loaded.decode_ids(target_ids) == ours.decode_ids(target_ids)
    assert loaded.tokenize(marian_sentences).to_list() == ours.encode_as_ids(marian_sentences)
    assert loaded.source_order is None  # the permutation is only needed at import

    os.remove(tmp_path / "model" / "target.spm")
    assert not is_marian_directory(tmp_path / "model")
    with pytest.raises(FileNotFoundError, match=r"tokenizer file not found: `.*target\.spm`"):
        MarianTokenizer.from_directory(tmp_path / "model")
    with open(tmp_path / "model" / "target.spm", "wb") as file:
        file.write(ours.target_model)
    with open(tmp_path / "model" / "vocabulary.json", "w") as file:
        json.dump(["<pad>"], file)
    with pytest.raises(ValueError, match=r'must hold \{"source": \[pieces...\]'):
        MarianTokenizer.from_directory(tmp_path / "model")


def test_constructor_errors(tokenizers):
    ours, _ = tokenizers
    model = ours.source_model
    pieces = list(ours.source_pieces)
    with pytest.raises(ValueError, match="lists '</s>' twice"):
        MarianTokenizer(model, model, pieces + ["</s>"])
    with pytest.raises(ValueError, match="`source_pieces` must be a list of strings"):
        MarianTokenizer(model, model, pieces[:3])
    with pytest.raises(ValueError, match=r"`target_pieces\[0\]` \('<PAD>'\) must be"):
        MarianTokenizer(model, model, pieces, ["<PAD>"] + pieces[1:])
    with pytest.raises(ValueError, match="`target_model` must be a serialized SentencePiece"):
        MarianTokenizer(model, b"not a model", pieces)


@pytest.mark.parametrize("missing", ["config.json", "vocab.json", "source.spm", "target.spm"])
def test_from_snapshot_missing_files(marian_shared, tmp_path, missing):
    folder = copy_snapshot(marian_shared, tmp_path)
    os.remove(folder / missing)
    with pytest.raises(FileNotFoundError, match=rf"`.*/{missing}` is missing\. A Hugging Face "
                                                r"OPUS-MT snapshot holds .*snapshot_download"):
        MarianTokenizer.from_snapshot(folder)


def test_from_snapshot_missing_target_vocabulary(marian_separate, tmp_path):
    folder = copy_snapshot(marian_separate, tmp_path)
    os.remove(folder / "target_vocab.json")
    with pytest.raises(FileNotFoundError, match=r"target_vocab\.json` is missing\. "
                                                "tokenizer_config.json sets `separate_vocabs"):
        MarianTokenizer.from_snapshot(folder)


def test_from_snapshot_reads_legacy_special_tokens_map(marian_separate, tmp_path,
                                                      marian_target_sentences):
    folder = copy_snapshot(marian_separate, tmp_path)
    edit_json(folder / "special_tokens_map.json", eos_token="</s>", unk_token="<unk>",
              pad_token={"content": "<pad>", "lstrip": False, "rstrip": False})
    ours, theirs = MarianTokenizer.from_snapshot(folder), hugging_face(folder)
    texts = marian_target_sentences + SPECIAL_TEXTS
    ids = ours.encode_targets_as_ids(texts)
    assert [[ours.target_order[i] for i in row] + [0] for row in ids] == (
        theirs(text_target=texts)["input_ids"])


def test_from_snapshot_without_tokenizer_config_is_shared(marian_shared, tmp_path,
                                                          marian_sentences):
    folder = copy_snapshot(marian_shared, tmp_path)
    os.remove(folder / "tokenizer_config.json")  # Hugging Face's defaults: one vocabulary
    ours, theirs = MarianTokenizer.from_snapshot(folder), hugging_face(folder)
    assert ours.shared
    ids = ours.encode_as_ids(marian_sentences)
    assert [[ours.source_order[i] for i in row] + [0] for row in ids] == (
        theirs(marian_sentences)["input_ids"])


@pytest.mark.parametrize("field", ["pad_token_id", "eos_token_id", "decoder_start_token_id",
                                   "vocab_size"])
def test_from_snapshot_missing_config_fields(marian_shared, tmp_path, field):
    folder = copy_snapshot(marian_shared, tmp_path)
    edit_json(folder / "config.json", **{field: None})
    with pytest.raises(ValueError, match=rf"config\.json` has no int `{field}` \(found None\)\. "
                                         "An OPUS-MT config.json sets it"):
        MarianTokenizer.from_snapshot(folder)


@pytest.mark.parametrize("snapshot_name, file, changes, message", [
    ("marian_shared", "config.json", {"pad_token_id": 5},
     r"vocab\.json` gives '<pad>' the id 143, but config\.json says 5"),
    ("marian_shared", "config.json", {"eos_token_id": 1},
     r"vocab\.json` gives '</s>' the id 0, but config\.json says 1"),
    ("marian_shared", "config.json", {"vocab_size": 200, "decoder_vocab_size": 200},
     r"must give each id from 0 to 199 \(config\.json's `vocab_size` is 200\)"),
    ("marian_shared", "config.json", {"decoder_vocab_size": 99},
     "has decoder_vocab_size=99 but vocab_size=144"),
    ("marian_separate", "config.json", {"decoder_vocab_size": 99},
     r"target_vocab\.json` must give each id from 0 to 98 \(config\.json's `decoder_vocab_size"),
    ("marian_shared", "config.json", {"decoder_start_token_id": 0},
     "`start_id`=0 must not be the eos or unk id"),
    ("marian_shared", "tokenizer_config.json", {"unk_token": "<UNK>"},
     r"vocab\.json` has no unk token '<UNK>'"),
    ("marian_shared", "tokenizer_config.json", {"additional_special_tokens": ["<eop>"]},
     "set `additional_special_tokens`, which the Marian importer does not support"),
    ("marian_shared", "tokenizer_config.json",
     {"added_tokens_decoder": {"0": {"content": "</s>"}, "7": {"content": "<sep>"}}},
     r"set added tokens \['<sep>'\], which"),
    ("marian_shared", "tokenizer_config.json", {"split_special_tokens": True},
     r"\(tokenizer_config\.json\) set `split_special_tokens`"),
    ("marian_shared", "tokenizer_config.json",
     {"added_tokens_decoder": {"0": {"content": "</s>", "lstrip": True}}},
     "set a special token with `lstrip`, `rstrip` or `single_word`"),
    ("marian_shared", "special_tokens_map.json", {"additional_special_tokens": ["<eop>"]},
     r"\(tokenizer_config\.json, special_tokens_map\.json\) set `additional_special_tokens`"),
    ("marian_shared", "added_tokens.json", {"<new>": 144},
     r"\(tokenizer_config\.json, added_tokens\.json\) set added tokens \['<new>'\]"),
])
def test_from_snapshot_inconsistent_files(request, tmp_path, snapshot_name, file, changes,
                                          message):
    folder = copy_snapshot(request.getfixturevalue(snapshot_name), tmp_path)
    edit_json(folder / file, **changes)
    with pytest.raises(ValueError, match=message):
        MarianTokenizer.from_snapshot(folder)


def test_from_snapshot_target_special_ids_must_match(marian_separate, tmp_path):
    folder = copy_snapshot(marian_separate, tmp_path)
    with open(folder / "target_vocab.json", encoding="utf-8") as handle:
        vocabulary = json.load(handle)
    vocabulary["<unk>"], vocabulary["</s>"] = 0, 1
    with open(folder / "target_vocab.json", "w", encoding="utf-8") as handle:
        json.dump(vocabulary, handle)
    with pytest.raises(ValueError, match=r"target_vocab\.json` gives '</s>' the id 1, but "
                                         r"config\.json says 0"):
        MarianTokenizer.from_snapshot(folder)


def test_whitespace_class_is_str_strip():
    # detokenize strips with this RE2 class; decode_ids (Hugging Face) with `str.strip`.
    spaces = "".join(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace())
    strings = [f"{c}a{c}b{c}" for c in spaces] + ["\u200b a \u200b"]
    stripped = tf.strings.regex_replace(strings, _GRAPH_STRIP, "")
    assert [s.decode() for s in stripped.numpy()] == [s.strip() for s in strings]
