"""The tokenizer of an imported OPUS-MT (Marian) model, with the package's special ids.

Hugging Face OPUS-MT checkpoints (`transformers.MarianMTModel`) number their vocabulary as
Marian does: `</s>` 0, `<unk>` 1, the pieces, `<pad>` last, and decoding starts from the
pad id. The importer permutes the vocabulary into the package's id order
(`marian_id_order`): `PAD_ID` 0, `UNK_ID` 1, `START_ID` 2 (Marian's decoder start: the pad
row again), `END_ID` 3, then every other Marian id in increasing order; the rest of the
package reads the ids as it reads its own.

`MarianTokenizer` gives the ids `transformers.MarianTokenizer` (5.x) gives, in that order:
`encode_as_ids` those of `tokenizer(texts)` without the final `</s>`,
`encode_targets_as_ids` those of `tokenizer(text_target=texts)`, and `decode_ids` the
strings of `tokenizer.decode(ids, skip_special_tokens=True)`. Like Hugging Face's, it
splits a leading language code (`">>fr<<"`) off as one token, turns the literal strings
`<pad>`, `<unk>` and `</s>` in a text into their ids, and applies no punctuation
normalization (Hugging Face defines `normalize`, with sacremoses, but its encoding never
calls it). `tokenize`, `tokenize_targets` and `detokenize` give the same results with
TensorFlow ops, for `tf.data` and SavedModels.
"""

import json
import os
import re

import numpy as np
import sentencepiece

from keras_transformer.backend import require_tensorflow
from keras_transformer.data.tokenizer import _file_system, shared_sentencepiece
from keras_transformer.special_tokens import END_ID, PAD_ID, START_ID, UNK_ID

SOURCE_MODEL_FILE = "source.spm"
TARGET_MODEL_FILE = "target.spm"
VOCABULARY_FILE = "vocabulary.json"
_FILES = (SOURCE_MODEL_FILE, TARGET_MODEL_FILE, VOCABULARY_FILE)

# Decoding skips every special id, `<unk>` included, as `skip_special_tokens=True` does.
_SKIPPED_IDS = (PAD_ID, UNK_ID, START_ID, END_ID)
_SPACE = "\u2581"  # SentencePiece's "▁"
# `remove_language_code`: a text starting with ">>" loses everything up to the first "<<".
_LANGUAGE_CODE = re.compile(r">>.*?<<", re.DOTALL)
_GRAPH_LANGUAGE_CODE = r"(?s)^>>.*?<<"
# The characters `str.strip` removes (`str.isspace`), as an RE2 class.
_PYTHON_WHITESPACE = (
    r"[\x{9}-\x{d}\x{1c}-\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}"
    r"\x{202f}\x{205f}\x{3000}]"
)
_GRAPH_STRIP = f"^{_PYTHON_WHITESPACE}+|{_PYTHON_WHITESPACE}+$"
# `PreTrainedTokenizerBase.clean_up_tokenization`, in its order.
_CLEAN_UP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"),
             (" n't", "n't"), (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))
_SNAPSHOT_FIX = (
    "A Hugging Face OPUS-MT snapshot holds source.spm, target.spm, vocab.json, "
    "tokenizer_config.json and config.json: download the whole model repository (for example "
    "`huggingface_hub.snapshot_download('Helsinki-NLP/opus-mt-de-en')`) and pass its folder."
)


