"""`export_saved_model`: a SavedModel that translates strings, for TensorFlow Serving.

The export is written with `keras.export.ExportArchive` (this module is
TensorFlow-specific). It holds three signatures:

- `serving_default`: input `text` (`tf.string` `[None]`); outputs `translation`
  (`tf.string` `[None]`), `token_ids` (int32 `[None, None]`: the best output without
  the start token, `END_ID` then `PAD_ID`) and `scores` (float32 `[None]`: its
  length-penalized log-probability).
- `nbest`: input `text`; outputs `translations` (`tf.string` `[None, K]`),
  `token_ids` (int32 `[None, K, None]`) and `scores` (float32 `[None, K]`), best first.
- `metadata`: no input; outputs `metadata` (a JSON string with the decoding settings
  fixed at export time) and `tokenizer_model` (the SentencePiece model's bytes; empty
  for an imported OPUS-MT model, whose two models and vocabulary are in the graph).

Decoding is beam search (Section 6.1; with a beam size of 1 it runs the greedy loop,
which gives the same tokens without the beam's bookkeeping) with the same cached
decoder step and the same search-input policy (`generation/search_input.py`:
padding, length limit and the shrinking batch) as `keras_transformer.generate`, so
the SavedModel gives the strings that `Translator(..., method="beam")` gives with
the same settings: the output limit is
`min(longest source of the batch + max_length_offset, max_length)`.
Tokenizing and detokenizing run in a plain `tf.function` (SentencePiece ops have
no XLA kernels); the search runs in nested `tf.function(jit_compile=True)`s, one per
output buffer, compiled by XLA for each padded shape when the SavedModel is first
called with it. As in `generate`, the batch shrinks: a first search with a buffer just
past the longest source stops once at most a quarter of the sentences run, and those
are searched again in a smaller batch, in the smallest buffer that holds the batch's
output limit. A batch of one sentence runs searches traced for one row: XLA runs a
search traced for an unknown batch size slower (greedy at one sentence: 2x).

Input handling: invalid UTF-8 bytes are replaced by U+FFFD before tokenizing;
sources are cut to `max_sequence_length - 1` pieces plus `END_ID`; an empty or
whitespace-only sentence gets an empty translation (`token_ids` `[END_ID, 0, ...]`,
score 0); an empty batch gives empty outputs.
"""

import functools
import json
import os

import keras

from keras_transformer.backend import require_tensorflow
from keras_transformer.generation.beam_search import beam_search, check_beam_options, penalty
from keras_transformer.generation.generate import check_max_length_offset, check_min_length
from keras_transformer.generation.greedy import greedy_search
from keras_transformer.generation.ngram_blocking import check_no_repeat_ngram_size
from keras_transformer.generation.search_input import (
    DEFAULT_MIN_LENGTH,
    FIRST_SEARCH_SLACK,
    LENGTH_BUCKET,
    MAX_LENGTH_OFFSET,
    longest_output,
    max_or_zero,
    output_limit,
    pad_sources,
    search_buffer_length,
    source_lengths,
)
from keras_transformer.generation.step import DecoderStep, check_banned_ids
from keras_transformer.special_tokens import END_ID, PAD_ID, with_end
from keras_transformer.validation import check_positive_int
from keras_transformer.version import __version__

tf = require_tensorflow("SavedModel export")

SIGNATURES = ("serving_default", "nbest", "metadata")


