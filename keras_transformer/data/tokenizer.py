"""A shared source-target SentencePiece BPE tokenizer that runs inside the TensorFlow graph.

Section 5.1 of Vaswani et al. (2017): "Sentences were encoded using byte-pair encoding,
which has a shared source-target vocabulary". Training uses the `sentencepiece` package;
tokenizing and detokenizing use `tensorflow_text.SentencepieceTokenizer` built from the
model's bytes, so the same tokenizer can run in `tf.data` and be saved in a SavedModel.
This module is TensorFlow-specific.

Text is normalized with SentencePiece's `nmt_nfkc` rule: Unicode NFKC (so `…` becomes
`...` and `ﬁ` becomes `fi`), control characters removed, runs of whitespace collapsed and
leading or trailing whitespace stripped. `detokenize(tokenize(s)) == s` holds for any `s`
that this normalization leaves unchanged, which is true of almost every corpus sentence.
"""

import io
import os

import sentencepiece
import tensorflow as tf
import tensorflow_text

from keras_transformer.special_tokens import END_ID, PAD_ID, START_ID, UNK_ID


class Tokenizer(tf.Module):
    """A SentencePiece tokenizer with the package's fixed special ids.

    Ids `PAD_ID` (0), `UNK_ID` (1), `START_ID` (2, SentencePiece's bos) and `END_ID`
    (3, eos) are reserved; `tokenize` never adds start or end ids (the data pipeline
    does) and `detokenize` drops pad, start and end ids.

    Args:
        model_bytes: bytes. A serialized SentencePiece model (the content of a
            `tokenizer.model` file), trained with the ids above.
        name: str. Name of the `tf.Module`.

    Example:
    >>> tokenizer = train_tokenizer(["Guten Morgen.", "Good morning."] * 10,
    ...                             vocabulary_size=40)
    >>> ids = tokenizer.tokenize(["Guten Morgen."])
    >>> tokenizer.detokenize(ids).numpy()
    array([b'Guten Morgen.'], dtype=object)
    """

    def __init__(self, model_bytes, name="tokenizer"):
        super().__init__(name=name)
        processor = sentencepiece.SentencePieceProcessor(model_proto=bytes(model_bytes))
        ids = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
        if ids != (PAD_ID, UNK_ID, START_ID, END_ID):
            raise ValueError(
                "`model_bytes` must be a SentencePiece model with pad_id=0, unk_id=1, "
                "bos_id=2 and eos_id=3 (train it with `train_tokenizer`). Received a model "
                f"with pad_id={ids[0]}, unk_id={ids[1]}, bos_id={ids[2]}, eos_id={ids[3]}."
            )
        self.model_bytes = bytes(model_bytes)
        self.vocabulary_size = processor.get_piece_size()
        self._sentencepiece = self._build()

    def _build(self):
        return tensorflow_text.SentencepieceTokenizer(model=self.model_bytes, out_type=tf.int32)

    def _run(self, method, inputs):
        # `tf.random.set_seed` (and `keras.utils.set_random_seed`) clears the eager
        # context, which drops the SentencePiece resource: rebuild it, eagerly. A graph
        # (`tf.function`, `tf.data`) captures the resource when traced, so check it then.
        if not tf.executing_eagerly():
            with tf.init_scope():
                if tf.executing_eagerly():
                    self._run("tokenize", tf.constant([""]))
            return getattr(self._sentencepiece, method)(inputs)
        try:
            return getattr(self._sentencepiece, method)(inputs)
        except tf.errors.NotFoundError:
            self._sentencepiece = self._build()
            return getattr(self._sentencepiece, method)(inputs)

    @classmethod
    def from_file(cls, path):
        """Loads a tokenizer from a `tokenizer.model` file (any `tf.io.gfile` path).

        Raises:
            FileNotFoundError: the file does not exist.
        """
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(
                f"Tokenizer file not found: `{path}`. Create one with `train_tokenizer` or "
                "`keras-transformer prepare --output DIR` (it writes DIR/tokenizer.model)."
            )
        with tf.io.gfile.GFile(path, "rb") as file:
            return cls(file.read())

    def save(self, path):
        """Writes the model bytes to `path`, readable by `Tokenizer.from_file`."""
        with tf.io.gfile.GFile(path, "wb") as file:
            file.write(self.model_bytes)

    def tokenize(self, strings):
        """Splits strings into piece ids, without start or end ids.

        Args:
            strings: string tensor or Python strings, shape `(B,)` or scalar.

        Returns:
            int32 `tf.RaggedTensor` `(B, None)`, or an int32 tensor `(T,)` for a scalar.
        """
        return self._run("tokenize", strings)

    def detokenize(self, ids):
        """Turns piece ids back into strings, dropping pad, start and end ids.

        Args:
            ids: int tensor, dense (padded) or ragged, shape `(B, T)` or `(T,)`.

        Returns:
            String tensor `(B,)`, or a scalar string for `(T,)` input.
        """
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.convert_to_tensor(ids)
        ids = tf.cast(ids, tf.int32)
        keep = (ids != PAD_ID) & (ids != START_ID) & (ids != END_ID)
        return self._run("detokenize", tf.ragged.boolean_mask(ids, keep))


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
