"""`export_ctranslate2`: a model folder for CTranslate2, the engine of OpenNMT and fairseq users.

The export writes a folder that `ctranslate2.Translator(path)` loads, with the
SentencePiece model beside it. It maps our weights onto CTranslate2's own
`TransformerSpec` and lets CTranslate2 quantize and save them (`ctranslate2` is an
optional dependency: `pip install "keras-transformer[ctranslate2]"`).

How our model maps onto the spec:

- One embedding matrix is the encoder's, the decoder's and the output projection's
  (Section 3.4); CTranslate2 stores it once. Both scale embeddings by `sqrt(d_model)`.
- The position table is written out: our sinusoids (sines and cosines interleaved, as
  in Section 3.5) for `max_sequence_length + 50` positions, or the learned embeddings.
  CTranslate2's built-in sinusoids put all sines before all cosines, so they are
  never used.
- Post-LN (the paper) or pre-LN with a final LayerNorm per stack (`normalize_first`).
- The query, key and value projections are fused as CTranslate2 expects: `[Q; K; V]`
  for self-attention, `Q` and `[K; V]` for cross-attention.
- The vocabulary is the SentencePiece pieces; CTranslate2 appends `</s>` (`END_ID`) to
  each source and starts each output with `<s>` (`START_ID`), as our `Translator` does.

A model CTranslate2 cannot represent (an activation it lacks, a Keras-quantized model,
weights the mapping does not know) stops the export with a `ValueError` naming the
option, before anything is written. The folder is written beside `output_dir` and
renamed into place at the end, so a failure leaves no half-written export.

Decoding that matches ours: translate source pieces (no end token; CTranslate2 adds it)
with `length_penalty=0` against our `alpha=0` (CTranslate2 divides by `length ** alpha`,
we by GNMT's `((5 + length) / 6) ** alpha`), `max_decoding_length` equal to our
`max_length`, and `suppress_sequences=[["<pad>"], ["<s>"]]` (our decoding never emits
padding or a second start token). See the export guide for the measured agreement.

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
"""

import os
import shutil
import tempfile

import numpy as np

from keras_transformer.folders import MODEL_FILE, TOKENIZER_FILE, check_model_folder
from keras_transformer.generation.search_input import MAX_LENGTH_OFFSET
from keras_transformer.special_tokens import END_ID, START_ID, UNK_ID

INSTALL_HINT = 'pip install "keras-transformer[ctranslate2]"'
# Keras activation names -> CTranslate2's `Activation` members.
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "silu": "SWISH", "swish": "SWISH",
               "tanh": "Tanh", "sigmoid": "Sigmoid"}


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
    return np.asarray(sinusoids(positions, model.hidden_dim, layer.max_wavelength), "float32")


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


def build_spec(model, pieces):
    """A validated `ctranslate2.specs.TransformerSpec` holding `model`'s weights.

    Args:
        model: a `keras_transformer.Transformer`.
        pieces: list of str. The SentencePiece piece of each id (the vocabulary).

    Raises:
        ValueError: the model has an option CTranslate2 cannot represent.
    """
    _import_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    _check_supported(model)
    if len(pieces) != model.vocabulary_size:
        raise ValueError(
            f"The tokenizer has {len(pieces)} pieces but the model's `vocabulary_size` is "
            f"{model.vocabulary_size}: they must come from the same training run."
        )
    spec = transformer_spec.TransformerSpec.from_config(
        model.num_layers,
        model.num_heads,
        pre_norm=model.normalize_first,
        activation=getattr(common_spec.Activation, ACTIVATIONS[model.activation]),
    )
    take = _Weights(_weights(model))
    embeddings = take("token_embedding/embeddings")
    for stack, blocks in ((spec.encoder, "encoder"), (spec.decoder, "decoder")):
        stack_embeddings = stack.embeddings[0] if blocks == "encoder" else stack.embeddings
        stack_embeddings.weight = embeddings
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
    spec.decoder.projection.weight = embeddings  # tied, no bias (Section 3.4)
    take.check_all_used()

    spec.config.unk_token = pieces[UNK_ID]
    spec.config.bos_token = pieces[START_ID]
    spec.config.eos_token = pieces[END_ID]
    spec.config.decoder_start_token = pieces[START_ID]
    spec.config.add_source_bos = False
    spec.config.add_source_eos = True  # sources end with END_ID, as `Translator.tokenize`
    spec.config.layer_norm_epsilon = float(model.layer_norm_epsilon)
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.validate()
    return spec


def export_ctranslate2(model_dir, output_dir, quantization=None, force=False):
    """Convert a model folder into a CTranslate2 model folder.

    Args:
        model_dir: str. A model folder written by training (model.keras,
            tokenizer.model, config.json).
        output_dir: str. The folder to write: CTranslate2's `model.bin`, `config.json`
            and `shared_vocabulary.json`, plus a copy of `tokenizer.model`.
        quantization: str or `None`. CTranslate2's weight type: `"int8"`,
            `"int8_float32"`, `"int8_float16"`, `"int8_bfloat16"`, `"int16"`,
            `"float16"`, `"bfloat16"` or `"float32"`. `None` (the default) keeps float32.
        force: bool. Replace an `output_dir` that exists and is not empty.

    Returns:
        `output_dir`.

    Raises:
        FileNotFoundError: `model_dir` is missing or lacks model.keras or tokenizer.model.
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
    from keras_transformer.data.tokenizer import Tokenizer

    tokenizer_path = os.path.join(model_dir, TOKENIZER_FILE)
    tokenizer = Tokenizer.from_file(tokenizer_path)
    pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocabulary_size)]
    model = keras.models.load_model(os.path.join(model_dir, MODEL_FILE))
    spec = build_spec(model, pieces)

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
        shutil.copyfile(tokenizer_path, os.path.join(staging, TOKENIZER_FILE))
        if os.path.lexists(target):  # empty, or replaced with `force`
            os.replace(target, os.path.join(staging_root, "old"))
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging_root, ignore_errors=True)
    return output_dir
