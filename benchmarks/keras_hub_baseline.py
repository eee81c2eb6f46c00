"""The KerasHub baseline: the keras.io "English-to-Spanish translation with KerasHub" recipe.

The model is that recipe's shape, sized like one of our presets: per side a
`keras_hub.layers.TokenAndPositionEmbedding` (learned positions, untied), a stack of
`keras_hub.layers.TransformerEncoder` / `TransformerDecoder` blocks and a final `Dense`
to the vocabulary. Widths, heads, layers, vocabulary, maximum length, layer-norm epsilon
and dropout are our preset's; the recipe's extra 0.5 dropout before the output layer is
left out (it would only slow the baseline's learning). With `normalize_first=True` the
blocks are KerasHub's pre-LN variant and, as in ours, a `LayerNormalization` closes each
stack. Inputs and output are ours
(`encoder_token_ids`, `decoder_token_ids` -> float32 logits), so it trains with our loss,
optimizer, schedule and batches (`keras_transformer.compile_transformer`).

Translation is the recipe's too: a `keras_hub.samplers.GreedySampler` or `BeamSampler`
fills a fixed-length prompt, calling `next(prompt, cache, index)`, which runs the whole
decoder over the prompt at every step (no key/value cache). Unlike the recipe, the
encoder runs once per batch and the sampler is compiled with XLA, as KerasHub's own
`generate` does, so the baseline is the fastest form of the recipe.

    python benchmarks/keras_hub_baseline.py   # builds the small preset and decodes a batch
"""

import keras
import keras_hub
import numpy as np
from keras import ops

import keras_transformer as kt
from keras_transformer.generation import Translator


def build_keras_hub_transformer(preset="small", *, vocabulary_size, max_sequence_length=128,
                                **overrides):
    """The recipe's encoder-decoder, sized like `kt.PRESETS[preset]` (with `overrides`).

    Returns a functional `keras.Model` with our input names and float32 logits
    `(B, T, V)`, plus the attributes `hidden_dim` (read by `compile_transformer`),
    `encoder` (ids -> `(B, S, D)`) and `decoder` (ids, encoder sequence, encoder
    padding mask -> logits) over the same weights.

    Example:
    >>> model = build_keras_hub_transformer("tiny", vocabulary_size=50, max_sequence_length=16)
    >>> logits = model({"encoder_token_ids": np.ones((2, 7), "int32"),
    ...                 "decoder_token_ids": np.ones((2, 5), "int32")})
    >>> tuple(logits.shape), str(logits.dtype)
    ((2, 5, 50), "<dtype: 'float32'>")
    """
    config = {**kt.PRESETS[preset], **overrides}
    hidden_dim = config["hidden_dim"]
    normalize_first = config.get("normalize_first", False)
    block_args = dict(intermediate_dim=config["intermediate_dim"], num_heads=config["num_heads"],
                      dropout=config["dropout"], layer_norm_epsilon=1e-6,
                      normalize_first=normalize_first)

    def final_norm(x, name):
        return keras.layers.LayerNormalization(epsilon=1e-6, name=name)(x) if normalize_first else x

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


def sampler_search(model, method="greedy", beam_size=4, jit_compile=True):
    """A function `(encoder_token_ids (B, S), prompt_length) -> token ids (B, L - 1)`.

    The KerasHub sampler fills a prompt `[START, PAD, ...]` of `prompt_length` ids and
    stops once every row has produced `END_ID`; the returned ids drop the start token
    and are `PAD_ID` after the end token. Compiled once per shape with XLA.
    """
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
    """Our `Translator` (tokenizer, length-sorted batches) over the baseline's samplers.

    The prompt holds the paper's limit, the batch's longest source + 50 (at most
    `max_sequence_length`), rounded up to a multiple of 16 to limit recompilation.
    """

    def __init__(self, model, tokenizer, max_sequence_length=128, **kwargs):
        super().__init__(model, tokenizer, max_sequence_length=max_sequence_length, **kwargs)
        self._searches = {}

    def _generate(self, batch, method, options):
        if method not in self._searches:
            self._searches[method] = sampler_search(self.model, method,
                                                    options.get("beam_size", 4))
        longest = max(len(ids) for ids in batch)
        source_length = min(-(-longest // 16) * 16, self.max_sequence_length)
        padded = np.full((len(batch), source_length), kt.PAD_ID, "int32")
        for row, ids in enumerate(batch):
            padded[row, : len(ids)] = ids
        prompt_length = min(-(-(longest + 51) // 16) * 16, self.max_sequence_length)
        return {"token_ids": self._searches[method](padded, prompt_length)}


if __name__ == "__main__":
    baseline = build_keras_hub_transformer("small", vocabulary_size=8000)
    baseline.summary()
    source = np.random.default_rng(0).integers(4, 8000, (2, 12)).astype("int32")
    print(sampler_search(baseline, "beam")(source, 16))