def marian_id_order(vocabulary, pad_id, eos_id, unk_id, start_id):
    """The Marian ids in the package's id order: `order[our_id] == marian_id`.

    Our 0 (`PAD_ID`) is Marian's pad, 1 (`UNK_ID`) its `<unk>`, 2 (`START_ID`) its decoder
    start, 3 (`END_ID`) its eos, and 4 onwards every other Marian id in increasing order.
    OPUS-MT starts decoding from its pad id, which then appears twice, so the permuted
    vocabulary is one larger than Marian's.

    Args:
        vocabulary: dict of piece to Marian id (the content of `vocab.json`).
        pad_id, eos_id, unk_id, start_id: int. Marian's ids of pad, `</s>`, `<unk>` and the
            decoder start (`pad_token_id`, `eos_token_id`, `vocab["<unk>"]`,
            `decoder_start_token_id`).

    Returns:
        A list of Marian ids.

    Raises:
        ValueError: two pieces share an id, an id is not in `vocabulary`, or pad, eos and
            unk are not three different ids, or the start id is eos or unk.

    Example:
    >>> vocabulary = {"</s>": 0, "<unk>": 1, "▁Hund": 2, "e": 3, "<pad>": 4}
    >>> marian_id_order(vocabulary, pad_id=4, eos_id=0, unk_id=1, start_id=4)
    [4, 1, 4, 0, 2, 3]
    """
    pieces = {}
    for piece, marian_id in vocabulary.items():
        if not isinstance(marian_id, int) or isinstance(marian_id, bool) or marian_id < 0:
            raise ValueError(f"Vocabulary ids must be ints from 0. Received {marian_id!r} for "
                             f"the piece {piece!r}.")
        if marian_id in pieces:
            raise ValueError(f"The vocabulary gives the id {marian_id} to both "
                             f"{pieces[marian_id]!r} and {piece!r}; each id must name one piece.")
        pieces[marian_id] = piece
    named = {"pad_id": pad_id, "eos_id": eos_id, "unk_id": unk_id, "start_id": start_id}
    for name, marian_id in named.items():
        if marian_id not in pieces:
            raise ValueError(f"`{name}`={marian_id!r} is not an id of the vocabulary (ids "
                             f"{min(pieces, default=None)} to {max(pieces, default=None)}). Pass "
                             "the ids of the model's config.json and vocab.json.")
    if len({pad_id, eos_id, unk_id}) < 3:
        raise ValueError("`pad_id`, `eos_id` and `unk_id` must be three different ids: the "
                         "package gives them different ids (0, 3, 1). Received "
                         f"pad_id={pad_id}, eos_id={eos_id}, unk_id={unk_id}.")
    if start_id in (eos_id, unk_id):
        raise ValueError(f"`start_id`={start_id} must not be the eos or unk id; OPUS-MT starts "
                         f"decoding from its pad id ({pad_id}).")
    special = {pad_id, eos_id, unk_id, start_id}
    return [pad_id, unk_id, start_id, eos_id] + sorted(set(pieces) - special)


def is_marian_directory(directory):
    """Whether `directory` holds the files `MarianTokenizer.save` writes.

    Example:
    >>> is_marian_directory("no/such/folder")
    False
    """
    exists, _ = _file_system(str(directory))
    return all(exists(_join(directory, file)) for file in _FILES)


