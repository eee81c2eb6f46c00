"""CTranslate2 export of imported OPUS-MT (Marian) models, against CTranslate2's own
converter run on the same `transformers` model: the same tokens for the same sentences."""

import json
import os
import shutil
from typing import NamedTuple

import keras
import numpy as np
import pytest

ctranslate2 = pytest.importorskip("ctranslate2")
pytest.importorskip("transformers")
pytest.importorskip("torch")  # CTranslate2's converter loads the `transformers` model
sentencepiece = pytest.importorskip("sentencepiece")

from ctranslate2.converters import TransformersConverter  # noqa: E402

from keras_transformer.data.marian_tokenizer import MarianTokenizer  # noqa: E402
from keras_transformer.data.tokenizer_files import MARIAN_FILES, load_tokenizer  # noqa: E402
from keras_transformer.export import export_ctranslate2  # noqa: E402
from keras_transformer.export.ctranslate2 import build_spec  # noqa: E402
from keras_transformer.importers import import_marian  # noqa: E402
from keras_transformer.special_tokens import PAD_ID, START_ID  # noqa: E402
from tests.importers.marian_fixtures import write_marian_snapshot  # noqa: E402

SENTENCES = 32


class Case(NamedTuple):
    snapshot: str  # the Hugging Face snapshot
    imported: str  # our model folder, written by `import_marian`
    ours: str  # `export_ctranslate2(imported)`
    theirs: str  # CTranslate2's `TransformersConverter(snapshot)`
    ending: bool  # a snapshot whose outputs are known to end at varied lengths


@pytest.fixture(scope="module", params=["shared", "separate", "separate-ending"])
def case(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"ct2_{request.param}")
    if request.param == "separate-ending":
        # The separate fixture's outputs all run to the length limit; a larger end bias
        # makes about half of them end, so the end token's id and the length penalty
        # are compared with separate vocabularies too.
        snapshot = write_marian_snapshot(root / "snapshot", shared=False, init_std=1.0,
                                         end_bias=14.0)
    else:
        snapshot = request.getfixturevalue(f"marian_{request.param}")
    imported = str(root / "imported")
    import_marian(snapshot, imported)
    ours = export_ctranslate2(imported, str(root / "ours"))
    theirs = str(root / "theirs")
    TransformersConverter(snapshot).convert(theirs)
    return Case(snapshot, imported, ours, theirs, request.param == "separate-ending")


def _texts(sentences):
    return [text for text in sentences if text.strip()][:SENTENCES]


def _read_json(folder, name):
    with open(os.path.join(folder, name), encoding="utf-8") as file:
        return json.load(file)


def _translator(path):
    return ctranslate2.Translator(path, device="cpu", inter_threads=1, intra_threads=1)


def _their_target_pieces(case):
    """The target piece of each output string of CTranslate2's converted model.

    Its Marian loader registers the tokenizer's `get_vocab()`, the *source* vocabulary,
    as the target vocabulary too, so with separate vocabularies its output strings are
    source pieces at the decoder's ids. Relabelled through the ids, they can be compared.
    """
    name = ("target_vocabulary.json" if os.path.exists(
        os.path.join(case.theirs, "target_vocabulary.json")) else "shared_vocabulary.json")
    their_vocabulary = _read_json(case.theirs, name)
    separate = os.path.exists(os.path.join(case.snapshot, "target_vocab.json"))
    marian = _read_json(case.snapshot, "target_vocab.json" if separate else "vocab.json")
    piece_of = {marian_id: piece for piece, marian_id in marian.items()}
    return {string: piece_of[marian_id] for marian_id, string in enumerate(their_vocabulary)}


