"""Import an OPUS-MT (Marian) checkpoint from a local Hugging Face snapshot.

A snapshot (what `huggingface_hub.snapshot_download("Helsinki-NLP/opus-mt-de-en")`
fetches) holds `config.json`, the weights (`model.safetensors` or `pytorch_model.bin`),
`source.spm`, `target.spm`, `vocab.json` and optionally `generation_config.json`.

Marian is the paper's post-LN Transformer with these differences, each a model option
here: a `swish` feed-forward activation, layer-norm epsilon 1e-5, a fixed
`final_logits_bias`, sines and cosines in two halves of the position encoding, and
(for some models) separate source and target embeddings. Its special ids differ too
(end 0, padding `V - 1`, decoding starts from the padding id): the import permutes the
vocabulary into this package's ids (padding 0, unknown 1, start 2, end 3; the start
row is a copy of Marian's start row), so masks, losses, generation and export stay as
they are, and the tokenizer (`MarianTokenizer`) maps pieces to the permuted ids.

The snapshot's generation settings are saved with the model and used by `translate`:
its beam size, maximum length, `length_penalty` (our `alpha`, with Hugging Face's
`"average"` rule), its forced end token and its banned tokens.
"""

import json
import logging
import os
import shutil
import uuid

import numpy as np

from keras_transformer.folders import CONFIG_FILE, MODEL_FILE

logger = logging.getLogger(__name__)

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu"}
LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, which Marian layers use
GENERATION_CONFIG_FILE = "generation_config.json"


class UnsupportedCheckpoint(ValueError):
    """A snapshot this importer cannot reproduce exactly; the message names the field."""


def import_marian(snapshot_dir, output_dir, force=False):
    """Write a model folder from a Hugging Face OPUS-MT (Marian) snapshot.

    Args:
        snapshot_dir: str. A local snapshot folder (see the module docstring).
        output_dir: str. The model folder to write: `model.keras`, the tokenizer
            (`source.spm`, `target.spm`, `vocabulary.json`) and `config.json` with the
            snapshot's generation settings.
        force: bool. Replace an existing non-empty `output_dir`.

    Returns:
        A dict: the model's sizes, the generation defaults and the files written.

    Raises:
        UnsupportedCheckpoint: the snapshot uses something the model cannot reproduce
            (pre-norm layers, `normalize_embedding`, an unknown activation, ...); the
            message names the config field and its value. Nothing is written.
        FileNotFoundError: a file of the snapshot is missing.

    Example:
    ```python
    from huggingface_hub import snapshot_download
    snapshot = snapshot_download("Helsinki-NLP/opus-mt-de-en")
    import_marian(snapshot, "runs/opus-mt-de-en")
    Translator.from_directory("runs/opus-mt-de-en").translate(["Guten Morgen!"])
    ```
    """
    from keras_transformer.data.marian_tokenizer import MarianTokenizer

    config = read_json(snapshot_dir, "config.json")
    options = model_options(config)
    if os.path.exists(output_dir) and os.listdir(output_dir) and not force:
        raise FileExistsError(
            f"`{output_dir}` exists and is not empty. Choose another --output folder, or "
            "pass --force (force=True) to replace it.")
    tokenizer = MarianTokenizer.from_snapshot(snapshot_dir)
    generation = generation_defaults(snapshot_dir, config, tokenizer)
    weights = read_weights(snapshot_dir)
    model = build_model(options, tokenizer)
    assign_weights(model, weights, options, tokenizer)

    partial = f"{os.path.normpath(output_dir)}.partial-{uuid.uuid4().hex[:8]}"
    os.makedirs(partial)
    try:
        model.save(os.path.join(partial, MODEL_FILE))
        tokenizer.save(partial)
        summary = {
            "vocabulary_size": model.vocabulary_size,
            "source_vocabulary_size": model.source_vocabulary_size,
            "max_sequence_length": options["max_sequence_length"],
            "generation": generation,
            "imported": {"from": "marian", "snapshot": os.path.abspath(snapshot_dir),
                         "name_or_path": config.get("_name_or_path")},
        }
        with open(os.path.join(partial, CONFIG_FILE), "w", encoding="utf-8") as file:
            json.dump(summary, file, indent=2)
        if os.path.exists(output_dir):
            shutil.rmtree(output_dir)
        os.replace(partial, output_dir)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    summary["files"] = sorted(os.listdir(output_dir))
    summary["parameters"] = int(model.count_params())
    logger.info("Imported %s into %s (%d parameters).", snapshot_dir, output_dir,
                summary["parameters"])
    return summary