class MarianTokenizer:
    """The two SentencePiece models and vocabularies of an OPUS-MT model, with the package's
    fixed special ids.

    Source texts use the source model (`encode_as_ids`, `tokenize`), target texts the
    target model (`encode_targets_as_ids`, `tokenize_targets`); ids decode into target
    text (`decode_ids`, `detokenize`). Ids follow `marian_id_order`: tokenizing never adds
    start or end ids (the data pipeline does) and decoding drops pad, unk, start and end,
    as Hugging Face's `decode(ids, skip_special_tokens=True)` drops pad, `<unk>` and
    `</s>`. With a shared vocabulary Hugging Face decodes with the *source* model (its
    `default_use_source = not separate_vocabs`); this tokenizer does the same. Build one
    with `from_snapshot` (a Hugging Face snapshot) or `from_directory` (a folder `save`
    wrote).

    Args:
        source_model: bytes. The source SentencePiece model (`source.spm`).
        target_model: bytes. The target SentencePiece model (`target.spm`).
        source_pieces: list of str. The source vocabulary in the package's id order: pad,
            unk, a start placeholder, eos, then the pieces (`source_pieces[our_id]`).
        target_pieces: list of str, or `None` when the vocabulary is shared (one list
            for both sides, as in most OPUS-MT models).
        clean_up_tokenization_spaces: bool. Whether decoding applies Hugging Face's
            `clean_up_tokenization` (`" ."` to `"."`, ...), as `tokenizer_config.json`
            asks. Defaults to `False`.
        name: str. Name of the TensorFlow module that `graph_tokenizer` builds.

    Attributes:
        source_order, target_order: lists of Marian ids in the package's order
            (`marian_id_order`), set by `from_snapshot` (`None` otherwise): the importer
            permutes embedding rows with them.

    Example (a made-up vocabulary on a small SentencePiece model):
    >>> from keras_transformer.data import train_tokenizer
    >>> model = train_tokenizer(["Guten Morgen.", "Good morning."] * 10, vocabulary_size=40)
    >>> pieces = ["<pad>", "<unk>", "<start>", "</s>"] + [
    ...     model.id_to_piece(i) for i in range(4, model.vocabulary_size)]
    >>> tokenizer = MarianTokenizer(model.model_bytes, model.model_bytes, pieces)
    >>> tokenizer.decode_ids(tokenizer.encode_as_ids(["Guten Morgen."]))
    ['Guten Morgen.']
    >>> tokenizer.detokenize(tokenizer.tokenize(["Guten Morgen."])).numpy()
    array([b'Guten Morgen.'], dtype=object)
    """

    def __init__(self, source_model, target_model, source_pieces, target_pieces=None,
                 clean_up_tokenization_spaces=False, name="marian_tokenizer"):
        self.name = name
        self.source_model = bytes(source_model)
        self.target_model = bytes(target_model)
        self.shared = target_pieces is None
        self.source_pieces = _checked_pieces(source_pieces, "source_pieces")
        self.target_pieces = (self.source_pieces if self.shared
                              else _checked_pieces(target_pieces, "target_pieces"))
        for token_id in (PAD_ID, UNK_ID, END_ID):
            if self.target_pieces[token_id] != self.source_pieces[token_id]:
                raise ValueError(
                    f"`target_pieces[{token_id}]` ({self.target_pieces[token_id]!r}) must be "
                    f"`source_pieces[{token_id}]` ({self.source_pieces[token_id]!r}): Hugging "
                    "Face reads pad, unk and eos from the source vocabulary on both sides.")
        self.clean_up_tokenization_spaces = bool(clean_up_tokenization_spaces)
        self.source_order = None
        self.target_order = None
        self._source_processor = _processor(self.source_model, "source_model")
        self._target_processor = _processor(self.target_model, "target_model")
        # Hugging Face's quirk: a shared vocabulary decodes with the source model.
        self._decoder = self._source_processor if self.shared else self._target_processor
        _check_decodable(self._decoder, "source_model" if self.shared else "target_model")
        self._source_ids = _piece_ids(self.source_pieces)
        self._target_ids = self._source_ids if self.shared else _piece_ids(self.target_pieces)
        self._special_ids = {self.source_pieces[i]: i for i in (PAD_ID, UNK_ID, END_ID)}
        specials = sorted(self._special_ids, key=len, reverse=True)  # longest match first
        self._special_split = re.compile("(" + "|".join(map(re.escape, specials)) + ")")
        self._graph_special_split = "|".join(map(_re2_literal, specials))
        self._surfaces = _decoded_surfaces(self._decoder, self.target_pieces)
        self._graph = None  # the TensorFlow module, built when first needed

    @property
    def vocabulary_size(self):
        """Number of target ids (the decoder's vocabulary), `START_ID` included."""
        return len(self.target_pieces)

    @property
    def source_vocabulary_size(self):
        """Number of source ids (the encoder's vocabulary)."""
        return len(self.source_pieces)

    @classmethod
    def from_snapshot(cls, snapshot_dir, name="marian_tokenizer"):
        """Builds the tokenizer of a local Hugging Face OPUS-MT snapshot.

        Reads `source.spm`, `target.spm`, `vocab.json` (and `target_vocab.json` when
        `tokenizer_config.json` sets `separate_vocabs`), `pad_token_id`, `eos_token_id`,
        `decoder_start_token_id` and `vocab_size` of `config.json`, and, where present,
        `tokenizer_config.json` and the legacy `special_tokens_map.json` and
        `added_tokens.json`, as Hugging Face reads them. Sets `source_order` and
        `target_order`. (A decoder start other than the pad id, which no OPUS-MT model
        has, gets `START_ID`, and encoding never gives that id.)

        Raises:
            FileNotFoundError: a file is missing.
            ValueError: a field is missing, the files disagree, or they set special tokens
                other than `<unk>`, `</s>` and `<pad>`.

        Example:
        >>> MarianTokenizer.from_snapshot("no/such/snapshot")
        Traceback (most recent call last):
        ...
        FileNotFoundError: `no/such/snapshot/config.json` is missing. ...
        """
        directory = str(snapshot_dir)
        config = _read_json(directory, "config.json")
        settings = _tokenizer_settings(directory)
        fields = {}
        for field in ("pad_token_id", "eos_token_id", "decoder_start_token_id", "vocab_size"):
            value = config.get(field)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(
                    f"`{directory}/config.json` has no int `{field}` (found {value!r}). An "
                    "OPUS-MT config.json sets it (pad and decoder start: the last vocabulary "
                    "id; eos: 0); add it, or download the snapshot again.")
            fields[field] = value
        pad_id, eos_id, start_id = (fields["pad_token_id"], fields["eos_token_id"],
                                    fields["decoder_start_token_id"])
        shared = not settings.get("separate_vocabs", False)
        decoder_size = config.get("decoder_vocab_size") or fields["vocab_size"]
        if shared and decoder_size != fields["vocab_size"]:
            raise ValueError(
                f"`{directory}/config.json` has decoder_vocab_size={decoder_size} but "
                f"vocab_size={fields['vocab_size']}, while tokenizer_config.json shares one "
                "vocabulary (no `separate_vocabs: true`): set `separate_vocabs` and add "
                "target_vocab.json, or correct decoder_vocab_size.")
        tokens = {key: _token_string(settings, key, default) for key, default in
                  (("unk_token", "<unk>"), ("eos_token", "</s>"), ("pad_token", "<pad>"))}
        vocabulary = _read_json(directory, "vocab.json")
        unk_id = _check_vocabulary(vocabulary, "vocab.json", directory, tokens,
                                   {"eos_token": eos_id, "pad_token": pad_id},
                                   fields["vocab_size"], "vocab_size")
        vocabularies = [vocabulary]
        if not shared:
            target_vocabulary = _read_json(directory, "target_vocab.json", fix=(
                "tokenizer_config.json sets `separate_vocabs: true`, so the snapshot needs "
                "target_vocab.json; download the snapshot again."))
            _check_vocabulary(target_vocabulary, "target_vocab.json", directory, tokens,
                              {"eos_token": eos_id, "pad_token": pad_id, "unk_token": unk_id},
                              decoder_size, "decoder_vocab_size")
            vocabularies.append(target_vocabulary)
        placeholder = _start_placeholder(vocabularies)
        orders = [marian_id_order(v, pad_id, eos_id, unk_id, start_id) for v in vocabularies]
        pieces = [_pieces_in_order(v, order, placeholder)
                  for v, order in zip(vocabularies, orders, strict=True)]
        tokenizer = cls(
            _read_bytes(directory, SOURCE_MODEL_FILE),
            _read_bytes(directory, TARGET_MODEL_FILE),
            pieces[0],
            None if shared else pieces[1],
            clean_up_tokenization_spaces=bool(settings.get("clean_up_tokenization_spaces")),
            name=name,
        )
        tokenizer.source_order, tokenizer.target_order = orders[0], orders[-1]
        return tokenizer

    @classmethod
    def from_directory(cls, directory, name="marian_tokenizer"):
        """Loads a tokenizer that `save` wrote into `directory` (a local path, or any
        `tf.io.gfile` URL such as `gs://...` where TensorFlow is installed).

        Raises:
            FileNotFoundError: a file is missing.
            ValueError: `vocabulary.json` is not one `save` writes.

        Example:
        >>> MarianTokenizer.from_directory("no/such/folder")
        Traceback (most recent call last):
        ...
        FileNotFoundError: Marian tokenizer file not found: `no/such/folder/source.spm`. ...
        """
        fix = ("Write the folder with `MarianTokenizer.save` (the OPUS-MT importer does), or "
               "build the tokenizer from a Hugging Face snapshot with "
               "`MarianTokenizer.from_snapshot`.")
        exists, opener = _file_system(str(directory))
        contents = {}
        for file in _FILES:
            path = _join(directory, file)
            if not exists(path):
                raise FileNotFoundError(f"Marian tokenizer file not found: `{path}`. {fix}")
            with opener(path, "rb") as handle:
                contents[file] = handle.read()
        vocabulary = json.loads(contents[VOCABULARY_FILE].decode("utf-8"))
        if not isinstance(vocabulary, dict) or not isinstance(vocabulary.get("source"), list):
            raise ValueError(f"`{_join(directory, VOCABULARY_FILE)}` must hold "
                             '{"source": [pieces...], "target": [pieces...] or null}. ' + fix)
        return cls(contents[SOURCE_MODEL_FILE], contents[TARGET_MODEL_FILE],
                   vocabulary["source"], vocabulary.get("target"),
                   clean_up_tokenization_spaces=vocabulary.get("clean_up_tokenization_spaces",
                                                               False),
                   name=name)

    def save(self, directory):
        """Writes `source.spm`, `target.spm` and `vocabulary.json` into `directory`
        (created if missing), readable by `from_directory`. `vocabulary.json` holds
        `{"source": [...], "target": [...] or null, "clean_up_tokenization_spaces": ...}`,
        pieces in the package's id order (`target` is null for a shared vocabulary)."""
        directory = str(directory)
        if "://" in directory:
            require_tensorflow(f"Writing `{directory}`").io.gfile.makedirs(directory)
        else:
            os.makedirs(directory, exist_ok=True)
        vocabulary = {
            "source": self.source_pieces,
            "target": None if self.shared else self.target_pieces,
            "clean_up_tokenization_spaces": self.clean_up_tokenization_spaces,
        }
        contents = {
            SOURCE_MODEL_FILE: self.source_model,
            TARGET_MODEL_FILE: self.target_model,
            VOCABULARY_FILE: json.dumps(vocabulary, ensure_ascii=False, indent=1).encode("utf-8"),
        }
        _, opener = _file_system(directory)
        for file, content in contents.items():
            with opener(_join(directory, file), "wb") as handle:
                handle.write(content)

    # --- Python API (every backend) -----------------------------------------------------

    def encode_as_ids(self, strings):
        """Source ids of each string, without start or end ids: a list of lists of ints."""
        return [self._encode(str(s), self._source_processor, self._source_ids)
                for s in strings]

    def encode_targets_as_ids(self, strings):
        """Target ids of each string (Hugging Face's `text_target=`), without start or end
        ids: a list of lists of ints."""
        return [self._encode(str(s), self._target_processor, self._target_ids)
                for s in strings]

    def _encode(self, text, processor, piece_ids):
        ids = []
        # Hugging Face splits the literal special strings off first, then tokenizes each
        # remaining chunk: its language code, then SentencePiece pieces.
        for chunk in self._special_split.split(text):
            if chunk in self._special_ids:
                ids.append(self._special_ids[chunk])
                continue
            code = _LANGUAGE_CODE.match(chunk) if chunk.startswith(">>") else None
            if code:
                ids.append(piece_ids.get(code.group(), UNK_ID))
                chunk = chunk[code.end():]
            ids.extend(piece_ids.get(piece, UNK_ID)
                       for piece in processor.encode(chunk, out_type=str))
        return ids

    def decode_ids(self, ids):
        """Target strings for rows of ids (lists or a `(B, T)` array); pad, unk, start and
        end dropped.

        Raises:
            ValueError: an id is outside the target vocabulary.
        """
        rows = ids.tolist() if isinstance(ids, np.ndarray) else [list(row) for row in ids]
        texts = []
        for row in rows:
            pieces = []
            for token_id in map(int, row):
                if not 0 <= token_id < self.vocabulary_size:
                    raise ValueError(f"Id {token_id} is outside the target vocabulary (ids 0 "
                                     f"to {self.vocabulary_size - 1}).")
                if token_id not in _SKIPPED_IDS:
                    pieces.append(self.target_pieces[token_id])
            # `convert_tokens_to_string`: pieces SentencePiece does not know stay as they
            # are, so their "▁" is replaced here.
            text = self._decoder.decode_pieces(pieces).replace(_SPACE, " ").strip()
            texts.append(_clean_up(text) if self.clean_up_tokenization_spaces else text)
        return texts

    def id_to_piece(self, token_id):
        """The target piece string of one id (e.g. `"▁Hund"`)."""
        return self.target_pieces[int(token_id)]

    # --- TensorFlow API (tf.data, SavedModel) ------------------------------------------

    @property
    def graph_tokenizer(self):
        """The `tf.Module` holding what `tokenize`, `tokenize_targets` and `detokenize` run
        (two SentencePiece models and the vocabulary tables); track it in a SavedModel
        that calls them."""
        if self._graph is None:
            self._graph = self._build()
        return self._graph

    def _build(self):
        feature = "The in-graph Marian tokenizer (`MarianTokenizer.tokenize`)"
        tf = require_tensorflow(feature)

        def sentencepiece_ops(model_bytes, side):
            return shared_sentencepiece(model_bytes, tf.string, f"{self.name}_{side}")

        def table(mapping, default):
            return tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(
                    tf.constant(list(mapping), tf.string),
                    tf.constant(list(mapping.values()), tf.int32)),
                default_value=default)

        with tf.init_scope():  # eager resources, even when first needed inside a trace
            module = tf.Module(name=self.name)
            module.source_sentencepiece = sentencepiece_ops(self.source_model, "source")
            module.target_sentencepiece = sentencepiece_ops(self.target_model, "target")
            module.source_ids = table(self._source_ids, UNK_ID)
            module.target_ids = module.source_ids if self.shared else table(self._target_ids,
                                                                            UNK_ID)
            module.special_ids = table(self._special_ids, -1)
            module.surfaces = tf.constant(self._surfaces, tf.string)
        return module

    def tokenize(self, strings):
        """Splits source strings into ids, without start or end ids (TensorFlow ops).

        Args:
            strings: string tensor or Python strings, shape `(B,)` or scalar.

        Returns:
            int32 `tf.RaggedTensor` `(B, None)`, or an int32 tensor `(T,)` for a scalar.
        """
        graph = self.graph_tokenizer
        return self._tokenize(strings, graph.source_sentencepiece, graph.source_ids)

    def tokenize_targets(self, strings):
        """Splits target strings into ids, as `tokenize` splits source strings."""
        graph = self.graph_tokenizer
        return self._tokenize(strings, graph.target_sentencepiece, graph.target_ids)

    def _tokenize(self, strings, sentencepiece_ops, piece_ids):
        feature = "The in-graph Marian tokenizer (`MarianTokenizer.tokenize`)"
        tf = require_tensorflow(feature)
        tensorflow_text = require_tensorflow(feature, "tensorflow_text")
        strings = tf.convert_to_tensor(strings, tf.string)
        if strings.shape.rank == 0:
            return self._tokenize(strings[tf.newaxis], sentencepiece_ops, piece_ids)[0]
        if strings.shape.rank != 1:
            raise ValueError(f"`strings` must be a scalar or have shape (B,). Received shape "
                             f"{strings.shape}.")
        chunks = tensorflow_text.regex_split(
            strings, self._graph_special_split, self._graph_special_split)
        chunk = chunks.flat_values
        special = self.graph_tokenizer.special_ids.lookup(chunk)
        is_special = special >= 0
        has_code = tf.strings.regex_full_match(chunk, r"(?s)>>.*?<<.*") & ~is_special
        code = tf.strings.regex_replace(chunk, r"(?s)^(>>.*?<<).*$", r"\1")
        rest = tf.strings.regex_replace(chunk, _GRAPH_LANGUAGE_CODE, "", replace_global=False)
        rest = tf.where(is_special, "", tf.where(has_code, rest, chunk))
        pieces = sentencepiece_ops.tokenize(rest)
        ids = pieces.with_flat_values(piece_ids.lookup(pieces.flat_values))
        has_head = is_special | has_code  # a special id, or the id of a language code
        head = tf.where(is_special, special, piece_ids.lookup(code))
        heads = tf.RaggedTensor.from_row_lengths(
            tf.boolean_mask(head, has_head), tf.cast(has_head, ids.row_splits.dtype))
        ids = tf.concat([heads, ids], axis=1)
        return chunks.with_flat_values(ids).merge_dims(1, 2)

    def detokenize(self, ids):
        """Turns target ids back into strings, dropping pad, unk, start and end ids
        (TensorFlow ops).

        Args:
            ids: int tensor, dense (padded) or ragged, shape `(B, T)` or `(T,)`.

        Returns:
            String tensor `(B,)`, or a scalar string for `(T,)` input.
        """
        tf = require_tensorflow("The in-graph Marian tokenizer (`MarianTokenizer.detokenize`)")
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.convert_to_tensor(ids)
        ids = tf.cast(ids, tf.int32)
        keep = (ids != PAD_ID) & (ids != UNK_ID) & (ids != START_ID) & (ids != END_ID)
        ids = tf.ragged.boolean_mask(ids, keep)
        surfaces = self.graph_tokenizer.surfaces
        if isinstance(ids, tf.RaggedTensor):
            pieces = ids.with_flat_values(tf.gather(surfaces, ids.flat_values))
        else:
            pieces = tf.gather(surfaces, ids)
        text = tf.strings.reduce_join(pieces, axis=-1)
        text = tf.strings.regex_replace(text, _GRAPH_STRIP, "")
        if self.clean_up_tokenization_spaces:
            for old, new in _CLEAN_UP:
                text = tf.strings.regex_replace(text, _re2_literal(old), new)
        return text


