"""`export_ctranslate2`: a model folder for CTranslate2, the engine of OpenNMT and fairseq users.

The export writes a folder that `ctranslate2.Translator(path)` loads, with the model
folder's tokenizer files beside it. It maps our weights onto CTranslate2's own
`TransformerSpec` and lets CTranslate2 quantize and save them (`ctranslate2` is an
optional dependency: `pip install "keras-transformer[ctranslate2]"`). It takes a folder
written by training or by `import_marian` (an OPUS-MT model).

How our model maps onto the spec:

- One embedding matrix is the encoder's, the decoder's and the output projection's
  (Section 3.4); CTranslate2 stores it once. An imported model with separate
  vocabularies (`source_vocabulary_size`) has its own encoder embedding and a source
  vocabulary apart. Both scale embeddings by `sqrt(d_model)`.
- The position table is written out: our sinusoids (sines and cosines interleaved, as
  in Section 3.5, or in two halves for imported models) for `max_sequence_length + 50`
  positions, or the learned embeddings. CTranslate2's built-in sinusoids are never used.
- Post-LN (the paper) or pre-LN with a final LayerNorm per stack (`normalize_first`);
  the model's activation (ReLU, GELU, or SiLU as CTranslate2's SWISH) and LayerNorm
  epsilon.
- The query, key and value projections are fused as CTranslate2 expects: `[Q; K; V]`
  for self-attention, `Q` and `[K; V]` for cross-attention.
- An imported model's fixed logits bias (Marian's `final_logits_bias`) is the output
  projection's bias.
- The vocabulary is the tokenizer's pieces in id order; CTranslate2 appends the end
  piece (`END_ID`) to each source and starts each output with the start piece
  (`START_ID`), as our `Translator` does.

A model CTranslate2 cannot represent (an activation it lacks, a Keras-quantized model,
weights the mapping does not know) stops the export with a `ValueError` naming the
option, before anything is written. The folder is written beside `output_dir` and
renamed into place at the end, so a failure leaves no half-written export.

Decoding that matches ours: translate source pieces (no end token; CTranslate2 adds it)
with `max_decoding_length` equal to our `max_length` and `min_decoding_length` equal to
our `min_length` (both 1 by default; an imported model's is 0).

- Our own models: `length_penalty=0` against our `alpha=0` (CTranslate2 divides by
  `length ** alpha`, we by GNMT's `((5 + length) / 6) ** alpha`) and
  `suppress_sequences=[["<pad>"], ["<s>"]]` (our decoding never emits padding or a
  second start token). Tokenize with `tokenizer.model`, as in the example below.
- Imported models: `length_penalty` equal to the folder's `alpha` (config.json's
  `"generation"`; CTranslate2's rule is Hugging Face's `"average"`) and no
  `suppress_sequences` (CTranslate2 refuses `"<s>"`, which OPUS-MT vocabularies lack):
  padding, the start placeholder and the banned ids get probability 0 through the
  output bias. `source.spm` splits the text into pieces, CTranslate2 takes the pieces,
  and `target.spm` decodes its output pieces (see the second example; or use
  `MarianTokenizer`, with its `source_pieces` and `target_pieces`, for Hugging Face's
  handling of language codes). Hugging Face's `forced_eos_token_id` has no CTranslate2
  option: an output that reaches `max_decoding_length` ends without the end token.

See the export guide for the measured agreement.

Example:
```python
from keras_transformer.export import export_ctranslate2

export_ctranslate2("runs/base", "exports/base-ct2", quantization="int8")

import ctranslate2, sentencepiece
translator = ctranslate2.Translator("exports/base-ct2")
tokenizer = sentencepiece.SentencePieceProcessor(model_file="exports/base-ct2/tokenizer.model")
pieces = tokenizer.encode(["Guter Wein muss reifen."], out_type=str)
result = translator.translate_batch(pieces, beam_size=4)
tokenizer.decode(result[0].hypotheses[0])
```

An imported OPUS-MT model:
```python
export_ctranslate2("runs/opus-mt-de-en", "exports/opus-mt-de-en-ct2")

translator = ctranslate2.Translator("exports/opus-mt-de-en-ct2")
source = sentencepiece.SentencePieceProcessor(
    model_file="exports/opus-mt-de-en-ct2/source.spm")
target = sentencepiece.SentencePieceProcessor(
    model_file="exports/opus-mt-de-en-ct2/target.spm")
pieces = source.encode(["Guter Wein muss reifen."], out_type=str)
result = translator.translate_batch(pieces, beam_size=4, length_penalty=1.0)
# Pieces that target.spm lacks (from a shared vocabulary) keep their "▁" in decode_pieces.
target.decode_pieces(result[0].hypotheses[0]).replace("▁", " ").strip()
```
"""

