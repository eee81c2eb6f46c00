"""A shared source-target SentencePiece BPE tokenizer, in Python and inside TensorFlow graphs.

Section 5.1 of Vaswani et al. (2017): "Sentences were encoded using byte-pair encoding,
which has a shared source-target vocabulary". Training uses the `sentencepiece` package.
`Tokenizer.encode_as_ids` / `decode_ids` use SentencePiece's own Python API and run
everywhere, whatever the Keras backend. `tokenize` / `detokenize` run
`tensorflow_text.SentencepieceTokenizer` built from the same model bytes, so the same
tokenizer works in `tf.data` and in a SavedModel; they need TensorFlow (imported when
first used) and give the same ids.

Text is normalized with SentencePiece's `nmt_nfkc` rule: Unicode NFKC (so `…` becomes
`...` and `ﬁ` becomes `fi`), control characters removed, runs of whitespace collapsed and
leading or trailing whitespace stripped. `detokenize(tokenize(s)) == s` holds for any `s`
that this normalization leaves unchanged, which is true of almost every corpus sentence.
"""

import functools
import hashlib
import io
import os

import numpy as np
import sentencepiece

from keras_transformer.backend import require_tensorflow
from keras_transformer.special_tokens import END_ID, PAD_ID, START_ID, UNK_ID

_SPECIAL_IDS = (PAD_ID, START_ID, END_ID)


def _file_system(path):
    """`(exists, open)` for `path`: the local ones, or `tf.io.gfile`'s for a URL."""
    if "://" not in str(path):
        return os.path.exists, open
    gfile = require_tensorflow(f"Reading or writing `{path}`").io.gfile
    return gfile.exists, gfile.GFile


@functools.cache
def _shared_resource_class():
    """A `tf.saved_model.experimental.TrackableResource` for a SentencePiece model, made
    as `tensorflow_text` makes it but with a shared name (see `Tokenizer._build`)."""
    tf = require_tensorflow("The in-graph tokenizer (`Tokenizer.tokenize`)")
    from tensorflow_text.python.ops.sentencepiece_tokenizer import gen_sentencepiece_tokenizer

    class SharedSentencepieceResource(tf.saved_model.experimental.TrackableResource):
        def __init__(self, model_bytes, name):
            super().__init__()
            self._model = model_bytes
            self._name = name
            digest = hashlib.sha256(model_bytes).hexdigest()
            self._shared_name = f"keras_transformer_sentencepiece_{digest}"
            _ = self.resource_handle  # creates the resource

        def _create_resource(self):
            with tf.name_scope(self._name):
                return gen_sentencepiece_tokenizer.sentencepiece_op(
                    model=self._model, shared_name=self._shared_name)

    return SharedSentencepieceResource


def shared_sentencepiece(model_bytes, out_type, name):
    """A `tensorflow_text.SentencepieceTokenizer` whose resource has a shared name.

    tensorflow_text creates its SentencePiece resource without a shared name, which
    makes it private to the kernel that created it, deleted with that kernel.
    `tf.random.set_seed` (so `keras.utils.set_random_seed`) clears the eager kernel
    cache, and with it the resource under every `tf.data` pipeline and traced function
    already holding its handle. A shared name gives the resource to the resource
    manager; keyed by the model's hash, it serves every same-model tokenizer. Call it
    under `tf.init_scope()` so the resource is made eagerly, even inside a trace.
    """
    tensorflow_text = require_tensorflow("The in-graph tokenizer", "tensorflow_text")
    tokenizer = tensorflow_text.SentencepieceTokenizer(model=model_bytes, out_type=out_type,
                                                       name=name)
    tokenizer._model_resource = _shared_resource_class()(model_bytes, name)
    return tokenizer