# --- helpers --------------------------------------------------------------------------


def _join(directory, file):
    return f"{str(directory).rstrip('/')}/{file}"


def _processor(model_bytes, argument):
    try:
        return sentencepiece.SentencePieceProcessor(model_proto=model_bytes)
    except Exception as error:  # sentencepiece raises RuntimeError or its own errors
        raise ValueError(f"`{argument}` must be a serialized SentencePiece model (the bytes "
                         f"of an OPUS-MT source.spm or target.spm): {error}") from None


def _checked_pieces(pieces, argument):
    """`pieces` as a list, checked: strings, the special ids present, each piece once
    (the start placeholder aside: encoding never gives `START_ID`)."""
    pieces = list(pieces)
    if len(pieces) <= END_ID or not all(isinstance(piece, str) for piece in pieces):
        raise ValueError(f"`{argument}` must be a list of strings, pad, unk, start and eos "
                         f"first (see `marian_id_order`). Received {len(pieces)} items.")
    seen = {}
    for token_id, piece in enumerate(pieces):
        if token_id == START_ID:
            continue
        if piece in seen:
            raise ValueError(f"`{argument}` lists {piece!r} twice (ids {seen[piece]} and "
                             f"{token_id}); each piece must have one id.")
        seen[piece] = token_id
    return pieces