import json
import os
import shutil
import tempfile

import numpy as np

from keras_transformer.folders import CONFIG_FILE, MODEL_FILE, check_model_folder
from keras_transformer.generation.search_input import MAX_LENGTH_OFFSET
from keras_transformer.special_tokens import END_ID, PAD_ID, START_ID, UNK_ID

INSTALL_HINT = 'pip install "keras-transformer[ctranslate2]"'
# Keras activation names -> CTranslate2's `Activation` members.
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "silu": "SWISH", "swish": "SWISH",
               "tanh": "Tanh", "sigmoid": "Sigmoid"}
# The output bias of a token never generated: float16's lowest, so it stays finite in
# every CTranslate2 weight type, and far enough below any logit to get probability 0.
NEVER_BIAS = float(np.finfo(np.float16).min)


def _import_ctranslate2():
    try:
        import ctranslate2
        import ctranslate2.converters
        import ctranslate2.specs
    except ImportError as error:
        raise ImportError(
            f"The CTranslate2 export needs the `ctranslate2` package: {INSTALL_HINT}"
        ) from error
    return ctranslate2


def _check_output_dir(output_dir, force):
    if os.path.isdir(output_dir) and not os.listdir(output_dir):
        return
    if os.path.lexists(output_dir) and not force:
        raise ValueError(
            "`output_dir` exists and is not empty; pass `force=True` (`--force`) to replace "
            f"it. Received: output_dir={output_dir!r}"
        )


def _weights(model):
    """`{path: float32 array}`, paths such as `encoder_block_0/self_attention/query/kernel`."""
    import keras

    weights = {}
    for variable in model.weights:
        if variable.dtype not in ("float16", "bfloat16", "float32", "float64"):
            raise ValueError(
                "CTranslate2 cannot load a Keras-quantized model (weight "
                f"`{variable.path}` has dtype {variable.dtype}). Export the float model and "
                "pass `quantization='int8'` instead."
            )
        weights[variable.path] = keras.ops.convert_to_numpy(variable).astype("float32")
    return weights


class _Weights:
    """Hands out weights by path and remembers which were used."""

    def __init__(self, weights):
        self.weights = weights
        self.used = set()

    def __call__(self, path):
        self.used.add(path)
        return self.weights[path]

    def check_all_used(self):
        unused = sorted(set(self.weights) - self.used)
        if unused:
            raise ValueError(
                "CTranslate2's Transformer has no place for these weights, so the export "
                f"would translate differently: {unused}"
            )


def _set_layer_norm(spec, take, path):
    spec.gamma = take(f"{path}/gamma")
    spec.beta = take(f"{path}/beta")


def _set_dense(spec, take, path):
    spec.weight = take(f"{path}/kernel").T  # Keras (in, out) -> CTranslate2 (out, in)
    spec.bias = take(f"{path}/bias")


def _projection(take, path):
    """An attention input projection `(D, N, H)` as a CTranslate2 weight `(N * H, D)`."""
    kernel = take(f"{path}/kernel")
    return kernel.reshape(kernel.shape[0], -1).T, take(f"{path}/bias").reshape(-1)


