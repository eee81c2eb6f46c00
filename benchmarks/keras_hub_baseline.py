"""The KerasHub baseline: the keras.io "English-to-Spanish translation with KerasHub" recipe.

The recipe's model (`TokenAndPositionEmbedding` with learned untied positions, KerasHub's
`TransformerEncoder` / `TransformerDecoder` blocks, a final `Dense`) sized like one of our
presets, with our inputs and float32 logits, so it trains with our loss, optimizer,
schedule and batches; without the recipe's extra 0.5 dropout before the output. Decoding
is the recipe's too: KerasHub's `GreedySampler` / `BeamSampler` rerun the decoder over the
whole prompt at every step (compiled with XLA, the encoder run once); `cached=True` adds
KerasHub's key/value cache as its BART wires it (the same tokens, about 12x faster).

    python benchmarks/keras_hub_baseline.py   # builds the small preset and decodes a batch
"""

import os
import sys

import keras
import keras_hub
import numpy as np
from keras import ops

import keras_transformer as kt
from keras_transformer.generation import Translator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import padded  # noqa: E402


def build_keras_hub_transformer(preset="small", *, vocabulary_size, max_sequence_length=128,
                                activation="relu", layer_norm_epsilon=1e-6, **overrides):
    """The recipe's model sized like `kt.PRESETS[preset]` (with `overrides`): our inputs,
    float32 logits `(B, T, V)`, and the attributes `hidden_dim`, `encoder` (ids -> `(B, S,
    D)`) and `decoder` (ids, encoder sequence, encoder mask -> logits) on the same weights.

    >>> model = build_keras_hub_transformer("tiny", vocabulary_size=50, max_sequence_length=16)
    >>> tuple(model({"encoder_token_ids": np.ones((2, 7), "int32"),
    ...              "decoder_token_ids": np.ones((2, 5), "int32")}).shape)
    (2, 5, 50)
    """
    config = {**kt.PRESETS[preset], **overrides}
    hidden_dim = config["hidden_dim"]
    normalize_first = config.get("normalize_first", False)
    block_args = dict(intermediate_dim=config["intermediate_dim"], num_heads=config["num_heads"],
                      dropout=config["dropout"], activation=activation,
                      layer_norm_epsilon=layer_norm_epsilon, normalize_first=normalize_first)

    def final_norm(x, name):
        if not normalize_first:
            return x
        return keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name=name)(x)

    def embedding(name):
        return keras_hub.layers.TokenAndPositionEmbedding(
            vocabulary_size, max_sequence_length, hidden_dim, name=name)

    encoder_ids = keras.Input((None,), dtype="int32", name="encoder_token_ids")
    x = embedding("encoder_embedding")(encoder_ids)
    for i in range(config["num_layers"]):
        x = keras_hub.layers.TransformerEncoder(**block_args, name=f"encoder_{i}")(
            x, padding_mask=encoder_ids != kt.PAD_ID)
    encoder = keras.Model(encoder_ids, final_norm(x, "encoder_norm"), name="encoder")

    decoder_ids = keras.Input((None,), dtype="int32", name="decoder_token_ids")
    encoder_sequence = keras.Input((None, hidden_dim), name="encoder_sequence")
    encoder_mask = keras.Input((None,), dtype="bool", name="encoder_padding_mask")
    y = embedding("decoder_embedding")(decoder_ids)
    for i in range(config["num_layers"]):
        y = keras_hub.layers.TransformerDecoder(**block_args, name=f"decoder_{i}")(
            y, encoder_sequence, decoder_padding_mask=decoder_ids != kt.PAD_ID,
            encoder_padding_mask=encoder_mask)
    y = keras.layers.Dense(vocabulary_size, name="output")(final_norm(y, "decoder_norm"))
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(y)
    decoder = keras.Model([decoder_ids, encoder_sequence, encoder_mask], logits, name="decoder")

    model = keras.Model(
        {"encoder_token_ids": encoder_ids, "decoder_token_ids": decoder_ids},
        decoder([decoder_ids, encoder(encoder_ids), encoder_ids != kt.PAD_ID]),
        name="keras_hub_transformer",
    )
    model.hidden_dim = hidden_dim
    model.encoder = encoder
    model.decoder = decoder
    return model


