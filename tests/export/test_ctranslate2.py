"""CTranslate2 export: an independent engine gives our translations, token for token."""

import json
import os
import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest

ctranslate2 = pytest.importorskip("ctranslate2")

import keras_transformer as kt  # noqa: E402
from keras_transformer.cli import main  # noqa: E402
from keras_transformer.data.tokenizer import Tokenizer, train_tokenizer  # noqa: E402
from keras_transformer.export import export_ctranslate2  # noqa: E402
from keras_transformer.export.ctranslate2 import build_spec  # noqa: E402
from keras_transformer.generation import Translator, generate  # noqa: E402
from keras_transformer.special_tokens import END_ID, PAD_ID  # noqa: E402
from tests.export.conftest import MAX_LENGTH, SENTENCES  # noqa: E402

pytestmark = pytest.mark.slow

# CTranslate2's options that decode as `generate(..., alpha=0.0, max_length=MAX_LENGTH)`:
# no length penalty (CTranslate2 divides by length ** alpha, we by ((5 + length) / 6) **
# alpha), the end token never first (both minimums are 1: no empty output), and padding
# and the start token never generated (our `log_probs_of` masks them before the softmax;
# CTranslate2 suppresses them before its softmax too).
CT2_OPTIONS = dict(length_penalty=0.0, max_decoding_length=MAX_LENGTH, min_decoding_length=1,
                   suppress_sequences=[["<pad>"], ["<s>"]], return_scores=True,
                   return_end_token=True)


def _ct2_translator(path):
    return ctranslate2.Translator(path, device="cpu", inter_threads=1, intra_threads=2)


def _ours(model, sources, beam_size):
    """Our best outputs (lists of ids, end token included) and their scores."""
    width = max(len(ids) for ids in sources)
    padded = np.full((len(sources), width), PAD_ID, "int32")
    for row, ids in enumerate(sources):
        padded[row, : len(ids)] = ids
    method = "greedy" if beam_size == 1 else "beam"
    out = generate(model, padded, method, beam_size=beam_size, alpha=0.0, max_length=MAX_LENGTH)
    tokens = [[int(t) for t in row if t != PAD_ID] for row in out["token_ids"]]
    return tokens, out["scores"].tolist()


def _theirs(translator, tokenizer, sources, beam_size):
    """CTranslate2's best outputs (ids, end token included) and scores for the same sources."""
    pieces = [[tokenizer.id_to_piece(i) for i in ids[:-1]] for ids in sources]  # it adds </s>
    results = translator.translate_batch(pieces, beam_size=beam_size, **CT2_OPTIONS)
    processor = tokenizer._processor
    tokens = [[processor.piece_to_id(p) for p in r.hypotheses[0]] for r in results]
    return tokens, [r.scores[0] for r in results]


@pytest.fixture(scope="module")
def ct2_dir(model_dir, tmp_path_factory):
    return export_ctranslate2(model_dir, str(tmp_path_factory.mktemp("ct2") / "model"))


@pytest.mark.parametrize("beam_size", [1, 4])
def test_same_translations_as_ours_on_32_sentences(model_dir, ct2_dir, beam_size):
    translator = Translator.from_directory(model_dir)
    sources = translator.tokenize(SENTENCES[:32])
    ours, our_scores = _ours(translator.model, sources, beam_size)
    theirs, their_scores = _theirs(_ct2_translator(ct2_dir), translator.tokenizer, sources,
                                   beam_size)
    assert sum(o == t for o, t in zip(ours, theirs, strict=True)) == 32, (ours, theirs)
    np.testing.assert_allclose(their_scores, our_scores, atol=1e-3)
    assert any(tokens[-1] == END_ID for tokens in ours)  # outputs that end, not just the cap


def test_export_folder_and_strings(model_dir, ct2_dir):
    assert sorted(os.listdir(ct2_dir)) == ["config.json", "model.bin", "shared_vocabulary.json",
                                           "tokenizer.model"]
    with open(os.path.join(ct2_dir, "config.json")) as file:
        config = json.load(file)
    assert config["add_source_eos"] is True and config["add_source_bos"] is False
    assert (config["bos_token"], config["eos_token"], config["decoder_start_token"]) == (
        "<s>", "</s>", "<s>")
    translator = Translator.from_directory(model_dir, method="greedy", max_length=MAX_LENGTH)
    tokenizer = Tokenizer.from_file(os.path.join(ct2_dir, "tokenizer.model"))
    pieces = [[tokenizer.id_to_piece(i) for i in ids[:-1]]
              for ids in translator.tokenize(SENTENCES[:4])]
    results = _ct2_translator(ct2_dir).translate_batch(
        pieces, beam_size=1, max_decoding_length=MAX_LENGTH, min_decoding_length=1,
        suppress_sequences=[["<pad>"], ["<s>"]])
    their_strings = [tokenizer._processor.decode_pieces(r.hypotheses[0]) for r in results]
    assert their_strings == translator.translate(SENTENCES[:4])