def read_json(folder, name, required=True):
    """The JSON content of `folder/name` (`None` when absent and not `required`)."""
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        if not required:
            return None
        raise FileNotFoundError(
            f"`{name}` not found in the snapshot `{folder}`. Pass the folder that "
            "`huggingface_hub.snapshot_download` returned (it holds config.json, the "
            "weights, source.spm, target.spm and vocab.json).")
    with open(path, encoding="utf-8") as file:
        return json.load(file)


def _unsupported(field, value, why):
    return UnsupportedCheckpoint(
        f"config.json: `{field}` = {value!r} is not supported: {why}. Nothing was written.")


def model_options(config):
    """Our `Transformer` options for a Marian `config.json`, or `UnsupportedCheckpoint`.

    Example:
    >>> options = model_options({"model_type": "marian", "d_model": 16, "encoder_layers": 2,
    ...     "decoder_layers": 2, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
    ...     "encoder_ffn_dim": 32, "decoder_ffn_dim": 32, "activation_function": "swish",
    ...     "max_position_embeddings": 64})
    >>> options["activation"], options["layer_norm_epsilon"], options["position_layout"]
    ('silu', 1e-05, 'halves')
    """
    model_type = config.get("model_type")
    if model_type != "marian":
        raise _unsupported("model_type", model_type,
                           "this importer reads Marian (OPUS-MT) checkpoints only")
    flags = {
        "normalize_before": (False, "pre-norm Marian layers differ from Hugging Face's "
                                    "MarianMTModel, which always runs post-norm"),
        "normalize_embedding": (False, "a layer norm on the embeddings is not part of "
                                       "this model"),
        "add_final_layer_norm": (False, "a final layer norm after post-norm layers is not "
                                        "part of this model"),
        "scale_embedding": (True, "embeddings are always scaled by sqrt(d_model) here"),
        "static_position_embeddings": (True, "positions are always sinusoids here"),
        "tie_word_embeddings": (True, "the output projection is always the decoder's "
                                      "embedding here"),
        "is_encoder_decoder": (True, "only encoder-decoder models translate"),
    }
    for field, (expected, why) in flags.items():
        if field in config and bool(config[field]) != expected:
            raise _unsupported(field, config[field], why)
    activation = config.get("activation_function", "swish")
    if activation not in ACTIVATIONS:
        raise _unsupported("activation_function", activation,
                           f"the supported activations are {sorted(ACTIVATIONS)}")
    for encoder_field, decoder_field in [("encoder_layers", "decoder_layers"),
                                         ("encoder_attention_heads", "decoder_attention_heads"),
                                         ("encoder_ffn_dim", "decoder_ffn_dim")]:
        if config.get(encoder_field) != config.get(decoder_field):
            raise _unsupported(decoder_field, config.get(decoder_field),
                               f"it must equal `{encoder_field}` "
                               f"({config.get(encoder_field)!r}): both stacks share one size")
    for field in ("d_model", "encoder_layers", "encoder_attention_heads", "encoder_ffn_dim"):
        value = config.get(field)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise _unsupported(field, value, "it must be a positive int")
    if config["d_model"] % config["encoder_attention_heads"]:
        raise _unsupported("encoder_attention_heads", config["encoder_attention_heads"],
                           f"it must divide d_model ({config['d_model']})")
    if config.get("activation_dropout"):
        logger.warning(
            "config.json sets activation_dropout=%s: this model has no dropout after the "
            "feed-forward activation, so fine-tuning drops out less (dropout=%s and "
            "attention_dropout=%s are kept). Translation is unaffected.",
            config["activation_dropout"], config.get("dropout", 0.1),
            config.get("attention_dropout", 0.0))
    return {
        "num_layers": config["encoder_layers"],
        "hidden_dim": config["d_model"],
        "intermediate_dim": config["encoder_ffn_dim"],
        "num_heads": config["encoder_attention_heads"],
        "dropout": float(config.get("dropout", 0.1)),
        "attention_dropout": float(config.get("attention_dropout", 0.0)),
        "activation": ACTIVATIONS[activation],
        "layer_norm_epsilon": LAYER_NORM_EPSILON,
        "position_layout": "halves",
        "output_bias": True,
        "max_sequence_length": int(config.get("max_position_embeddings", 512)),
        "shared_embeddings": bool(config.get("share_encoder_decoder_embeddings", True)),
    }