class Tokenizer:
    """A SentencePiece tokenizer with the package's fixed special ids.

    Ids `PAD_ID` (0), `UNK_ID` (1), `START_ID` (2, SentencePiece's bos) and `END_ID`
    (3, eos) are reserved; tokenizing never adds start or end ids (the data pipeline
    does) and detokenizing drops pad, start and end ids.

    Args:
        model_bytes: bytes. A serialized SentencePiece model (the content of a
            `tokenizer.model` file), trained with the ids above.
        name: str. Name of the TensorFlow module that `graph_tokenizer` builds.

    Example (Python lists, on every backend):
    >>> tokenizer = train_tokenizer(["Guten Morgen.", "Good morning."] * 10,
    ...                             vocabulary_size=40)
    >>> ids = tokenizer.encode_as_ids(["Guten Morgen."])
    >>> tokenizer.decode_ids(ids)
    ['Guten Morgen.']

    The same inside TensorFlow (ragged tensors, for `tf.data` and SavedModels):
    >>> tokenizer.detokenize(tokenizer.tokenize(["Guten Morgen."])).numpy()
    array([b'Guten Morgen.'], dtype=object)
    """

    def __init__(self, model_bytes, name="tokenizer"):
        processor = sentencepiece.SentencePieceProcessor(model_proto=bytes(model_bytes))
        ids = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
        if ids != (PAD_ID, UNK_ID, START_ID, END_ID):
            raise ValueError(
                "`model_bytes` must be a SentencePiece model with pad_id=0, unk_id=1, "
                "bos_id=2 and eos_id=3 (train it with `train_tokenizer`). Received a model "
                f"with pad_id={ids[0]}, unk_id={ids[1]}, bos_id={ids[2]}, eos_id={ids[3]}."
            )
        self.name = name
        self.model_bytes = bytes(model_bytes)
        self.vocabulary_size = processor.get_piece_size()
        self._processor = processor
        self._sentencepiece = None  # the TensorFlow tokenizer, built when first needed

    @classmethod
    def from_file(cls, path):
        """Loads a tokenizer from a `tokenizer.model` file (a local path, or any
        `tf.io.gfile` URL such as `gs://...` where TensorFlow is installed).

        Raises:
            FileNotFoundError: the file does not exist.
        """
        exists, opener = _file_system(path)
        if not exists(path):
            raise FileNotFoundError(
                f"Tokenizer file not found: `{path}`. Create one with `train_tokenizer` or "
                "`keras-transformer prepare --output DIR` (it writes DIR/tokenizer.model)."
            )
        with opener(path, "rb") as file:
            return cls(file.read())

    def save(self, path):
        """Writes the model bytes to `path`, readable by `Tokenizer.from_file`."""
        _, opener = _file_system(path)
        with opener(path, "wb") as file:
            file.write(self.model_bytes)

    # --- Python API (every backend) -----------------------------------------------------

    def encode_as_ids(self, strings):
        """Piece ids of each string, without start or end ids: a list of lists of ints."""
        return self._processor.encode_as_ids([str(s) for s in strings])

    def encode_targets_as_ids(self, strings):
        """The same as `encode_as_ids`: source and target share one SentencePiece model
        (a `MarianTokenizer` has one per side)."""
        return self.encode_as_ids(strings)

    def decode_ids(self, ids):
        """Strings for rows of ids (lists or a `(B, T)` array); pad, start, end dropped."""
        rows = ids.tolist() if isinstance(ids, np.ndarray) else [list(row) for row in ids]
        return self._processor.decode_ids(
            [[int(i) for i in row if int(i) not in _SPECIAL_IDS] for row in rows]
        )

    def id_to_piece(self, token_id):
        """The piece string of one id (e.g. `"▁Gut"`)."""
        return self._processor.id_to_piece(int(token_id))

    # --- TensorFlow API (tf.data, SavedModel) ------------------------------------------

    @property
    def graph_tokenizer(self):
        """The `tensorflow_text.SentencepieceTokenizer` (a `tf.Module`) that `tokenize`
        runs; track it in a SavedModel that calls `tokenize` or `detokenize`."""
        if self._sentencepiece is None:
            self._sentencepiece = self._build()
        return self._sentencepiece

    def _build(self):
        tf = require_tensorflow("The in-graph tokenizer (`Tokenizer.tokenize`)")
        with tf.init_scope():  # see `shared_sentencepiece`
            return shared_sentencepiece(self.model_bytes, tf.int32, self.name)

    def tokenize(self, strings):
        """Splits strings into piece ids, without start or end ids (TensorFlow ops).

        Args:
            strings: string tensor or Python strings, shape `(B,)` or scalar.

        Returns:
            int32 `tf.RaggedTensor` `(B, None)`, or an int32 tensor `(T,)` for a scalar.
        """
        return self.graph_tokenizer.tokenize(strings)

    def tokenize_targets(self, strings):
        """The same as `tokenize` (one model for both sides; see `encode_targets_as_ids`)."""
        return self.tokenize(strings)

    def detokenize(self, ids):
        """Turns piece ids back into strings, dropping pad, start and end ids (TensorFlow ops).

        Args:
            ids: int tensor, dense (padded) or ragged, shape `(B, T)` or `(T,)`.

        Returns:
            String tensor `(B,)`, or a scalar string for `(T,)` input.
        """
        tf = require_tensorflow("The in-graph tokenizer (`Tokenizer.detokenize`)")
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.convert_to_tensor(ids)
        ids = tf.cast(ids, tf.int32)
        keep = (ids != PAD_ID) & (ids != START_ID) & (ids != END_ID)
        return self.graph_tokenizer.detokenize(tf.ragged.boolean_mask(ids, keep))