def _set_attention(spec, take, path, self_attention):
    query, key, value = (_projection(take, f"{path}/{name}")
                         for name in ("query", "key", "value"))
    if self_attention:  # one fused [Q; K; V] projection
        fused = [query, key, value]
        spec.linear[0].weight = np.concatenate([w for w, _ in fused])
        spec.linear[0].bias = np.concatenate([b for _, b in fused])
    else:  # Q, then a fused [K; V] over the encoder output
        spec.linear[0].weight, spec.linear[0].bias = query
        spec.linear[1].weight = np.concatenate([key[0], value[0]])
        spec.linear[1].bias = np.concatenate([key[1], value[1]])
    kernel = take(f"{path}/attention_output/kernel")  # (N, H, D)
    spec.linear[-1].weight = kernel.reshape(-1, kernel.shape[-1]).T
    spec.linear[-1].bias = take(f"{path}/attention_output/bias")


def _set_feed_forward(spec, take, path):
    _set_dense(spec.linear_0, take, f"{path}/feed_forward/intermediate_dense")
    _set_dense(spec.linear_1, take, f"{path}/feed_forward/output_dense")
    _set_layer_norm(spec.layer_norm, take, f"{path}/feed_forward_norm")


def _position_table(model, take, name):
    if model.position_embedding == "learned":
        return take(f"{name}/position_embeddings")
    from keras_transformer.layers.position_embedding import sinusoids

    layer = getattr(model, name)
    positions = np.arange(model.max_sequence_length + MAX_LENGTH_OFFSET)
    return np.asarray(sinusoids(positions, model.hidden_dim, layer.max_wavelength,
                                layout=layer.layout), "float32")


def _check_supported(model):
    from keras_transformer.models.transformer import Transformer

    if not isinstance(model, Transformer):
        raise ValueError(
            "CTranslate2 export needs a `keras_transformer.Transformer` in model.keras. "
            f"Received: {type(model).__name__}"
        )
    if not isinstance(model.activation, str) or model.activation not in ACTIVATIONS:
        raise ValueError(
            f"CTranslate2 has no activation {model.activation!r}: `activation` must be one "
            f"of {sorted(ACTIVATIONS)}. Received: activation={model.activation!r}"
        )


def _check_vocabulary(pieces, size, vocabulary):
    if len(pieces) != size:
        raise ValueError(
            f"The tokenizer has {len(pieces)} pieces for the model's {vocabulary} of {size} "
            "ids: the model and its tokenizer must come from the same training run or "
            "import.")