def generation_defaults(snapshot_dir, config, tokenizer):
    """The snapshot's generation settings as `generate` options (our ids, our lengths).

    Hugging Face's `max_length` and `min_length` count the decoder's start token, ours
    do not; its
    `length_penalty` is our `alpha` under the `"average"` rule. Single-token
    `bad_words_ids` become `banned_ids` (padding and start are banned anyway).
    """
    settings = read_json(snapshot_dir, GENERATION_CONFIG_FILE, required=False) or config
    beams = int(settings.get("num_beams") or 1)
    max_length = int(settings.get("max_length") or 20)  # Hugging Face's default is 20
    eos = settings.get("eos_token_id", config.get("eos_token_id"))
    forced_eos = settings.get("forced_eos_token_id")
    target_ids = {marian: ours for ours, marian in enumerate(tokenizer.target_order)}
    banned = set()
    for words in settings.get("bad_words_ids") or []:
        if len(words) != 1:
            raise _unsupported("bad_words_ids", words,
                               "only single-token bad words can be banned")
        banned.add(target_ids[words[0]])
    from keras_transformer.special_tokens import PAD_ID, START_ID

    banned -= {PAD_ID, START_ID}
    defaults = {
        "method": "beam" if beams > 1 else "greedy",
        "beam_size": max(beams, 1),
        "alpha": float(settings.get("length_penalty", 1.0)),
        "length_penalty": "average",
        "max_length": max(max_length - 1, 1),
        # Hugging Face has no "source length + 50" limit: only max_length bounds outputs.
        "max_length_offset": max(max_length - 1, 1),
        "force_end": forced_eos is not None and forced_eos == eos,
        "banned_ids": sorted(banned),
        # Hugging Face's `min_length` (0 by default) counts the start token, ours does not.
        "min_length": max(int(settings.get("min_length") or 0) - 1, 0),
    }
    if settings.get("no_repeat_ngram_size"):
        defaults["no_repeat_ngram_size"] = int(settings["no_repeat_ngram_size"])
    if settings.get("renormalize_logits") is False:
        logger.warning("%s sets renormalize_logits=false; generation here always "
                       "renormalizes after banning tokens, so beam scores may differ.",
                       GENERATION_CONFIG_FILE)
    return defaults