def _piece_ids(pieces):
    return {piece: token_id for token_id, piece in enumerate(pieces) if token_id != START_ID}


def _check_decodable(processor, argument):
    """Decoding piece by piece (`detokenize`) equals SentencePiece's decoding only without
    byte pieces and without a denormalizer; OPUS-MT models have neither."""
    if any(processor.is_byte(i) for i in range(processor.get_piece_size())):
        raise ValueError(f"`{argument}` has byte-fallback pieces (<0x..>), which the "
                         "in-graph decoding does not reproduce; OPUS-MT models have none.")
    try:
        from sentencepiece import sentencepiece_model_pb2
    except ImportError:  # protobuf missing: the check is skipped
        return
    proto = sentencepiece_model_pb2.ModelProto.FromString(processor.serialized_model_proto())
    if proto.denormalizer_spec.precompiled_charsmap:
        raise ValueError(f"`{argument}` has a denormalization rule, which the in-graph "
                         "decoding does not reproduce; OPUS-MT models have none.")


def _decoded_surfaces(processor, pieces):
    """The text each piece adds to `processor.decode_pieces` inside a sentence, "▁" as " "
    (the special ids add nothing). Decoding a row joins them and strips the result."""
    # A piece SentencePiece does not know decodes as itself and ends the sentence's start.
    anchor = next(chr(c) for c in range(0xE000, 0xF900)
                  if processor.piece_to_id(chr(c)) == processor.unk_id())
    rows = processor.decode_pieces([[anchor, piece] for piece in pieces])
    surfaces = [row[len(anchor):].replace(_SPACE, " ") for row in rows]
    for token_id in _SKIPPED_IDS:
        surfaces[token_id] = ""
    return surfaces