def build_spec(model, pieces, target_pieces=None, banned_ids=()):
    """A validated `ctranslate2.specs.TransformerSpec` holding `model`'s weights.

    Args:
        model: a `keras_transformer.Transformer`.
        pieces: list of str. The piece of each source id (the source vocabulary); also
            the target vocabulary unless `target_pieces` is given.
        target_pieces: list of str or `None`. The piece of each target id, for a model
            with its own source vocabulary (`source_vocabulary_size`).
        banned_ids: ids, beside `PAD_ID` and `START_ID`, that CTranslate2 must never
            generate; needs a model with `output_bias` (an imported model).

    Raises:
        ValueError: the model has an option CTranslate2 cannot represent, or the
            vocabularies do not fit it.
    """
    _import_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    _check_supported(model)
    if model.source_vocabulary_size is None:
        if target_pieces is not None and list(target_pieces) != list(pieces):
            raise ValueError(
                "The model has one vocabulary for both sides, but `target_pieces` differs "
                "from `pieces`: pass the pieces once (`target_pieces=None`).")
        _check_vocabulary(pieces, model.vocabulary_size, "vocabulary")
        target_pieces = pieces
    else:
        if target_pieces is None:
            raise ValueError(
                "The model has separate source and target vocabularies "
                f"(source_vocabulary_size={model.source_vocabulary_size}): pass the target "
                "pieces as `target_pieces`.")
        _check_vocabulary(pieces, model.source_vocabulary_size, "source vocabulary")
        _check_vocabulary(target_pieces, model.vocabulary_size, "target vocabulary")
    banned_ids = sorted({int(i) for i in banned_ids})
    if banned_ids and not model.output_bias:
        raise ValueError(
            "`banned_ids` needs a model with `output_bias=True` (an imported model): "
            "CTranslate2 bans tokens through the output bias. Pass `suppress_sequences` "
            f"to `translate_batch` instead. Received: banned_ids={banned_ids}")
    if any(not 0 <= i < model.vocabulary_size for i in banned_ids):
        raise ValueError(f"`banned_ids` must be target ids, 0 to {model.vocabulary_size - 1}. "
                         f"Received: banned_ids={banned_ids}")
    spec = transformer_spec.TransformerSpec.from_config(
        model.num_layers,
        model.num_heads,
        pre_norm=model.normalize_first,
        activation=getattr(common_spec.Activation, ACTIVATIONS[model.activation]),
    )
    take = _Weights(_weights(model))
    embeddings = take("token_embedding/embeddings")
    source_embeddings = (take("source_token_embedding/embeddings")
                         if model.source_vocabulary_size else embeddings)
    spec.encoder.embeddings[0].weight = source_embeddings
    spec.decoder.embeddings.weight = embeddings
    for stack, blocks in ((spec.encoder, "encoder"), (spec.decoder, "decoder")):
        stack.scale_embeddings = True  # x sqrt(d_model), Section 3.4
        stack.position_encodings.encodings = _position_table(
            model, take, f"{blocks}_position_embedding")
        if model.normalize_first:
            _set_layer_norm(stack.layer_norm, take, f"{blocks}_norm")
        for index, layer in enumerate(stack.layer):
            path = f"{blocks}_block_{index}"
            _set_attention(layer.self_attention, take, f"{path}/self_attention", True)
            _set_layer_norm(layer.self_attention.layer_norm, take, f"{path}/self_attention_norm")
            if blocks == "decoder":
                _set_attention(layer.attention, take, f"{path}/cross_attention", False)
                _set_layer_norm(layer.attention.layer_norm, take, f"{path}/cross_attention_norm")
            _set_feed_forward(layer.ffn, take, path)
    spec.decoder.projection.weight = embeddings  # tied (Section 3.4)
    if model.output_bias:
        # Our decoding masks padding, the start token and the banned ids before the
        # softmax; CTranslate2 gets the same from the bias, with no option to pass.
        bias = take("token_embedding/logits_bias").copy()
        bias[[PAD_ID, START_ID, *banned_ids]] = NEVER_BIAS
        spec.decoder.projection.bias = bias
    take.check_all_used()

    spec.config.unk_token = target_pieces[UNK_ID]
    spec.config.bos_token = target_pieces[START_ID]
    spec.config.eos_token = target_pieces[END_ID]
    spec.config.decoder_start_token = target_pieces[START_ID]
    spec.config.add_source_bos = False
    spec.config.add_source_eos = True  # sources end with END_ID, as `Translator.tokenize`
    spec.config.layer_norm_epsilon = float(model.layer_norm_epsilon)
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(target_pieces)
    spec.validate()
    return spec


def _check_marian_files(model_dir):
    from keras_transformer.data.tokenizer_files import MARIAN_FILES

    present = [name for name in MARIAN_FILES if os.path.isfile(os.path.join(model_dir, name))]
    if present and len(present) < len(MARIAN_FILES):
        missing = [name for name in MARIAN_FILES if name not in present]
        raise FileNotFoundError(
            f"`model_dir` holds part of an imported model's tokenizer: {', '.join(missing)} "
            "missing. Import the model again (`keras-transformer import --force`). "
            f"Received: model_dir={model_dir!r}")


def _read_tokenizer(model_dir):
    """`(source pieces, target pieces or None, banned ids)` of a model folder."""
    from keras_transformer.data.marian_tokenizer import MarianTokenizer
    from keras_transformer.data.tokenizer_files import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    if not isinstance(tokenizer, MarianTokenizer):  # our SentencePiece `Tokenizer`
        return [tokenizer.id_to_piece(i) for i in range(tokenizer.vocabulary_size)], None, ()
    banned_ids = ()
    config_path = os.path.join(model_dir, CONFIG_FILE)
    if os.path.isfile(config_path):
        with open(config_path, encoding="utf-8") as file:
            banned_ids = (json.load(file).get("generation") or {}).get("banned_ids") or ()
    target_pieces = None if tokenizer.shared else tokenizer.target_pieces
    return tokenizer.source_pieces, target_pieces, banned_ids