def keras_hub_copy_of(model, *, max_sequence_length=None):
    """The baseline at the size of `model` (our `Transformer`) holding its weights, computing
    its logits in float32: the token table scaled by `sqrt(hidden_dim)` into both stacks,
    our positions (learned, or the sinusoids tabulated up to `max_sequence_length`) into
    KerasHub's position tables, the transposed table as the output `Dense` (zero bias)."""
    from keras_transformer.layers.position_embedding import sinusoids

    config = model.get_config()
    hidden_dim = config["hidden_dim"]
    position_embedding = config["position_embedding"]
    if position_embedding not in ("sinusoidal", "learned"):
        raise ValueError("`position_embedding` must be 'sinusoidal' or 'learned' to map onto "
                         "KerasHub's TokenAndPositionEmbedding. Received: "
                         f"position_embedding={position_embedding!r}")
    if max_sequence_length is None:
        max_sequence_length = config["max_sequence_length"]
    if position_embedding == "learned" and max_sequence_length > config["max_sequence_length"]:
        raise ValueError(
            f"`max_sequence_length` ({max_sequence_length}) exceeds the learned position "
            f"table of the model ({config['max_sequence_length']} positions).")

    previous_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        copy = build_keras_hub_transformer(
            "tiny", vocabulary_size=config["vocabulary_size"],
            max_sequence_length=max_sequence_length, activation=config["activation"],
            layer_norm_epsilon=config["layer_norm_epsilon"],
            num_layers=config["num_layers"], hidden_dim=hidden_dim,
            intermediate_dim=config["intermediate_dim"], num_heads=config["num_heads"],
            dropout=config["dropout"], normalize_first=config["normalize_first"])
    finally:
        keras.config.set_dtype_policy(previous_policy)

    def assign(target, source):
        source = np.asarray(keras.ops.convert_to_numpy(source), "float32")
        if source.size != np.prod(target.shape):
            raise ValueError(f"Cannot copy a weight of shape {source.shape} into "
                             f"{target.path} {tuple(target.shape)}.")
        target.assign(source.reshape(target.shape))

    def assign_dense(target, source):
        assign(target.kernel, source.kernel)
        assign(target.bias, source.bias)

    def assign_norm(target, source):
        assign(target.gamma, source.gamma)
        assign(target.beta, source.beta)

    def assign_attention(target, source):
        for name in ("_query_dense", "_key_dense", "_value_dense", "_output_dense"):
            assign_dense(getattr(target, name), getattr(source, name))

    def assign_feed_forward(target, source):
        assign_dense(target._feedforward_intermediate_dense, source._intermediate_dense)
        assign_dense(target._feedforward_output_dense, source._output_dense)

    table = np.asarray(keras.ops.convert_to_numpy(model.token_embedding.embeddings), "float32")
    for stack in ("encoder", "decoder"):
        embedding = getattr(copy, stack).get_layer(f"{stack}_embedding")
        assign(embedding.token_embedding.embeddings, table * np.float32(np.sqrt(hidden_dim)))
        positions = getattr(model, f"{stack}_position_embedding")
        if position_embedding == "learned":
            positions = keras.ops.convert_to_numpy(positions.position_embeddings)
            positions = positions[:max_sequence_length]
        else:
            positions = sinusoids(np.arange(max_sequence_length), hidden_dim,
                                  positions.max_wavelength)
        assign(embedding.position_embedding.position_embeddings, positions)

    for i, block in enumerate(model.encoder_blocks):
        layer = copy.encoder.get_layer(f"encoder_{i}")
        assign_attention(layer._self_attention_layer, block._self_attention)
        assign_norm(layer._self_attention_layer_norm, block._self_attention_norm)
        assign_feed_forward(layer, block._feed_forward)
        assign_norm(layer._feedforward_layer_norm, block._feed_forward_norm)
    for i, block in enumerate(model.decoder_blocks):
        layer = copy.decoder.get_layer(f"decoder_{i}")
        assign_attention(layer._self_attention_layer, block._self_attention)
        assign_norm(layer._self_attention_layer_norm, block._self_attention_norm)
        assign_attention(layer._cross_attention_layer, block._cross_attention)
        assign_norm(layer._cross_attention_layer_norm, block._cross_attention_norm)
        assign_feed_forward(layer, block._feed_forward)
        assign_norm(layer._feedforward_layer_norm, block._feed_forward_norm)
    if config["normalize_first"]:
        assign_norm(copy.encoder.get_layer("encoder_norm"), model.encoder_norm)
        assign_norm(copy.decoder.get_layer("decoder_norm"), model.decoder_norm)

    output = copy.decoder.get_layer("output")
    assign(output.kernel, table.T)
    assign(output.bias, np.zeros(output.bias.shape, "float32"))
    return copy