def _load(translator_or_model_dir):
    """The `Translator` of a `Translator` or a model directory."""
    from keras_transformer.generation.translator import Translator

    if isinstance(translator_or_model_dir, (str, os.PathLike)):
        translator = Translator.from_directory(os.fspath(translator_or_model_dir))
    elif isinstance(translator_or_model_dir, Translator):
        translator = translator_or_model_dir
    else:
        raise ValueError(
            "`translator_or_model_dir` must be a `Translator` or the path of a model "
            "directory (holding model.keras, tokenizer.model and config.json). "
            f"Received: translator_or_model_dir={translator_or_model_dir!r}"
        )
    if not hasattr(translator.tokenizer, "graph_tokenizer"):
        raise ValueError(
            "The translator's tokenizer must be a `keras_transformer.data.tokenizer."
            "Tokenizer` or a `MarianTokenizer` (the SentencePiece models are carried inside "
            f"the SavedModel). Received: tokenizer={translator.tokenizer!r}"
        )
    return translator


class _Translation:
    """The functions of the export, closed over the model and the decoding settings."""

    def __init__(self, model, tokenizer, beam_size, alpha, max_length, max_length_offset,
                 max_sequence_length, no_repeat_ngram_size, jit_compile, length_penalty="gnmt",
                 banned_ids=(), force_end=False, min_length=DEFAULT_MIN_LENGTH):
        self.model = model
        self.min_length = min_length
        self.length_penalty = length_penalty
        self.banned_ids = tuple(banned_ids)
        self.force_end = force_end
        self.no_repeat_ngram_size = no_repeat_ngram_size
        self.tokenizer = tokenizer
        self.beam_size = beam_size
        self.alpha = alpha
        self.max_length = max_length
        self.max_length_offset = max_length_offset
        self.max_sequence_length = max_sequence_length
        self.buffer_length = search_buffer_length(max_length, model)
        # The first search's buffers: 16, 32, 64, ... below the whole one, then it.
        self.buffers = [LENGTH_BUCKET * 2**i for i in range(8)
                        if LENGTH_BUCKET * 2**i < self.buffer_length] + [self.buffer_length]

        def searches(rows):
            signature = [tf.TensorSpec([rows, None], tf.int32, name="encoder_token_ids"),
                         tf.TensorSpec([], tf.int32, name="max_steps"),
                         tf.TensorSpec([], tf.int32, name="stop_when_running")]
            return {buffer: tf.function(functools.partial(self._search, buffer),
                                        input_signature=signature, jit_compile=jit_compile,
                                        autograph=False)
                    for buffer in self.buffers}

        self.searches = searches(None)
        # XLA runs a search traced for an unknown batch size slower than the same search
        # traced for a known one (greedy, one sentence, demo model: the export served
        # 1.98x faster with these), so one sentence, the latency case, gets its own.
        self.one_row_searches = searches(1)

    def _search(self, buffer_length, encoder_token_ids, max_steps, stop_when_running):
        step = DecoderStep(self.model, encoder_token_ids, buffer_length, self.beam_size,
                           banned_ids=self.banned_ids,
                           end_at=max_steps if self.force_end else None,
                           min_length=self.min_length)
        batch_size = encoder_token_ids.shape[0] or tf.shape(encoder_token_ids)[0]
        if self.beam_size == 1:
            # Beam search with K = 1 is greedy search: the greedy loop gives its tokens
            # without the beam's bookkeeping (top-2K, the finished pool).
            out = greedy_search(step, batch_size, buffer_length, max_steps,
                                no_repeat_ngram_size=self.no_repeat_ngram_size,
                                stop_when_running=stop_when_running)
            lengths = source_lengths(out["token_ids"])  # the tokens up to the end, included
            nbest_ids = out["token_ids"][:, None]
            nbest_scores = (out["scores"] / penalty(lengths, self.alpha,
                                                    self.length_penalty))[:, None]
        else:
            out = beam_search(step, batch_size, buffer_length, max_steps,
                              beam_size=self.beam_size, alpha=self.alpha,
                              no_repeat_ngram_size=self.no_repeat_ngram_size,
                              length_penalty=self.length_penalty,
                              stop_when_running=stop_when_running)
            nbest_ids, nbest_scores = out["nbest_token_ids"], out["nbest_scores"]
        done = out["done"] | (out["num_steps"] >= max_steps)
        nbest_ids = tf.pad(nbest_ids, [[0, 0], [0, 0], [0, self.buffer_length - buffer_length]])
        return nbest_ids, nbest_scores, done

    def search_in_buffer_for(self, tokens, ids, *args):
        """The search of `ids` `(B', S')` in the smallest buffer that holds `tokens`
        output tokens (a scalar tensor; the last buffer, the whole one, holds any)."""
        shorter = tf.reduce_sum(
            tf.cast(tf.constant(self.buffers[:-1], tf.int32) < tokens, tf.int32))

        def in_buffer(searches, ids):
            return tf.switch_case(shorter, [functools.partial(searches[buffer], ids, *args)
                                            for buffer in self.buffers])

        return tf.cond(tf.shape(ids)[0] == 1,
                       lambda: in_buffer(self.one_row_searches, tf.reshape(ids, [1, -1])),
                       lambda: in_buffer(self.searches, ids))

    def shrinking_search(self, ids, batch_size, limit):
        """The n-best of padded sources `ids` `(B', S')`, as `generate`'s shrinking batch:
        a first search with a short buffer stops once at most a quarter of the rows
        run; those rows are then searched again, gathered into a smaller batch, with
        a buffer that holds the batch's output `limit`. Rows are independent, so the
        tokens are those of one search.
        """
        rows = tf.shape(ids)[0]
        longest = max_or_zero(source_lengths(ids))
        first = tf.minimum(limit, longest + FIRST_SEARCH_SLACK)
        nbest_ids, scores, done = self.search_in_buffer_for(first, ids, limit, rows // 4)
        done = done | (tf.range(rows) >= batch_size)  # filler rows need no second search
        pending = tf.where(tf.logical_not(done))[:, 0]

        def search_again():
            again = pad_sources(tf.gather(ids, pending), self.model)
            more_ids, more_scores, _ = self.search_in_buffer_for(limit, again, limit, 0)
            count, rows_at = tf.size(pending), pending[:, None]
            return (tf.tensor_scatter_nd_update(nbest_ids, rows_at, more_ids[:count]),
                    tf.tensor_scatter_nd_update(scores, rows_at, more_scores[:count]))

        return tf.cond(tf.size(pending) > 0, search_again, lambda: (nbest_ids, scores))

    def source_ids(self, text):
        """Source ids `(B, S)` (pieces then `END_ID`) and the mask of empty sources."""
        text = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace")
        pieces = self.tokenizer.tokenize(text)
        empty = tf.equal(pieces.row_lengths(), 0)
        return with_end(pieces, self.max_sequence_length).to_tensor(PAD_ID), empty

    def translate(self, text):
        """The best output and the n-best list of a batch of strings."""
        ids, empty = self.source_ids(text)
        limit = output_limit(source_lengths(ids), self.max_length, self.model,
                             self.max_length_offset)
        batch_size = tf.shape(ids)[0]
        nbest_ids, nbest_scores = self.shrinking_search(pad_sources(ids, self.model),
                                                        batch_size, limit)
        nbest_ids, nbest_scores = nbest_ids[:batch_size], nbest_scores[:batch_size]
        # Empty sources: an empty translation, `[END_ID, PAD_ID, ...]`, score 0.
        only_end = tf.one_hot(0, tf.shape(nbest_ids)[2], on_value=END_ID, off_value=PAD_ID,
                              dtype=tf.int32)
        nbest_ids = tf.where(empty[:, None, None], only_end[None, None], nbest_ids)
        nbest_scores = tf.where(empty[:, None], 0.0, nbest_scores)
        return nbest_ids[:, :, :longest_output(nbest_ids)], nbest_scores

    def detokenize(self, token_ids):
        """Strings for ids of any rank >= 2 (the last axis is the sequence)."""
        shape = tf.shape(token_ids)
        flat = tf.reshape(token_ids, [-1, shape[-1]])
        return tf.reshape(self.tokenizer.detokenize(flat), shape[:-1])

    def serve(self, text):
        nbest_ids, nbest_scores = self.translate(text)
        token_ids = nbest_ids[:, 0]
        return {"translation": self.detokenize(token_ids), "token_ids": token_ids,
                "scores": nbest_scores[:, 0]}

    def nbest(self, text):
        nbest_ids, nbest_scores = self.translate(text)
        return {"translations": self.detokenize(nbest_ids), "token_ids": nbest_ids,
                "scores": nbest_scores}


def export_saved_model(
    translator_or_model_dir,
    path,
    beam_size=None,
    alpha=None,
    max_length=None,
    *,
    max_sequence_length=None,
    max_length_offset=None,
    no_repeat_ngram_size=None,
    min_length=None,
    quantization=None,
    jit_compile=True,
    verbose=False,
):
    """Write a SavedModel that translates a batch of strings with beam search.

    See the module docstring for the signatures. The beam size, `alpha` and the
    length limits are fixed at export time and returned by the `metadata` signature.
    Settings not given are the translator's (an imported model's saved decoding
    settings, with its length-penalty rule, banned ids and forced end), else the
    paper's.
    The SentencePiece model is carried inside the SavedModel (as a constant of the
    tracked tokenizer resource), so loading needs TensorFlow and `tensorflow_text` only.

    Args:
        translator_or_model_dir: a `Translator`, or a model directory written by
            training (model.keras, tokenizer.model, config.json).
        path: str. The SavedModel directory to write.
        beam_size: int. Beam size K. Defaults to `4` (the paper).
        alpha: float >= 0. Length penalty exponent. Defaults to `0.6` (the paper).
        max_length: int or `None`. Most output tokens (end token included); the
            limit of a batch is `min(longest source + max_length_offset, max_length)`.
            Defaults to `max_sequence_length`.
        max_sequence_length: int or `None`. Sources are cut to this many ids, end
            token included. Defaults to the translator's (config.json's), else the
            model's `max_sequence_length`.
        max_length_offset: int. The paper's `+ 50`. Defaults to `50`.
        no_repeat_ngram_size: int or `None`. Never repeat an n-gram of this size in an
            output (see `generate`). Defaults to `None` (off, as in the paper).
        min_length: int >= 0. No output ends before this many tokens (see
            `generate`). Defaults to the translator's, else `1`.
        quantization: `None` or `"int8"`: export the model with int8 weights
            (`Transformer.quantize`). Defaults to the translator's model as it is.
        jit_compile: bool. Compile the search with XLA. Defaults to `True`.
        verbose: bool. Print the endpoints. Defaults to `False`.

    Returns:
        `path`.

    Example:
    ```python
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    kt.export_saved_model("runs/base", "exports/base/1", beam_size=4, max_length=128)
    translate = tf.saved_model.load("exports/base/1").signatures["serving_default"]
    translate(text=tf.constant(["Guter Wein muss reifen."]))["translation"]
    ```

    The same with an untrained model and a tokenizer trained on the spot:
    >>> import tempfile
    >>> from keras_transformer.data import train_tokenizer
    >>> from keras_transformer.generation import Translator
    >>> from keras_transformer.models import build_transformer
    >>> tokenizer = train_tokenizer(["Guten Tag.", "Good day."] * 5, vocabulary_size=30)
    >>> model = build_transformer("tiny", vocabulary_size=30, num_layers=1)
    >>> path = export_saved_model(Translator(model, tokenizer), tempfile.mkdtemp() + "/1",
    ...                           beam_size=2, max_length=4, max_sequence_length=16)
    >>> loaded = tf.saved_model.load(path)
    >>> json.loads(loaded.signatures["metadata"]()["metadata"].numpy())["beam_size"]
    2
    >>> out = loaded.signatures["serving_default"](text=tf.constant(["Guten Tag.", " "]))
    >>> out["translation"].shape, out["translation"].numpy()[1]
    (TensorShape([2]), b'')
    """
    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(
            "SavedModel export runs under the TensorFlow backend. Run it with "
            "KERAS_BACKEND=tensorflow (a model.keras saved under JAX or PyTorch loads there "
            f"unchanged). Current backend: {keras.backend.backend()!r}"
        )
    translator = _load(translator_or_model_dir)
    model, tokenizer = translator.model, translator.tokenizer
    if quantization is not None:
        from keras_transformer.generation.translator import quantized_copy

        model = quantized_copy(model, quantization)
    translator_max_sequence_length = translator.max_sequence_length
    saved = translator.generate_options
    beam_size = saved.get("beam_size", 4) if beam_size is None else beam_size
    alpha = saved.get("alpha", 0.6) if alpha is None else alpha
    max_length = saved.get("max_length") if max_length is None else max_length
    if max_length_offset is None:
        max_length_offset = saved.get("max_length_offset", MAX_LENGTH_OFFSET)
    if no_repeat_ngram_size is None:
        no_repeat_ngram_size = saved.get("no_repeat_ngram_size")
    if min_length is None:
        min_length = saved.get("min_length", DEFAULT_MIN_LENGTH)
    check_min_length(min_length)
    length_penalty = saved.get("length_penalty", "gnmt")
    force_end = bool(saved.get("force_end", False))
    banned_ids = check_banned_ids(saved.get("banned_ids"), model.vocabulary_size)
    check_beam_options(model.vocabulary_size, beam_size, alpha, length_penalty)
    check_max_length_offset(max_length_offset)
    check_no_repeat_ngram_size(no_repeat_ngram_size)
    if max_sequence_length is None:
        max_sequence_length = translator_max_sequence_length or model.max_sequence_length
    check_positive_int("max_sequence_length", max_sequence_length)
    if max_length is None:
        max_length = max_sequence_length
    check_positive_int("max_length", max_length)
    if model.position_embedding == "learned":
        # A learned position embedding has no positions beyond the model's limit.
        max_length = min(max_length, model.max_sequence_length)
        max_sequence_length = min(max_sequence_length, model.max_sequence_length)

    translation = _Translation(model, tokenizer, beam_size, float(alpha), max_length,
                               max_length_offset, max_sequence_length,
                               no_repeat_ngram_size or None, jit_compile, length_penalty,
                               banned_ids, force_end, int(min_length))
    metadata = json.dumps({
        "method": "beam",
        "beam_size": beam_size,
        "alpha": float(alpha),
        "length_penalty": length_penalty,
        "banned_ids": list(banned_ids),
        "force_end": force_end,
        "max_length": max_length,
        "max_length_offset": max_length_offset,
        "min_length": int(min_length),
        "max_sequence_length": max_sequence_length,
        "no_repeat_ngram_size": no_repeat_ngram_size or None,
        "quantization": getattr(model, "quantization", None),
        "vocabulary_size": model.vocabulary_size,
        "jit_compile": bool(jit_compile),
        "signatures": list(SIGNATURES),
        "keras_transformer_version": __version__,
    }, sort_keys=True)
    # The SentencePiece model (of our own tokenizer; empty for an imported model's two).
    model_bytes = getattr(tokenizer, "model_bytes", b"")

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.track(tokenizer.graph_tokenizer)  # the SentencePiece resource and its model bytes
    text = tf.TensorSpec([None], tf.string, name="text")
    archive.add_endpoint("serving_default", translation.serve, input_signature=[text])
    archive.add_endpoint("nbest", translation.nbest, input_signature=[text])
    archive.add_endpoint(
        "metadata",
        lambda: {"metadata": tf.constant(metadata), "tokenizer_model": tf.constant(model_bytes)},
        input_signature=[],
    )
    archive.write_out(os.fspath(path), verbose=verbose)
    return path