def read_weights(snapshot_dir):
    """The snapshot's tensors as float32 NumPy arrays, keys without a `model.` prefix."""
    for name in WEIGHT_FILES:
        path = os.path.join(snapshot_dir, name)
        if os.path.isfile(path):
            break
    else:
        raise FileNotFoundError(
            f"No weights in the snapshot `{snapshot_dir}`: expected one of "
            f"{', '.join(WEIGHT_FILES)}.")
    if name.endswith(".safetensors"):
        try:
            from safetensors.numpy import load_file
        except ImportError as error:
            raise ImportError(f"Reading {name} needs safetensors: pip install "
                              "\"keras-transformer[marian]\".") from error
        tensors = load_file(path)
    else:
        try:
            import torch
        except ImportError as error:
            raise ImportError(f"Reading {name} needs PyTorch: pip install torch (a CPU "
                              "build: torch==2.13.0+cpu), or convert the snapshot to "
                              "model.safetensors.") from error
        state = torch.load(path, map_location="cpu", weights_only=True)
        tensors = {key: value.float().numpy() for key, value in state.items()}
    return {key.removeprefix("model."): np.asarray(value, "float32")
            for key, value in tensors.items()}


def build_model(options, tokenizer):
    """An untrained `Transformer` with Marian's options and our (permuted) vocabulary."""
    from keras_transformer.models.transformer import Transformer

    model_kwargs = {key: value for key, value in options.items() if key != "shared_embeddings"}
    source_size = None if options["shared_embeddings"] else len(tokenizer.source_order)
    model = Transformer(vocabulary_size=len(tokenizer.target_order),
                        source_vocabulary_size=source_size, **model_kwargs)
    return model


class _Tensors:
    """Hand out snapshot tensors by name, and say which were never used."""

    def __init__(self, tensors):
        self.tensors = tensors
        self.used = set()

    def __call__(self, *names):
        for name in names:
            if name in self.tensors:
                self.used.add(name)
                return self.tensors[name]
        raise UnsupportedCheckpoint(
            f"The weights lack `{names[0]}`; this is not a MarianMTModel checkpoint of "
            "the config's shape.")

    def unused(self):
        return sorted(set(self.tensors) - self.used)


def _attention(take, prefix, num_heads):
    weights = {}
    for ours, theirs in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
        kernel = take(f"{prefix}.{theirs}.weight").T  # (D_in, D_out)
        weights[f"{ours}/kernel"] = kernel.reshape(kernel.shape[0], num_heads, -1)
        weights[f"{ours}/bias"] = take(f"{prefix}.{theirs}.bias").reshape(num_heads, -1)
    kernel = take(f"{prefix}.out_proj.weight").T  # (D_in = H * head, D_out)
    weights["attention_output/kernel"] = kernel.reshape(num_heads, -1, kernel.shape[1])
    weights["attention_output/bias"] = take(f"{prefix}.out_proj.bias")
    return weights


def _layer_norm(take, prefix):
    return {"gamma": take(f"{prefix}.weight"), "beta": take(f"{prefix}.bias")}


def _block_weights(take, prefix, num_heads, decoder):
    weights = {}

    def put(ours, values):
        weights.update({f"{ours}/{key}": value for key, value in values.items()})

    put("self_attention", _attention(take, f"{prefix}.self_attn", num_heads))
    put("self_attention_norm", _layer_norm(take, f"{prefix}.self_attn_layer_norm"))
    if decoder:
        put("cross_attention", _attention(take, f"{prefix}.encoder_attn", num_heads))
        put("cross_attention_norm", _layer_norm(take, f"{prefix}.encoder_attn_layer_norm"))
    put("feed_forward", {
        "intermediate_dense/kernel": take(f"{prefix}.fc1.weight").T,
        "intermediate_dense/bias": take(f"{prefix}.fc1.bias"),
        "output_dense/kernel": take(f"{prefix}.fc2.weight").T,
        "output_dense/bias": take(f"{prefix}.fc2.bias"),
    })
    put("feed_forward_norm", _layer_norm(take, f"{prefix}.final_layer_norm"))
    return weights


