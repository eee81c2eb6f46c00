"""`Translator`: strings in, strings out, with the model and its corpus tokenizer."""

import json
import os
import sys
import warnings

import keras
import numpy as np

from keras_transformer.folders import CONFIG_FILE, MODEL_FILE, check_model_folder
from keras_transformer.generation.generate import METHODS, generate
from keras_transformer.layers.embedding import QUANTIZATIONS
from keras_transformer.special_tokens import PAD_ID, START_ID, with_end
from keras_transformer.validation import check_choice, check_positive_int


class Translator:
    """Translate sentences with a trained `Transformer` and its SentencePiece tokenizer.

    Each source becomes its pieces followed by `END_ID`. Inputs are sorted by length
    into batches (less padding, fewer compilations) and returned in their order; a
    progress bar (tqdm, on stderr) shows when there is more than one batch.

    Args:
        model: a `keras_transformer.Transformer`.
        tokenizer: a `keras_transformer.data.tokenizer.Tokenizer` (anything with
            `encode_as_ids(strings)` -> lists of ids and `decode_ids(rows)` -> strings,
            which SentencePiece's Python API provides on every backend).
        method: default decoding method of `translate`. Defaults to `"beam"` (the paper).
        batch_size: int. Sentences per batch. Defaults to `32`.
        max_sequence_length: int or `None`. Sources are cut to this many ids, end
            token included (e.g. the training limit).
        quantization: `None` (the default) or `"int8"`: decode with a copy of the
            model whose token embeddings and output projection are int8
            (`Transformer.quantize`); `model` itself is left as it is.
        **generate_options: defaults for `generate` (`beam_size`, `alpha`, `max_length`,
            `temperature`, `top_k`, `top_p`, `seed`, `no_repeat_ngram_size`, `jit_compile`).

    Example (a directory written by training):
    ```python
    translator = Translator.from_directory("runs/base")
    translator.translate(["Guter Wein muss reifen."])
    ```

    The same with an untrained model and a tokenizer trained on the spot:
    >>> from keras_transformer.data import train_tokenizer
    >>> from keras_transformer.models import build_transformer
    >>> tokenizer = train_tokenizer(["Guten Tag.", "Good day."] * 5, vocabulary_size=30)
    >>> model = build_transformer("tiny", vocabulary_size=30, num_layers=1)
    >>> translator = Translator(model, tokenizer, method="greedy", max_length=5)
    >>> translations = translator.translate(["Guten Tag.", " "])
    >>> len(translations), isinstance(translations[0], str), translations[1]
    (2, True, '')
    """

    def __init__(self, model, tokenizer, method="beam", batch_size=32, max_sequence_length=None,
                 quantization=None, **generate_options):
        check_choice("method", method, METHODS)
        check_positive_int("batch_size", batch_size)
        if max_sequence_length is not None:
            check_positive_int("max_sequence_length", max_sequence_length)
        if quantization is not None:
            model = quantized_copy(model, quantization)
        self.model = model
        self.tokenizer = tokenizer
        self.method = method
        self.batch_size = batch_size
        self.max_sequence_length = max_sequence_length
        self.generate_options = generate_options

    @classmethod
    def from_directory(cls, directory, **kwargs):
        """Load `model.keras`, the tokenizer and (if present) `config.json` from a model
        folder (written by training or by `import`).

        `config.json` may give `max_sequence_length` and, for an imported model, its
        `"generation"` defaults (`method`, `beam_size`, `alpha`, `length_penalty`,
        `max_length`, `force_end`, `banned_ids`); `kwargs` override them and are passed
        to the constructor."""
        import keras_transformer.models  # noqa: F401  (registers the serializable classes)
        from keras_transformer.data.tokenizer_files import load_tokenizer

        check_model_folder(directory)
        model = keras.models.load_model(os.path.join(directory, MODEL_FILE))
        tokenizer = load_tokenizer(directory)
        config = {}
        config_path = os.path.join(directory, CONFIG_FILE)
        if os.path.exists(config_path):
            with open(config_path) as file:
                config = json.load(file)
        if not isinstance(config, dict):
            config = {}
        if isinstance(config.get("max_sequence_length"), int):
            kwargs.setdefault("max_sequence_length", config["max_sequence_length"])
        for name, value in (config.get("generation") or {}).items():
            kwargs.setdefault(name, value)
        return cls(model, tokenizer, **kwargs)

    # --- translation ----------------------------------------------------------------

    def tokenize(self, sentences):
        """Source ids for each sentence: a list of lists of ints, each ending with END_ID.

        (`Transformer.encode` is the encoder's network pass; this is text to ids.)
        """
        pieces = self.tokenizer.encode_as_ids(list(sentences))
        return [with_end(list(ids), self.max_sequence_length) for ids in pieces]

    def detokenize(self, token_ids):
        """Strings for a batch of output ids `(B, L)` (pad, start and end are dropped)."""
        return list(self.tokenizer.decode_ids(np.asarray(token_ids, "int32")))

    def encode(self, sentences):
        """Deprecated name of `tokenize` (the model's `encode` is a network pass)."""
        warnings.warn("`Translator.encode` is now `Translator.tokenize`.", DeprecationWarning,
                      stacklevel=2)
        return self.tokenize(sentences)

    def decode(self, token_ids):
        """Deprecated name of `detokenize` (the model's `decode` is a network pass)."""
        warnings.warn("`Translator.decode` is now `Translator.detokenize`.",
                      DeprecationWarning, stacklevel=2)
        return self.detokenize(token_ids)

    def _generate(self, batch, method, options):
        padded = np.full((len(batch), max(len(ids) for ids in batch)), PAD_ID, "int32")
        for row, ids in enumerate(batch):
            padded[row, : len(ids)] = ids
        return generate(self.model, padded, method, **{**self.generate_options, **options})

    def translate(self, sentences, method=None, batch_size=None, progress=None, **options):
        """Translate a string, or a list, iterable or `tf.data.Dataset` of strings.

        Args:
            sentences: str, iterable of str, or a dataset of (batches of) strings.
            method: `"greedy"`, `"beam"` or `"sample"`; defaults to the translator's.
            batch_size: int; defaults to the translator's.
            progress: bool or `None` (show a bar when there is more than one batch).
            **options: passed to `generate` (e.g. `beam_size=8`).

        Returns:
            A str for a str, else a list of str in the input order.
        """
        if isinstance(sentences, str):
            return self.translate([sentences], method, batch_size, False, **options)[0]
        method = self.method if method is None else method
        check_choice("method", method, METHODS)
        batch_size = self.batch_size if batch_size is None else batch_size
        check_positive_int("batch_size", batch_size)
        sentences = _as_strings(sentences)
        sources = self.tokenize(sentences) if sentences else []
        # A blank sentence translates to "" without running the model (as the export does).
        translations = ["" if not text.strip() else None for text in sentences]
        order = sorted((i for i, text in enumerate(translations) if text is None),
                       key=lambda i: len(sources[i]), reverse=True)
        starts = range(0, len(order), batch_size)
        if progress or (progress is None and len(starts) > 1):
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc="Translating", unit="batch", file=sys.stderr)
        for start in starts:
            indices = order[start : start + batch_size]
            out = self._generate([sources[i] for i in indices], method, options)
            for i, text in zip(indices, self.detokenize(out["token_ids"]), strict=True):
                translations[i] = text
        return translations

    def translate_file(self, path, output_path=None, **kwargs):
        """Translate a file, one sentence a line; write to `output_path` or return a list.

        A line with invalid UTF-8 is translated with U+FFFD in place of its bad bytes,
        and a warning on stderr names the line (see `read_lines`)."""
        with open(path, "rb") as file:
            lines = read_lines(file, path)
        translations = self.translate(lines, **kwargs)
        if output_path is None:
            return translations
        with open(output_path, "w", encoding="utf-8") as file:
            file.writelines(text + "\n" for text in translations)
        return output_path

    # --- inspection -------------------------------------------------------------------

    def pieces(self, token_ids):
        """The piece strings of `token_ids` (e.g. `["▁Gut", "er", "</s>"]`)."""
        ids = [int(i) for i in token_ids]
        if hasattr(self.tokenizer, "id_to_piece"):
            return [self.tokenizer.id_to_piece(i) for i in ids]
        return [str(i) for i in ids]

    def attention(self, sentence, method="greedy", **options):
        """Translate `sentence` and return every attention map of the model on it.

        The decoder reads `<s>` plus the output (teacher forcing), so row `t` of a
        decoder map is the query that produced output piece `t` (Figures 3-5).

        Returns:
            A dict: `"translation"` (str), `"source_pieces"` (S, end included),
            `"target_pieces"` (T, the output, end included), `"decoder_input_pieces"`
            (T), and, one NumPy array per layer, `"encoder_self_attention"` `(N, S, S)`,
            `"decoder_self_attention"` `(N, T, T)` and `"cross_attention"` `(N, T, S)`.
        """
        source = self.tokenize([sentence])[0]
        out = self._generate([source], method, options)
        target = [int(i) for i in out["token_ids"][0] if i != PAD_ID]
        decoder_input = [START_ID] + target[:-1]
        weights = self.model.attention_weights(
            np.array([source], "int32"), np.array([decoder_input], "int32")
        )
        result = {
            "translation": self.detokenize([target])[0],
            "source_pieces": self.pieces(source),
            "target_pieces": self.pieces(target),
            "decoder_input_pieces": self.pieces(decoder_input),
        }
        for name, maps in weights.items():
            result[name] = [keras.ops.convert_to_numpy(w)[0] for w in maps]
        return result