def test_int8_quantization_loads_and_translates(model_dir, tmp_path):
    path = export_ctranslate2(model_dir, str(tmp_path / "int8"), quantization="int8")
    with open(os.path.join(path, "config.json")) as file:
        assert json.load(file)["add_source_eos"] is True
    results = _ct2_translator(path).translate_batch([["▁Gut", "en"]], beam_size=2)
    assert isinstance(results[0].hypotheses[0], list)


# --- every configuration, on random weights ------------------------------------------------


def _random_model_dir(directory, **overrides):
    """A model folder with an untrained model whose norms and biases are far from 1 and 0."""
    tokenizer = train_tokenizer(SENTENCES, path=str(directory / "tokenizer.model"),
                                vocabulary_size=80)
    keras.utils.set_random_seed(1)
    model = kt.build_transformer("tiny", vocabulary_size=tokenizer.vocabulary_size,
                                 dropout=0.0, **overrides)
    rng = np.random.default_rng(0)
    for variable in model.weights:
        name = variable.path.rsplit("/", 1)[-1]
        if name in ("gamma", "beta", "bias"):
            mean = 1.0 if name == "gamma" else 0.0
            variable.assign(rng.normal(mean, 0.3, variable.shape).astype("float32"))
    model.save(str(directory / "model.keras"))
    return str(directory), model, tokenizer


@pytest.mark.parametrize("overrides", [
    {},  # the paper: post-LN, sinusoids
    {"normalize_first": True},  # pre-LN with a final LayerNorm per stack
    {"position_embedding": "learned", "max_sequence_length": 32},
    {"normalize_first": True, "position_embedding": "learned", "max_sequence_length": 32,
     "activation": "gelu", "layer_norm_epsilon": 1e-3},
], ids=["post_ln_sinusoidal", "pre_ln", "learned_positions", "pre_ln_learned_gelu"])
def test_every_configuration_gives_our_log_probs(tmp_path, overrides):
    model_dir, model, tokenizer = _random_model_dir(tmp_path, **overrides)
    path = export_ctranslate2(model_dir, str(tmp_path / "ct2"))
    sources = [ids + [END_ID] for ids in tokenizer.encode_as_ids(SENTENCES[:8])]
    targets = [ids + [END_ID] for ids in tokenizer.encode_as_ids(SENTENCES[8:16])]
    pieces = [[tokenizer.id_to_piece(i) for i in ids[:-1]] for ids in sources]
    target_pieces = [[tokenizer.id_to_piece(i) for i in ids[:-1]] for ids in targets]
    scored = _ct2_translator(path).score_batch(pieces, target_pieces)
    for source, target, result in zip(sources, targets, scored, strict=True):
        logits = model({"encoder_token_ids": np.array([source], "int32"),
                        "decoder_token_ids": np.array([[2] + target[:-1]], "int32")})
        log_probs = keras.ops.convert_to_numpy(keras.ops.log_softmax(logits, axis=-1))[0]
        ours = log_probs[np.arange(len(target)), target]
        np.testing.assert_allclose(result.log_probs, ours, atol=1e-4)
    # Greedy search agrees too: the tied output projection, the masking of pad and start.
    ours, our_scores = _ours(model, sources, beam_size=1)
    theirs, their_scores = _theirs(_ct2_translator(path), tokenizer, sources, beam_size=1)
    assert ours == theirs
    np.testing.assert_allclose(their_scores, our_scores, atol=1e-3)


# --- bad input --------------------------------------------------------------------------------


def test_missing_model_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="`model_dir` is not a folder"):
        export_ctranslate2(str(tmp_path / "nothing"), str(tmp_path / "out"))


def test_model_folder_without_tokenizer(model_dir, tmp_path):
    (tmp_path / "model.keras").write_bytes(open(os.path.join(model_dir, "model.keras"),
                                                "rb").read())
    with pytest.raises(FileNotFoundError, match="`tokenizer.model` not found"):
        export_ctranslate2(str(tmp_path), str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out")


def test_unknown_quantization_lists_the_valid_ones(model_dir, tmp_path):
    with pytest.raises(ValueError, match=r"`quantization` must be one of \[.*'int8'.*'float16'"):
        export_ctranslate2(model_dir, str(tmp_path / "out"), quantization="int4")
    assert not os.path.exists(tmp_path / "out")


def test_non_empty_output_needs_force(model_dir, tmp_path):
    output = tmp_path / "out"
    output.mkdir()
    (output / "old.txt").write_text("keep me")
    with pytest.raises(ValueError, match="pass `force=True`"):
        export_ctranslate2(model_dir, str(output))
    assert os.listdir(output) == ["old.txt"]
    export_ctranslate2(model_dir, str(output), force=True)
    assert "old.txt" not in os.listdir(output) and "model.bin" in os.listdir(output)
    assert sorted(os.listdir(tmp_path)) == ["out"]  # no staging folder left behind


def test_empty_output_folder_is_used(model_dir, tmp_path):
    (tmp_path / "out").mkdir()
    export_ctranslate2(model_dir, str(tmp_path / "out"))
    assert "model.bin" in os.listdir(tmp_path / "out")


def test_unsupported_activation_is_named_and_nothing_is_written(tmp_path):
    model_dir, _, _ = _random_model_dir(tmp_path, num_layers=1, activation="elu")
    with pytest.raises(ValueError, match="CTranslate2 has no activation 'elu': `activation`"):
        export_ctranslate2(model_dir, str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path)) == ["model.keras", "tokenizer.model"]