def train_tokenizer(
    texts,
    path=None,
    vocabulary_size=8000,
    character_coverage=1.0,
    input_sentence_size=500_000,
    seed=0,
):
    """Trains a shared BPE vocabulary with SentencePiece (Section 5.1).

    Train on the training split only, with both languages in `texts`. Training samples at
    most `input_sentence_size` texts at random (seeded), which keeps it to seconds.

    Args:
        texts: iterable of str. Source and target sentences together.
        path: str. If given, the model is also written there (`tokenizer.model`).
        vocabulary_size: int. Number of pieces, special ids included. Defaults to `8000`.
            A corpus too small to fill it gives fewer (see `Tokenizer.vocabulary_size`).
        character_coverage: float. Share of characters covered by single-character
            pieces; the rest become `UNK_ID`. Defaults to `1.0` (every character seen).
        input_sentence_size: int. Most texts sampled for training. Defaults to `500_000`.
        seed: int. Seed of the sampling. Defaults to `0`.

    Returns:
        A `Tokenizer`.

    Example:
    >>> tokenizer = train_tokenizer(["ein Hund", "a dog", "zwei Hunde", "two dogs"] * 5,
    ...                             vocabulary_size=30)
    >>> tokenizer.vocabulary_size <= 30
    True
    """
    if not isinstance(vocabulary_size, int) or vocabulary_size <= 4:
        raise ValueError(
            "`vocabulary_size` must be an int above 4 (ids 0-3 are reserved for pad, unk, "
            f"start and end). Received: vocabulary_size={vocabulary_size!r}"
        )
    texts = [text for text in texts if text.strip()]
    if not texts:
        raise ValueError("`texts` must hold at least one non-blank string. Received none.")
    sentencepiece.set_random_generator_seed(seed)
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        model_type="bpe",
        vocab_size=vocabulary_size,
        hard_vocab_limit=False,
        character_coverage=character_coverage,
        input_sentence_size=input_sentence_size,
        shuffle_input_sentence=True,
        normalization_rule_name="nmt_nfkc",
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=START_ID,
        eos_id=END_ID,
        num_threads=min(os.cpu_count() or 1, 16),
        minloglevel=2,
    )
    tokenizer = Tokenizer(model.getvalue())
    if path is not None:
        tokenizer.save(path)
    return tokenizer