def _cached_next(model, encoder_sequence, encoder_mask, prompt_length, copies=1):
    """`(next, cache)`: KerasHub's cached step as its BART generates; `cache` holds every
    block's self-attention keys/values `(B, layers, 2, T, N, H)`, the cross-attention's are
    computed once (repeated `copies` times, for the beams)."""
    decoder = model.decoder
    embedding = decoder.get_layer("decoder_embedding")
    blocks = [layer for layer in decoder.layers
              if isinstance(layer, keras_hub.layers.TransformerDecoder)]
    norm = ([decoder.get_layer("decoder_norm")]
            if any(layer.name == "decoder_norm" for layer in decoder.layers) else [])
    output = decoder.get_layer("output")

    encoder_sequence = ops.repeat(encoder_sequence, copies, axis=0)
    encoder_mask = ops.repeat(encoder_mask, copies, axis=0)
    cross = [ops.stack([block._cross_attention_layer._key_dense(encoder_sequence),
                        block._cross_attention_layer._value_dense(encoder_sequence)], axis=1)
             for block in blocks]
    batch, _, _, heads, head_dim = ops.shape(cross[0])
    cache = ops.zeros((batch // copies, len(blocks), 2, prompt_length, heads, head_dim),
                      cross[0].dtype)

    def next(prompt, cache, index):
        # A static length of 1 (a `prompt[:, index - 1: index]` slice is dynamic in XLA).
        token = ops.slice(prompt, [0, index - 1], [ops.shape(prompt)[0], 1])
        x = embedding(token, start_index=index - 1)
        # The recipe masks the prompt's PAD ids as keys, a generated PAD too.
        keys = ops.expand_dims(prompt != kt.PAD_ID, 1)
        updated = []
        for i, block in enumerate(blocks):
            x, layer_cache, _ = block(
                x, encoder_sequence, decoder_attention_mask=keys,
                encoder_padding_mask=encoder_mask, self_attention_cache=cache[:, i],
                self_attention_cache_update_index=index - 1, cross_attention_cache=cross[i],
                cross_attention_cache_update_index=None,
                training=False)
            updated.append(layer_cache)
        for layer in norm:
            x = layer(x)
        return ops.cast(output(x)[:, 0, :], "float32"), None, ops.stack(updated, axis=1)

    return next, cache


def sampler_search(model, method="greedy", beam_size=4, jit_compile=True, cached=False):
    """`(encoder_token_ids (B, S), prompt_length) -> token ids (B, L - 1)`: the sampler
    fills `[START, PAD, ...]` until every row ends; `PAD_ID` after the end token.
    `cached=False` is the recipe (the whole decoder over the prompt each step)."""
    import tensorflow as tf  # only here: building the baseline needs no TensorFlow

    if method == "greedy":
        sampler, copies = keras_hub.samplers.GreedySampler(), 1
    elif method == "beam":
        sampler, copies = keras_hub.samplers.BeamSampler(num_beams=beam_size), beam_size
    else:
        raise ValueError(f"`method` must be 'greedy' or 'beam'. Received: method={method!r}")

    def search(encoder_token_ids, prompt):
        encoder_sequence = model.encoder(encoder_token_ids, training=False)
        encoder_mask = encoder_token_ids != kt.PAD_ID
        if cached:
            next, cache = _cached_next(model, encoder_sequence, encoder_mask,
                                       ops.shape(prompt)[1], copies)
            return sampler(next, prompt, cache=cache, index=1, stop_token_ids=[kt.END_ID])
        # The beam sampler repeats every row `beam_size` times (row b * K + k).
        encoder_sequence = ops.repeat(encoder_sequence, copies, axis=0)
        encoder_mask = ops.repeat(encoder_mask, copies, axis=0)

        def next(prompt, cache, index):
            logits = model.decoder([prompt, encoder_sequence, encoder_mask], training=False)
            return logits[:, index - 1, :], None, cache

        return sampler(next, prompt, index=1, stop_token_ids=[kt.END_ID])

    if jit_compile:
        search = tf.function(search, jit_compile=True)

    def run(encoder_token_ids, prompt_length):
        encoder_token_ids = np.asarray(encoder_token_ids, "int32")
        prompt = np.full((len(encoder_token_ids), prompt_length), kt.PAD_ID, "int32")
        prompt[:, 0] = kt.START_ID
        tokens = np.asarray(search(tf.constant(encoder_token_ids), tf.constant(prompt)))[:, 1:]
        ended = np.cumsum(tokens == kt.END_ID, axis=1) - (tokens == kt.END_ID) > 0
        return np.where(ended, kt.PAD_ID, tokens).astype("int32")

    return run


class KerasHubTranslator(Translator):
    """Our `Translator` over the baseline's samplers; the prompt holds the longest source
    + 50 (at most `max_sequence_length`), rounded up to a multiple of 16."""

    def __init__(self, model, tokenizer, max_sequence_length=128, cached=False, **kwargs):
        super().__init__(model, tokenizer, max_sequence_length=max_sequence_length, **kwargs)
        self.cached = cached
        self._searches = {}

    def _generate(self, batch, method, options):
        if method not in self._searches:
            self._searches[method] = sampler_search(self.model, method,
                                                    options.get("beam_size", 4),
                                                    cached=self.cached)
        longest = max(len(ids) for ids in batch)
        source_length = min(-(-longest // 16) * 16, self.max_sequence_length)
        prompt_length = min(-(-(longest + 51) // 16) * 16, self.max_sequence_length)
        ids = padded(batch, kt.PAD_ID, source_length)
        return {"token_ids": self._searches[method](ids, prompt_length)}


if __name__ == "__main__":
    baseline = build_keras_hub_transformer("small", vocabulary_size=8000)
    baseline.summary()
    source = np.random.default_rng(0).integers(4, 8000, (2, 12)).astype("int32")
    print(sampler_search(baseline, "beam")(source, 16))
