"""The exported SavedModel: TensorFlow-only loading, signatures, bad input, concurrency."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest
import tensorflow as tf

from keras_transformer.export import export_saved_model
from tests.export.conftest import (
    BEAM_SIZE,
    MAX_LENGTH,
    MAX_SEQUENCE_LENGTH,
    SENTENCES,
    run_tensorflow_only,
)

BATCH = ["Guten Morgen.", "Wie geht es dir?", "Ich habe einen Hund.", "Der Zug ist spät.",
         "Guter Wein muss reifen.", "Das ist ein neuer Satz.", "Bis morgen!"]


@pytest.fixture(scope="session")
def loaded(export_dir):
    return tf.saved_model.load(export_dir)


def serve(loaded, texts):
    return loaded.signatures["serving_default"](text=tf.constant(texts, tf.string))


@pytest.mark.slow
def test_tensorflow_only_process_gives_the_translator_strings(translator, export_dir):
    expected = translator.translate(BATCH)
    script = (
        "model = tf.saved_model.load(sys.argv[1])\n"
        "texts = json.loads(sys.argv[2])\n"
        "out = model.signatures['serving_default'](text=tf.constant(texts))\n"
        "nbest = model.signatures['nbest'](text=tf.constant(texts))\n"
        "meta = model.signatures['metadata']()\n"
        "print(json.dumps({\n"
        "    'translation': [t.decode('utf-8') for t in out['translation'].numpy()],\n"
        "    'token_ids': out['token_ids'].numpy().tolist(),\n"
        "    'scores': out['scores'].numpy().tolist(),\n"
        "    'nbest_first': [t.decode('utf-8') for t in nbest['translations'].numpy()[:, 0]],\n"
        "    'nbest_shape': list(nbest['token_ids'].shape),\n"
        "    'dtypes': [out['token_ids'].dtype.name, out['scores'].dtype.name],\n"
        "    'metadata': json.loads(meta['metadata'].numpy()),\n"
        "}))\n"
    )
    result = json.loads(run_tensorflow_only(script, export_dir, json.dumps(BATCH)))
    assert result["translation"] == expected
    assert result["nbest_first"] == expected
    assert result["dtypes"] == ["int32", "float32"]
    assert result["nbest_shape"][:2] == [len(BATCH), BEAM_SIZE]
    python = translator._generate(translator.tokenize(BATCH), "beam", {})
    for i, row in enumerate(python["token_ids"].tolist()):
        assert [t for t in result["token_ids"][i] if t != 0] == [t for t in row if t != 0]
        assert result["scores"][i] == pytest.approx(float(python["scores"][i]), abs=1e-4)
    assert result["metadata"]["beam_size"] == BEAM_SIZE
    assert result["metadata"]["max_length"] == MAX_LENGTH
    assert result["metadata"]["max_sequence_length"] == MAX_SEQUENCE_LENGTH
    assert result["metadata"]["alpha"] == pytest.approx(0.6)


@pytest.mark.slow
def test_saved_model_cli_lists_the_named_signatures(export_dir):
    binary = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    result = subprocess.run([binary, "show", "--dir", export_dir, "--all"],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-2000:]
    shown = result.stdout
    serving = shown.split("signature_def['serving_default']")[1].split("signature_def[")[0]
    assert "inputs['text']" in serving and "dtype: DT_STRING" in serving
    for name in ("translation", "token_ids", "scores"):
        assert f"outputs['{name}']" in serving
    assert "shape: (-1)" in serving and "shape: (-1, -1)" in serving
    nbest = shown.split("signature_def['nbest']")[1].split("signature_def[")[0]
    for name in ("translations", "token_ids", "scores"):
        assert f"outputs['{name}']" in nbest
    assert "signature_def['metadata']" in shown
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as file:
        assert b"_XlaMustCompile" in file.read()  # the search runs under XLA


@pytest.mark.slow
def test_blank_input_gives_empty_translations(loaded):
    out = serve(loaded, ["", "   \t ", "Guten Morgen."])
    assert out["translation"].numpy().tolist()[:2] == [b"", b""]
    assert out["token_ids"].numpy()[:2, 0].tolist() == [3, 3]
    assert out["scores"].numpy()[:2].tolist() == [0.0, 0.0]
    assert out["translation"].numpy()[2] != b""


@pytest.mark.slow
def test_empty_batch_gives_empty_outputs(loaded):
    out = serve(loaded, [])
    assert out["translation"].shape == (0,)
    assert out["scores"].shape == (0,)
    assert out["token_ids"].shape[0] == 0
    nbest = loaded.signatures["nbest"](text=tf.constant([], tf.string))
    assert nbest["translations"].shape[0] == 0


@pytest.mark.slow
def test_long_input_is_truncated_not_an_error(loaded):
    serve(loaded, ["Guten Morgen. " * 3])  # compile the padded shape first
    start = time.perf_counter()
    short = serve(loaded, ["Guten Morgen. " * 3])
    normal = time.perf_counter() - start
    long_text = ("Guten Morgen. " * 800)[:10_000]
    serve(loaded, [long_text])  # compile
    start = time.perf_counter()
    out = serve(loaded, [long_text])
    elapsed = time.perf_counter() - start
    assert out["translation"].shape == (1,)
    assert out["token_ids"].shape[1] <= MAX_LENGTH
    # Cut to MAX_SEQUENCE_LENGTH ids, the source costs about what a normal one does.
    assert elapsed < max(10 * normal, 2.0), (elapsed, normal)
    assert short["translation"].shape == (1,)


@pytest.mark.slow
def test_invalid_utf8_is_replaced_not_a_crash(loaded):
    out = serve(loaded, [b"Guten \xff\xfe Morgen", b"\xc3\x28", b"\x80"])
    assert out["translation"].shape == (3,)
    for text in out["translation"].numpy():
        text.decode("utf-8")  # outputs are valid UTF-8


@pytest.mark.slow
def test_concurrent_requests_match_sequential_answers(loaded):
    inputs = [[s] for s in SENTENCES[:4]] + [SENTENCES[4:8], ["", "Bis morgen!"]]
    sequential = [serve(loaded, texts)["translation"].numpy().tolist() for texts in inputs]
    errors, mismatches = [], []

    def worker(seed):
        for request in range(25):
            index = (seed + request) % len(inputs)
            try:
                answer = serve(loaded, inputs[index])["translation"].numpy().tolist()
            except Exception as error:  # noqa: BLE001  (reported below)
                errors.append(repr(error))
                continue
            if answer != sequential[index]:
                mismatches.append((index, answer))

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors
    assert not mismatches


@pytest.mark.slow
def test_export_from_a_model_directory(model_dir, tmp_path):
    path = export_saved_model(model_dir, str(tmp_path / "1"), beam_size=1, alpha=0.0,
                              jit_compile=False)
    loaded = tf.saved_model.load(path)
    metadata = json.loads(loaded.signatures["metadata"]()["metadata"].numpy())
    assert metadata["beam_size"] == 1 and metadata["jit_compile"] is False
    # max_length defaults to config.json's max_sequence_length.
    assert metadata["max_length"] == metadata["max_sequence_length"] == MAX_SEQUENCE_LENGTH
    with open(os.path.join(model_dir, "tokenizer.model"), "rb") as file:
        assert loaded.signatures["metadata"]()["tokenizer_model"].numpy() == file.read()
    assert serve(loaded, ["Guten Morgen."])["translation"].shape == (1,)


@pytest.mark.slow
def test_no_repeat_ngram_size_is_fixed_at_export_and_gives_the_translator_strings(
        translator, tmp_path):
    path = export_saved_model(translator, str(tmp_path / "1"), beam_size=BEAM_SIZE,
                              max_length=MAX_LENGTH, no_repeat_ngram_size=2, jit_compile=False)
    loaded = tf.saved_model.load(path)
    metadata = json.loads(loaded.signatures["metadata"]()["metadata"].numpy())
    assert metadata["no_repeat_ngram_size"] == 2
    got = [t.decode("utf-8") for t in serve(loaded, BATCH)["translation"].numpy()]
    assert got == translator.translate(BATCH, no_repeat_ngram_size=2)


def test_rejects_what_is_neither_translator_nor_directory(tmp_path):
    with pytest.raises(ValueError, match="translator_or_model_dir"):
        export_saved_model(42, str(tmp_path / "1"))


def test_rejects_a_bad_beam_size(translator, tmp_path):
    with pytest.raises(ValueError, match="beam_size"):
        export_saved_model(translator, str(tmp_path / "1"), beam_size=0)


def test_rejects_a_negative_alpha(translator, tmp_path):
    with pytest.raises(ValueError, match="alpha"):
        export_saved_model(translator, str(tmp_path / "1"), alpha=-1.0)


@pytest.mark.parametrize("beam_size, end_bias", [(1, 3.0), (3, 1.5)])
def test_shrinking_search_gives_generate_tokens_over_both_searches(beam_size, end_bias):
    """The export's in-graph shrinking batch: a first search with a 16-token buffer, then
    the rows still running in a smaller batch with the 64-token buffer that holds the
    limit of 40 (of the export's 112), gives the n-best of one whole-batch `generate`;
    the test's outputs end both before and after 16."""
    import keras
    import numpy as np

    import keras_transformer as kt
    from keras_transformer.export.saved_model import _Translation
    from keras_transformer.generation import generate
    from keras_transformer.generation.search_input import pad_sources
    from keras_transformer.special_tokens import END_ID

    keras.utils.set_random_seed(5)
    model = kt.build_transformer("tiny", vocabulary_size=40, dropout=0.0, num_layers=1,
                                 output_bias=True)
    bias = np.zeros(40, "float32")
    bias[END_ID] = end_bias  # some outputs end early, others run to the limit
    model.get_layer("token_embedding").logits_bias.assign(bias)
    rng = np.random.default_rng(0)
    ids = np.zeros((6, 7), "int32")
    for row in range(6):
        length = int(rng.integers(1, 7))
        ids[row, :length] = rng.integers(4, 40, length)
        ids[row, length] = END_ID
    limit = 40
    translation = _Translation(model, None, beam_size, 0.6, 100, limit, 64, None,
                               jit_compile=False)
    assert translation.buffers == [16, 32, 64, 112]
    nbest_ids, nbest_scores = tf.function(translation.shrinking_search, autograph=False)(
        pad_sources(tf.constant(ids), model), tf.constant(6), tf.constant(limit))
    expected = generate(model, ids, "beam", beam_size=beam_size, max_length=limit,
                        max_length_offset=limit, shrink_batch=False)
    ours = nbest_ids.numpy()[:6, :, :expected["nbest_token_ids"].shape[2]]
    np.testing.assert_array_equal(ours, expected["nbest_token_ids"])
    np.testing.assert_allclose(nbest_scores.numpy()[:6], expected["nbest_scores"], atol=1e-5)
    best = expected["token_ids"]
    ends = [int(np.argmax(row == END_ID)) if (row == END_ID).any() else limit for row in best]
    assert min(ends) < 16 < max(ends), ends  # both searches ran


def test_each_search_runs_in_the_smallest_buffer_that_holds_its_tokens_one_row_apart():
    import keras_transformer as kt
    from keras_transformer.export.saved_model import _Translation

    model = kt.build_transformer("tiny", vocabulary_size=40, num_layers=1)
    translation = _Translation(model, None, 1, 0.6, 100, 50, 64, None, jit_compile=False)
    # Stand-ins that say which search ran: the buffer, plus 1000 for one sentence's.
    translation.searches = {buffer: (lambda ids, buffer=buffer: tf.constant(buffer))
                            for buffer in translation.buffers}
    translation.one_row_searches = {
        buffer: (lambda ids, buffer=buffer: tf.constant(1000 + buffer))
        for buffer in translation.buffers}
    search = tf.function(translation.search_in_buffer_for, autograph=False, input_signature=[
        tf.TensorSpec([], tf.int32), tf.TensorSpec([None, None], tf.int32)])  # as exported
    for tokens, buffer in [(1, 16), (16, 16), (17, 32), (40, 64), (64, 64), (65, 112),
                           (100, 112)]:
        for rows, offset in [(1, 1000), (2, 0), (4, 0)]:
            ids = tf.zeros([rows, 16], tf.int32)
            assert int(search(tf.constant(tokens), ids)) == offset + buffer, (tokens, rows)


@pytest.mark.slow
def test_int8_export_gives_the_int8_translator_strings(model_dir, tmp_path):
    from keras_transformer.generation import Translator

    translator = Translator.from_directory(model_dir, method="beam", beam_size=BEAM_SIZE,
                                           max_length=MAX_LENGTH, quantization="int8")
    path = export_saved_model(model_dir, str(tmp_path / "1"), beam_size=BEAM_SIZE,
                              max_length=MAX_LENGTH, quantization="int8")
    loaded = tf.saved_model.load(path)
    metadata = json.loads(loaded.signatures["metadata"]()["metadata"].numpy())
    assert metadata["quantization"] == "int8"
    got = [t.decode("utf-8") for t in serve(loaded, BATCH)["translation"].numpy()]
    assert got == translator.translate(BATCH)