def export_ctranslate2(model_dir, output_dir, quantization=None, force=False):
    """Convert a model folder into a CTranslate2 model folder.

    Args:
        model_dir: str. A model folder written by training (model.keras,
            tokenizer.model, config.json) or by `import_marian` (model.keras,
            source.spm, target.spm, vocabulary.json, config.json).
        output_dir: str. The folder to write: CTranslate2's `model.bin`, `config.json`
            and `shared_vocabulary.json` (`source_vocabulary.json` and
            `target_vocabulary.json` for separate vocabularies), plus a copy of the
            tokenizer files of `model_dir`.
        quantization: str or `None`. CTranslate2's weight type: `"int8"`,
            `"int8_float32"`, `"int8_float16"`, `"int8_bfloat16"`, `"int16"`,
            `"float16"`, `"bfloat16"` or `"float32"`. `None` (the default) keeps float32.
        force: bool. Replace an `output_dir` that exists and is not empty.

    Returns:
        `output_dir`.

    Raises:
        FileNotFoundError: `model_dir` is missing or lacks model.keras or a tokenizer.
        ValueError: an unknown `quantization`, a non-empty `output_dir` without `force`,
            or a model option CTranslate2 cannot represent (named in the message).
        ImportError: `ctranslate2` is not installed.

    Example (an untrained model and a tokenizer trained on the spot):
    >>> import tempfile, ctranslate2
    >>> from keras_transformer.data import train_tokenizer
    >>> from keras_transformer.models import build_transformer
    >>> folder = tempfile.mkdtemp()
    >>> tokenizer = train_tokenizer(["Guten Tag.", "Good day."] * 5, vocabulary_size=30,
    ...                             path=os.path.join(folder, "tokenizer.model"))
    >>> build_transformer("tiny", vocabulary_size=30, num_layers=1).save(
    ...     os.path.join(folder, "model.keras"))
    >>> path = export_ctranslate2(folder, os.path.join(folder, "ct2"), quantization="int8")
    >>> sorted(os.listdir(path))
    ['config.json', 'model.bin', 'shared_vocabulary.json', 'tokenizer.model']
    >>> result = ctranslate2.Translator(path).translate_batch([["▁Gut", "en"]],
    ...                                                      max_decoding_length=4)
    >>> len(result[0].hypotheses[0]) <= 4
    True
    """
    model_dir, output_dir = os.fspath(model_dir), os.fspath(output_dir)
    _check_marian_files(model_dir)
    check_model_folder(model_dir, "model_dir")
    _import_ctranslate2()
    from ctranslate2.converters import Converter
    from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

    if quantization is not None and quantization not in ACCEPTED_MODEL_TYPES:
        raise ValueError(
            f"`quantization` must be one of {list(ACCEPTED_MODEL_TYPES)} or None. "
            f"Received: quantization={quantization!r}"
        )
    _check_output_dir(output_dir, force)

    import keras

    import keras_transformer.models  # noqa: F401  (registers the serializable classes)
    from keras_transformer.data.tokenizer_files import copy_tokenizer

    pieces, target_pieces, banned_ids = _read_tokenizer(model_dir)
    model = keras.models.load_model(os.path.join(model_dir, MODEL_FILE))
    spec = build_spec(model, pieces, target_pieces, banned_ids)

    class _SpecConverter(Converter):
        def _load(self):
            return spec

    target = os.path.abspath(output_dir)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    # Written beside the target and renamed into place: a failure leaves nothing behind.
    staging_root = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.",
                                    dir=os.path.dirname(target))
    try:
        staging = os.path.join(staging_root, "new")
        _SpecConverter().convert(staging, quantization=quantization)
        copy_tokenizer(model_dir, staging)
        if os.path.lexists(target):  # empty, or replaced with `force`
            os.replace(target, os.path.join(staging_root, "old"))
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging_root, ignore_errors=True)
    return output_dir