def test_keras_quantized_model_is_refused(tmp_path):
    _, model, tokenizer = _random_model_dir(tmp_path, num_layers=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # layers without weights to quantize say so
        model.quantize("int8")
    pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocabulary_size)]
    with pytest.raises(ValueError, match="Keras-quantized model.*quantization='int8'"):
        build_spec(model, pieces)


def test_without_ctranslate2_the_error_says_what_to_install(model_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    with pytest.raises(ImportError, match=r'pip install "keras-transformer\[ctranslate2\]"'):
        export_ctranslate2(model_dir, str(tmp_path / "out"))


# --- command line -------------------------------------------------------------------------------


def test_cli_exports_ctranslate2(model_dir, tmp_path, capsys):
    output = str(tmp_path / "ct2")
    code = main(["export", "--format", "ctranslate2", "--model", model_dir, "--output", output,
                 "--quantization", "int8"])
    assert code == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == {
        "export": output, "format": "ctranslate2", "quantization": "int8"}
    assert main(["export", "--format", "ctranslate2", "--model", model_dir, "--output",
                 output]) == 2
    assert "pass `force=True` (`--force`)" in capsys.readouterr().err
    assert main(["export", "--format", "ctranslate2", "--model", model_dir, "--output",
                 output, "--force"]) == 0


def test_cli_bad_quantization_and_saved_model_only_options(model_dir, tmp_path, capsys):
    assert main(["export", "--format", "ctranslate2", "--model", model_dir, "--output",
                 str(tmp_path / "a"), "--quantization", "int3"]) == 2
    assert "`quantization` must be one of" in capsys.readouterr().err
    assert main(["export", "--model", model_dir, "--output", str(tmp_path / "b"),
                 "--quantization", "int8_float32"]) == 2
    assert "`--quantization` of a SavedModel must be int8" in capsys.readouterr().err
    assert main(["export", "--model", model_dir, "--output", str(tmp_path / "b"),
                 "--force"]) == 2
    assert "applies to `--format ctranslate2` only" in capsys.readouterr().err
    assert main(["export", "--format", "ctranslate2", "--model", model_dir, "--output",
                 str(tmp_path / "c"), "--min-length", "1"]) == 2
    assert "min_decoding_length" in capsys.readouterr().err


# --- the benchmark ------------------------------------------------------------------------------


def test_speed_benchmark_runs_and_ctranslate2_gives_our_strings(model_dir, tmp_path):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    from ctranslate2_speed import benchmark, markdown

    from keras_transformer.data.corpora import write_tsv

    data = str(tmp_path / "pairs.tsv")
    write_tsv(data, list(zip(SENTENCES[:8], SENTENCES[1:9], strict=True)))
    result = benchmark(model_dir, sentences=8, max_length=MAX_LENGTH, data=data,
                       rows=("ours", "ct2_float32"), work_dir=str(tmp_path / "work"),
                       repeats=1)
    rows = {(row["decoding"], row["method"]): row for row in result["rows"]}
    for decoding in ("greedy", "beam 4"):
        assert rows[decoding, "CTranslate2 float32"]["same_as_ours"] == 1.0
        assert rows[decoding, "ours, XLA"]["target_tokens_per_second"] > 0
    assert "| greedy | 1 | CTranslate2 float32 |" in markdown(result)


def test_decoding_profile_splits_each_sentence_into_products_and_the_rest(model_dir, tmp_path):
    from keras_transformer.data.corpora import write_tsv

    data, output = str(tmp_path / "pairs.tsv"), str(tmp_path / "profile.json")
    write_tsv(data, list(zip(SENTENCES[:3], SENTENCES[1:4], strict=True)))
    script = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks",
                          "decoding_profile.py")
    done = subprocess.run(
        [sys.executable, script, "--model", model_dir, "--data", data, "--sentences", "3",
         "--settings", "1x1", "4x1", "--output", output],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "KERAS_BACKEND": "tensorflow"})
    assert done.returncode == 0, done.stderr[-3000:]
    with open(output) as file:
        rows = json.load(file)["rows"]
    assert [(row["decoding"], row["method"]) for row in rows] == [
        ("greedy", "ours, XLA"), ("greedy", "KerasHub sampler, cached, XLA"),
        ("beam 4", "ours, XLA"), ("beam 4", "KerasHub sampler, cached, XLA")]
    for row in rows:
        ms = row["ms_per_sentence"]
        assert ms["products"] > 0 and ms["other ops"] > 0 and ms["host"] > 0
    assert "| greedy | 1 | ours, XLA |" in done.stdout
    assert "- beam 4 at batch 1: ours / KerasHub" in done.stdout