def _check_positions(take, name, model):
    """A snapshot's stored position table must be the sinusoids the model computes."""
    from keras_transformer.layers.position_embedding import sinusoids

    if name not in take.tensors:
        return
    table = take(name)
    expected = np.asarray(sinusoids(np.arange(table.shape[0]), table.shape[1],
                                    layout=model.position_layout), "float32")
    if not np.allclose(table, expected, atol=1e-4):
        raise UnsupportedCheckpoint(
            f"`{name}` holds positions other than Marian's sinusoids (largest difference "
            f"{float(np.abs(table - expected).max()):.3g}); learned positions are not "
            "supported.")


def assign_weights(model, tensors, options, tokenizer):
    """Copy a snapshot's tensors into `model`, rows permuted into our vocabulary."""
    take = _Tensors(tensors)
    target_order = np.asarray(tokenizer.target_order)
    source_order = np.asarray(tokenizer.source_order)
    decoder_embedding = take("decoder.embed_tokens.weight", "shared.weight")
    encoder_embedding = take("encoder.embed_tokens.weight", "shared.weight")
    if options["shared_embeddings"]:
        shared = take("shared.weight", "decoder.embed_tokens.weight")
        for name, value in [("encoder.embed_tokens.weight", encoder_embedding),
                            ("decoder.embed_tokens.weight", decoder_embedding)]:
            if not np.array_equal(value, shared):
                raise UnsupportedCheckpoint(
                    f"`{name}` differs from `shared.weight` although config.json sets "
                    "`share_encoder_decoder_embeddings` to true.")
    if "lm_head.weight" in tensors:
        take("lm_head.weight")
        if not np.array_equal(tensors["lm_head.weight"], decoder_embedding):
            raise _unsupported("tie_word_embeddings", False,
                               "`lm_head.weight` differs from the decoder's embedding")
    bias = take("final_logits_bias").reshape(-1)
    if bias.shape[0] != decoder_embedding.shape[0]:
        raise UnsupportedCheckpoint(
            f"`final_logits_bias` has {bias.shape[0]} entries for a target vocabulary of "
            f"{decoder_embedding.shape[0]}.")
    for name, table, order in [("decoder", decoder_embedding, target_order),
                               ("encoder", encoder_embedding, source_order)]:
        if order.max() >= table.shape[0]:
            raise UnsupportedCheckpoint(
                f"The {name} embedding has {table.shape[0]} rows, fewer than the "
                f"vocabulary's ids (up to {int(order.max())}).")

    values = {"token_embedding/embeddings": decoder_embedding[target_order],
              "token_embedding/logits_bias": bias[target_order]}
    if not options["shared_embeddings"]:
        values["source_token_embedding/embeddings"] = encoder_embedding[source_order]
    heads = options["num_heads"]
    for i in range(options["num_layers"]):
        for key, value in _block_weights(take, f"encoder.layers.{i}", heads, False).items():
            values[f"encoder_block_{i}/{key}"] = value
        for key, value in _block_weights(take, f"decoder.layers.{i}", heads, True).items():
            values[f"decoder_block_{i}/{key}"] = value
    _check_positions(take, "encoder.embed_positions.weight", model)
    _check_positions(take, "decoder.embed_positions.weight", model)
    unused = take.unused()
    if unused:
        raise UnsupportedCheckpoint(
            f"The weights hold tensors this model has no place for: {', '.join(unused[:5])}"
            f"{' ...' if len(unused) > 5 else ''} (more layers than config.json says, or a "
            "variant this importer does not know).")
    variables = {variable.path: variable for variable in model.weights}
    missing = sorted(set(variables) - set(values))
    if missing:
        raise RuntimeError(f"No snapshot tensor for the model weights {missing}.")
    for path, variable in variables.items():
        value = values[path]
        if tuple(value.shape) != tuple(variable.shape):
            raise UnsupportedCheckpoint(
                f"A tensor for `{path}` has the shape {tuple(value.shape)}, the model's is "
                f"{tuple(variable.shape)}; config.json and the weights disagree.")
        variable.assign(value)