@pytest.mark.parametrize("beam_size", [1, 4])
def test_same_tokens_as_ctranslate2s_own_converter(case, marian_sentences, beam_size):
    generation = _read_json(case.imported, "config.json")["generation"]
    source = sentencepiece.SentencePieceProcessor(
        model_file=os.path.join(case.snapshot, "source.spm"))
    pieces = source.encode(_texts(marian_sentences), out_type=str)
    # Its Marian models add nothing to the source: Hugging Face's tokenizer appends
    # `</s>`, so the caller does. Ours appends the end token itself.
    assert _read_json(case.theirs, "config.json")["add_source_eos"] is False
    options = dict(beam_size=beam_size, length_penalty=generation["alpha"],
                   max_decoding_length=generation["max_length"], min_decoding_length=0,
                   return_scores=True, return_end_token=True)
    ours = _translator(case.ours).translate_batch(pieces, **options)
    theirs = _translator(case.theirs).translate_batch([p + ["</s>"] for p in pieces],
                                                      **options)
    relabel = _their_target_pieces(case)
    our_tokens = [result.hypotheses[0] for result in ours]
    their_tokens = [[relabel[t] for t in result.hypotheses[0]] for result in theirs]
    same = sum(a == b for a, b in zip(our_tokens, their_tokens, strict=True))
    as_written = sum(a == r.hypotheses[0] for a, r in zip(our_tokens, theirs, strict=True))
    ends = sum(tokens[-1:] == ["</s>"] for tokens in our_tokens)
    print(f"beam {beam_size}: {same}/{len(pieces)} identical ({as_written} before "
          f"relabelling their strings), {ends} ended, "
          f"{len(set(map(tuple, our_tokens)))} distinct")
    # This random model's logits move with float32 rounding (up to 1e-2, see
    # `marian_logits_snapshot`), and the weights written under each backend round
    # differently: on some CPUs a near tie parts one long output, which may then only
    # be one that runs to the limit and scores within 1% of theirs (the search is not
    # exact: after the tie either may find the better hypothesis).
    differ = [row for row, (a, b) in enumerate(zip(our_tokens, their_tokens, strict=True))
              if a != b]
    assert len(differ) <= 1
    for row in differ:
        assert min(len(our_tokens[row]), len(their_tokens[row])) >= options[
            "max_decoding_length"] - 1, (row, our_tokens[row], their_tokens[row])
        np.testing.assert_allclose(ours[row].scores[0], theirs[row].scores[0], rtol=1e-2)
    same_rows = [row for row in range(len(pieces)) if row not in differ]
    np.testing.assert_allclose([ours[row].scores[0] for row in same_rows],
                               [theirs[row].scores[0] for row in same_rows], rtol=1e-3,
                               atol=1e-4)
    never = {load_tokenizer(case.imported).target_pieces[i] for i in (PAD_ID, START_ID)}
    assert not never & {t for tokens in our_tokens for t in tokens}
    assert len(set(map(tuple, our_tokens))) >= 8  # outputs that depend on the source
    if case.ending:
        assert 4 <= ends <= len(pieces) - 4


def test_export_folder_and_config(case):
    tokenizer = load_tokenizer(case.imported)
    files = {"config.json", "model.bin", *MARIAN_FILES}
    if tokenizer.shared:
        files.add("shared_vocabulary.json")
        assert _read_json(case.ours, "shared_vocabulary.json") == tokenizer.source_pieces
    else:
        files |= {"source_vocabulary.json", "target_vocabulary.json"}
        assert _read_json(case.ours, "source_vocabulary.json") == tokenizer.source_pieces
        assert _read_json(case.ours, "target_vocabulary.json") == tokenizer.target_pieces
    assert set(os.listdir(case.ours)) == files
    for name in MARIAN_FILES:  # the tokenizer, copied byte for byte
        with open(os.path.join(case.ours, name), "rb") as a, \
                open(os.path.join(case.imported, name), "rb") as b:
            assert a.read() == b.read()
    assert isinstance(load_tokenizer(case.ours), MarianTokenizer)
    config = _read_json(case.ours, "config.json")
    assert config["add_source_eos"] is True and config["add_source_bos"] is False
    start = tokenizer.target_pieces[START_ID]  # a placeholder no Marian vocabulary holds
    assert (config["decoder_start_token"], config["bos_token"], config["eos_token"],
            config["unk_token"]) == (start, start, "</s>", "<unk>")
    assert config["layer_norm_epsilon"] == pytest.approx(1e-5)


# --- a single imported folder -------------------------------------------------------------


@pytest.fixture(scope="module")
def imported_shared(marian_shared, tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("imported") / "shared")
    import_marian(marian_shared, folder)
    return folder


def _edited_copy(imported, folder, bias):
    """A copy of an imported folder with some logits biases set (`{id: value}`)."""
    shutil.copytree(imported, folder)
    path = os.path.join(folder, "model.keras")
    model = keras.models.load_model(path)
    values = keras.ops.convert_to_numpy(model.token_embedding.logits_bias).copy()
    for token_id, value in bias.items():
        values[token_id] = value
    model.token_embedding.logits_bias.assign(values)
    model.save(path)
    return str(folder)