# What `quantization="int8"` quantizes: the token embeddings, that is the tied output
# projection, the largest product of a decoding step. Keras's int8 `Dense`, which
# quantizes its input at every call, made greedy decoding slower on the demo model (0.75x
# float32, batch 1, AVX2) and beam search at batch 32 only 1.09x faster
# (docs/guides/performance.md); `model.quantize("int8")` quantizes every layer.
DECODING_QUANTIZATION_FILTERS = "token_embedding"


def quantized_copy(model, mode="int8", filters=DECODING_QUANTIZATION_FILTERS):
    """A copy of a `Transformer` with its weights quantized (`Transformer.quantize`), or
    `model` itself when it already is; a `ValueError` names an unknown `mode`."""
    check_choice("quantization", mode, QUANTIZATIONS)
    if getattr(model, "quantization", None) == mode:
        return model
    copy = type(model).from_config(model.get_config())
    copy.set_weights(model.get_weights())
    copy.quantize(mode, filters=filters)
    return copy


def read_lines(binary_file, name="<stdin>", warn=True):
    """The lines of a binary (or text) file as str, without line ends, one per input line.

    Invalid UTF-8 never costs a line or the whole file: its bytes become U+FFFD and
    (with `warn`) a warning on stderr names the line, the byte and its column, e.g.
    `warning: in.txt line 3: invalid UTF-8 byte 0xff at column 5, replaced by U+FFFD`.

    Example:
    >>> import io
    >>> read_lines(io.BytesIO(b"gut\\n\\xffok\\r\\n"), warn=False) == ["gut", "\\ufffdok"]
    True
    """
    lines = []
    for number, raw in enumerate(binary_file, start=1):
        if isinstance(raw, str):  # a text stream (already decoded)
            lines.append(raw.rstrip("\n").rstrip("\r"))
            continue
        raw = raw.rstrip(b"\n").rstrip(b"\r")
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            lines.append(raw.decode("utf-8", errors="replace"))
            if warn:
                print(f"warning: {name} line {number}: invalid UTF-8 byte "
                      f"0x{raw[error.start]:02x} at column {error.start + 1}, replaced by "
                      "U+FFFD", file=sys.stderr)
    return lines


def _as_strings(sentences):
    """A list of str from an iterable of str/bytes or a dataset of (batches of) strings."""
    strings = []
    for item in sentences:
        if hasattr(item, "numpy"):
            item = item.numpy()
        values = item.reshape(-1).tolist() if isinstance(item, np.ndarray) else [item]
        for value in values:
            strings.append(value.decode("utf-8", errors="replace") if isinstance(value, bytes)
                           else str(value))
    return strings