def _clean_up(text):
    for old, new in _CLEAN_UP:
        text = text.replace(old, new)
    return text


def _re2_literal(text):
    """An RE2 pattern matching `text` literally."""
    return "".join(c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):x}}}" for c in text)


def _read_bytes(directory, file, fix=_SNAPSHOT_FIX):
    path = _join(directory, file)
    if not os.path.exists(path):
        raise FileNotFoundError(f"`{path}` is missing. {fix}")
    with open(path, "rb") as handle:
        return handle.read()


def _read_json(directory, file, required=True, fix=_SNAPSHOT_FIX):
    path = _join(directory, file)
    if not required and not os.path.exists(path):
        return None
    try:
        return json.loads(_read_bytes(directory, file, fix).decode("utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"`{path}` is not valid JSON ({error}). {fix}") from None


def _token_string(settings, key, default):
    """A special token of `tokenizer_config.json`: a string, or an `AddedToken` dict."""
    value = settings.get(key, default)
    return value.get("content") if isinstance(value, dict) else value


def _tokenizer_settings(directory):
    """`tokenizer_config.json` (optional), with the legacy `special_tokens_map.json` and
    `added_tokens.json` read as Hugging Face reads them, checked: settings that change
    tokenization in ways this tokenizer does not reproduce are refused."""
    settings = _read_json(directory, "tokenizer_config.json", required=False) or {}
    files = ["tokenizer_config.json"]
    added = list((settings.get("added_tokens_decoder") or {}).values())
    if "added_tokens_decoder" not in settings:  # Hugging Face reads the legacy files then
        special_map = _read_json(directory, "special_tokens_map.json", required=False)
        added_map = _read_json(directory, "added_tokens.json", required=False)
        settings.update(special_map or {})
        added += list(added_map or {})
        files += [file for file, content in (("special_tokens_map.json", special_map),
                                             ("added_tokens.json", added_map)) if content]
    problems = [f"`{key}`" for key in ("bos_token", "sep_token", "cls_token", "mask_token",
                                        "additional_special_tokens", "extra_special_tokens",
                                        "split_special_tokens", "sp_model_kwargs")
                if settings.get(key)]
    tokens = [settings.get(key) for key in ("unk_token", "eos_token", "pad_token")]
    known = {_token_string(settings, key, default) for key, default in
             (("unk_token", "<unk>"), ("eos_token", "</s>"), ("pad_token", "<pad>"))}
    extra = sorted({_token_string({"token": token}, "token", None) for token in added} - known)
    if extra:
        problems.append(f"added tokens {extra}")
    if any(isinstance(token, dict) and any(token.get(flag) for flag in
                                           ("lstrip", "rstrip", "single_word"))
           for token in tokens + added):
        problems.append("a special token with `lstrip`, `rstrip` or `single_word`")
    if problems:
        raise ValueError(
            f"The tokenizer files of `{directory}` ({', '.join(files)}) set "
            f"{', '.join(problems)}, which the Marian importer does not support: it "
            "reproduces OPUS-MT tokenizers with the special tokens `<unk>`, `</s>` and "
            "`<pad>` only. Remove those settings if the model does not need them.")
    return settings


def _check_vocabulary(vocabulary, file, directory, tokens, expected, size, size_field):
    """Checks a `vocab.json` dict against config.json; returns its unk id."""
    path = f"{directory}/{file}"
    if not isinstance(vocabulary, dict) or not vocabulary or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in vocabulary.values()):
        raise ValueError(f"`{path}` must map pieces to int ids. Download the snapshot again.")
    unk = tokens["unk_token"]
    if unk not in vocabulary:
        raise ValueError(f"`{path}` has no unk token {unk!r}; Hugging Face needs it too. "
                         "Download the snapshot again.")
    for key, marian_id in expected.items():
        found = vocabulary.get(tokens[key])
        if found != marian_id:
            source = "vocab.json" if key == "unk_token" else "config.json"
            raise ValueError(
                f"`{path}` gives {tokens[key]!r} the id {found}, but {source} says "
                f"{marian_id}. Hugging Face reads the special ids from config.json and "
                "vocab.json; they must agree (download the snapshot again).")
    if sorted(vocabulary.values()) != list(range(size)):
        raise ValueError(
            f"`{path}` must give each id from 0 to {size - 1} (config.json's `{size_field}` "
            f"is {size}) to one piece; it has {len(vocabulary)} pieces with ids "
            f"{min(vocabulary.values())} to {max(vocabulary.values())}. Download the "
            "snapshot again.")
    return vocabulary[unk]


def _start_placeholder(vocabularies):
    """The piece string of `START_ID` when Marian's decoder start is its pad: one that no
    vocabulary holds."""
    placeholder, n = "<start>", 0
    while any(placeholder in vocabulary for vocabulary in vocabularies):
        n += 1
        placeholder = f"<start{n}>"
    return placeholder


def _pieces_in_order(vocabulary, order, placeholder):
    piece_of = {marian_id: piece for piece, marian_id in vocabulary.items()}
    pieces = [piece_of[marian_id] for marian_id in order]
    if order[START_ID] == order[PAD_ID]:
        pieces[START_ID] = placeholder
    return pieces