def test_padding_start_and_banned_ids_are_never_generated(imported_shared, tmp_path):
    tokenizer = load_tokenizer(imported_shared)
    favourite = 10  # an ordinary piece the edited bias makes the likeliest after them
    folder = _edited_copy(imported_shared, tmp_path / "edited",
                          bias={PAD_ID: 60.0, START_ID: 60.0, favourite: 50.0})
    pieces = [["▁Der", "▁Hund"], ["▁Die", "▁Katze"]]
    never = {tokenizer.target_pieces[PAD_ID], tokenizer.target_pieces[START_ID]}
    for banned_ids, forbidden in [([], never),
                                  ([favourite], never | {tokenizer.target_pieces[favourite]})]:
        config = _read_json(folder, "config.json")
        config["generation"]["banned_ids"] = banned_ids
        with open(os.path.join(folder, "config.json"), "w") as file:
            json.dump(config, file)
        path = export_ctranslate2(folder, str(tmp_path / "ct2"), force=True)
        for beam_size in (1, 4):
            results = _translator(path).translate_batch(pieces, beam_size=beam_size,
                                                        max_decoding_length=8)
            tokens = {t for result in results for t in result.hypotheses[0]}
            assert tokens and not tokens & forbidden, (banned_ids, tokens)
            if not banned_ids:  # the bias works: the piece wins once it is allowed
                assert tokenizer.target_pieces[favourite] in tokens


def test_int8_export_of_an_imported_model_translates(imported_shared, tmp_path):
    path = export_ctranslate2(imported_shared, str(tmp_path / "int8"), quantization="int8")
    results = _translator(path).translate_batch([["▁Der", "▁Hund"]], beam_size=2,
                                                max_decoding_length=6)
    assert 0 < len(results[0].hypotheses[0]) <= 6
    assert "source.spm" in os.listdir(path)


@pytest.mark.parametrize("missing", MARIAN_FILES)
def test_partial_tokenizer_is_named_and_nothing_is_written(imported_shared, tmp_path,
                                                           missing):
    folder = tmp_path / "model"
    shutil.copytree(imported_shared, folder)
    os.remove(folder / missing)
    with pytest.raises(FileNotFoundError, match=f"{missing} missing.*import --force"):
        export_ctranslate2(str(folder), str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path)) == ["model"]


def test_tokenizer_of_another_vocabulary_layout_is_refused(imported_shared, marian_separate,
                                                           tmp_path):
    separate = str(tmp_path / "separate")
    import_marian(marian_separate, separate)
    shared_model_separate_tokenizer = tmp_path / "a"
    shutil.copytree(imported_shared, shared_model_separate_tokenizer)
    separate_model_shared_tokenizer = tmp_path / "b"
    shutil.copytree(separate, separate_model_shared_tokenizer)
    for name in MARIAN_FILES:
        shutil.copyfile(os.path.join(separate, name), shared_model_separate_tokenizer / name)
        shutil.copyfile(os.path.join(imported_shared, name),
                        separate_model_shared_tokenizer / name)
    with pytest.raises(ValueError, match="one vocabulary for both sides.*`target_pieces`"):
        export_ctranslate2(str(shared_model_separate_tokenizer), str(tmp_path / "out_a"))
    with pytest.raises(ValueError, match="separate source and target vocabularies"):
        export_ctranslate2(str(separate_model_shared_tokenizer), str(tmp_path / "out_b"))
    # Same sizes, other pieces: the target pieces must be given, never guessed.
    tokenizer = load_tokenizer(separate)
    model = keras.models.load_model(os.path.join(separate, "model.keras"))
    assert len(tokenizer.source_pieces) == len(tokenizer.target_pieces)
    with pytest.raises(ValueError, match="pass the target pieces as `target_pieces`"):
        build_spec(model, tokenizer.source_pieces)
    with pytest.raises(ValueError, match="`banned_ids` must be target ids"):
        build_spec(model, tokenizer.source_pieces, tokenizer.target_pieces,
                   banned_ids=[len(tokenizer.target_pieces)])
    assert not any(name.startswith("out") for name in os.listdir(tmp_path))
