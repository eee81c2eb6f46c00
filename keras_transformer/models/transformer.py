"""The encoder-decoder Transformer as a functional Keras model."""

import gc
import warnings

import keras
from keras import ops

from keras_transformer.layers.decoder import TransformerDecoderBlock
from keras_transformer.layers.embedding import TokenEmbedding
from keras_transformer.layers.encoder import TransformerEncoderBlock
from keras_transformer.layers.masking import padding_mask
from keras_transformer.layers.position_embedding import (
    SINUSOID_LAYOUTS,
    LearnedPositionEmbedding,
    SinusoidalPositionEncoding,
)
from keras_transformer.models.presets import PRESETS
from keras_transformer.validation import (
    check_choice,
    check_divisible,
    check_positive_int,
    check_rate,
)

POSITION_EMBEDDINGS = ("sinusoidal", "learned")


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """The Transformer of Figure 1 of Vaswani et al. (2017), as a functional model.

    Inputs are a dict of int32 token ids, `encoder_token_ids` `(B, S)` and
    `decoder_token_ids` `(B, T)` (id 0 is padding); the output is float32 `logits`
    `(B, T, V)`. One embedding matrix serves both stacks and the output projection
    (Section 3.4), unless `source_vocabulary_size` gives the encoder its own.

    Beside the full forward pass, the same weights serve generation: `encode` runs
    the encoder once, `init_cache` precomputes every cross-attention key/value and
    allocates a static-shape self-attention cache, and `decode_step` advances the
    decoder with it. `encoder_model` and `decoder_model` are functional sub-models.

    Args:
        vocabulary_size: int. Shared source-target vocabulary (V).
        num_layers: int. Layers in each stack (N). Defaults to `6`.
        hidden_dim: int. Model width (d_model). Defaults to `512`.
        intermediate_dim: int. Feed-forward inner size (d_ff). Defaults to `2048`.
        num_heads: int. Attention heads (h); must divide `hidden_dim`. Defaults to `8`.
        dropout: float. P_drop, on sub-layer outputs and embedding sums. Defaults to `0.1`.
        attention_dropout: float. Dropout on attention weights. Defaults to `0.0`.
        activation: feed-forward activation. Defaults to `"relu"`.
        normalize_first: bool. Pre-LN blocks plus a final LayerNorm per stack
            instead of the paper's post-LN. Defaults to `False`.
        position_embedding: `"sinusoidal"` (the paper) or `"learned"` (Table 3, row E).
        max_sequence_length: int. Longest sequence a learned position embedding
            covers; sinusoids have no limit. Defaults to `1024`.
        layer_norm_epsilon: float. Defaults to `1e-6`.
        source_vocabulary_size: int or `None`. A separate source embedding of this
            size for the encoder; the decoder's embedding stays tied to the output
            projection (Marian models with separate vocabularies). `None` (the
            paper, the default): one shared embedding.
        output_bias: bool. A fixed bias on the logits (Marian's `final_logits_bias`).
            Defaults to `False` (the paper).
        position_layout: `"interleaved"` (the paper's formula, the default) or
            `"halves"` (sines then cosines, Marian). Sinusoidal positions only.
        quantization: `None` (the default) or `"int8"`: a model saved after
            `quantize` (see `Transformer.quantize`), rebuilt quantized.
        quantization_filters: the `filters` of that `quantize` call.

    Options beyond the paper exist for imported models (`keras_transformer.importers`):
    `activation="silu"`, `layer_norm_epsilon=1e-5` and the three above.

    Example:
    >>> model = Transformer(vocabulary_size=50, num_layers=1, hidden_dim=16,
    ...                     intermediate_dim=32, num_heads=2)
    >>> logits = model({"encoder_token_ids": np.ones((2, 7), "int32"),
    ...                 "decoder_token_ids": np.ones((2, 5), "int32")})
    >>> tuple(logits.shape)
    (2, 5, 50)
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers=6,
        hidden_dim=512,
        intermediate_dim=2048,
        num_heads=8,
        dropout=0.1,
        attention_dropout=0.0,
        activation="relu",
        normalize_first=False,
        position_embedding="sinusoidal",
        max_sequence_length=1024,
        layer_norm_epsilon=1e-6,
        source_vocabulary_size=None,
        output_bias=False,
        position_layout="interleaved",
        quantization=None,
        quantization_filters=None,
        dtype=None,
        **kwargs,
    ):
        for name, value in [
            ("vocabulary_size", vocabulary_size),
            ("num_layers", num_layers),
            ("hidden_dim", hidden_dim),
            ("intermediate_dim", intermediate_dim),
            ("num_heads", num_heads),
            ("max_sequence_length", max_sequence_length),
        ]:
            check_positive_int(name, value)
        check_divisible(hidden_dim, num_heads)
        check_rate("dropout", dropout)
        check_rate("attention_dropout", attention_dropout)
        check_choice("position_embedding", position_embedding, POSITION_EMBEDDINGS)
        check_choice("position_layout", position_layout, SINUSOID_LAYOUTS)
        if source_vocabulary_size is not None:
            check_positive_int("source_vocabulary_size", source_vocabulary_size)

        # === Layers ===
        # PyTorch modules accept no sub-module attributes before `Model.__init__`, but
        # the functional graph below reads them: set them untracked for the graph, then
        # again (tracked) once the model exists. The attribute names are the weights'
        # paths in a .keras file.
        layers = {}
        layers["token_embedding"] = TokenEmbedding(
            vocabulary_size, hidden_dim, output_bias=output_bias, dtype=dtype,
            name="token_embedding"
        )
        layers["source_token_embedding"] = layers["token_embedding"]
        if source_vocabulary_size is not None:
            layers["source_token_embedding"] = TokenEmbedding(
                source_vocabulary_size, hidden_dim, dtype=dtype, name="source_token_embedding"
            )

        def position_layer(name):
            if position_embedding == "learned":
                return LearnedPositionEmbedding(max_sequence_length, dtype=dtype, name=name)
            return SinusoidalPositionEncoding(layout=position_layout, dtype=dtype, name=name)

        layers["encoder_position_embedding"] = position_layer("encoder_position_embedding")
        layers["decoder_position_embedding"] = position_layer("decoder_position_embedding")
        layers["encoder_embedding_dropout"] = keras.layers.Dropout(
            dropout, dtype=dtype, name="encoder_embedding_dropout"
        )
        layers["decoder_embedding_dropout"] = keras.layers.Dropout(
            dropout, dtype=dtype, name="decoder_embedding_dropout"
        )
        block_args = dict(
            intermediate_dim=intermediate_dim,
            num_heads=num_heads,
            dropout=dropout,
            attention_dropout=attention_dropout,
            activation=activation,
            layer_norm_epsilon=layer_norm_epsilon,
            normalize_first=normalize_first,
            dtype=dtype,
        )
        layers["encoder_blocks"] = [
            TransformerEncoderBlock(**block_args, name=f"encoder_block_{i}")
            for i in range(num_layers)
        ]
        layers["decoder_blocks"] = [
            TransformerDecoderBlock(**block_args, name=f"decoder_block_{i}")
            for i in range(num_layers)
        ]
        layers["encoder_norm"] = layers["decoder_norm"] = None
        if normalize_first:
            layers["encoder_norm"] = keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=dtype, name="encoder_norm"
            )
            layers["decoder_norm"] = keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=dtype, name="decoder_norm"
            )

        for name, layer in layers.items():
            object.__setattr__(self, name, layer)

        # === Functional model ===
        encoder_token_ids = keras.Input((None,), dtype="int32", name="encoder_token_ids")
        decoder_token_ids = keras.Input((None,), dtype="int32", name="decoder_token_ids")
        encoder_sequence = self.encode(encoder_token_ids)
        logits = self.decode(decoder_token_ids, encoder_sequence, padding_mask(encoder_token_ids))
        super().__init__(
            inputs={
                "encoder_token_ids": encoder_token_ids,
                "decoder_token_ids": decoder_token_ids,
            },
            outputs=logits,
            dtype=dtype,
            **kwargs,
        )
        for name, layer in layers.items():
            object.__delattr__(self, name)
            setattr(self, name, layer)

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation = activation
        self.normalize_first = normalize_first
        self.position_embedding = position_embedding
        self.max_sequence_length = max_sequence_length
        self.layer_norm_epsilon = layer_norm_epsilon
        self.source_vocabulary_size = source_vocabulary_size
        self.output_bias = output_bias
        self.position_layout = position_layout
        self.quantization = self.quantization_filters = None
        if quantization is not None:  # the variables the saved file holds
            self.quantize(quantization, filters=quantization_filters)

    def quantize(self, mode=None, config=None, filters=None, **kwargs):
        """Quantize the weights for decoding: `mode="int8"` only.

        Keras's `Model.quantize` turns every `Dense` and `EinsumDense` (attention and
        feed-forward projections) to int8 weights with per-channel scales and per-token
        int8 inputs; `TokenEmbedding.quantize` does the same for the tied embedding and
        output projection, the largest product of a decoding step. `filters` picks
        layers as in Keras by a regex or a list of them (e.g. `filters="token_embedding"`
        for the embedding and output projection only). The quantized model decodes,
        exports and saves (`.keras` keeps `quantization`); it does not train.

        Example:
        >>> model = Transformer(vocabulary_size=50, num_layers=1, hidden_dim=16,
        ...                     intermediate_dim=32, num_heads=2)
        >>> model.quantize("int8")
        >>> model.token_embedding.quantized_kernel.dtype
        'int8'
        """
        if mode != "int8":
            raise ValueError(f"`mode` must be 'int8'. Received: mode={mode!r}")
        if self.quantization is not None:
            raise ValueError(f"The model is already quantized ({self.quantization}).")
        if not (filters is None or isinstance(filters, str) or (
                isinstance(filters, (list, tuple)) and all(isinstance(f, str) for f in filters))):
            raise ValueError("`filters` must be a regex string or a list of them (saved with "
                             f"the model). Received: filters={filters!r}")
        # Keras runs `gc.collect()` each time a layer drops a float kernel, which takes
        # seconds in a process with a large heap; frozen objects are not scanned.
        gc.freeze()
        try:
            with warnings.catch_warnings():  # layers without int8 (norms, dropout) are skipped
                warnings.simplefilter("ignore")
                super().quantize(mode, config=config, filters=filters, **kwargs)
        finally:
            gc.unfreeze()
        self.quantization = mode
        self.quantization_filters = list(filters) if isinstance(filters, tuple) else filters

    # --- the three stages every use shares -------------------------------------

    def _embed(self, token_ids, position_layer, dropout_layer, start_index=0, training=None,
               embedding=None):
        x = (embedding or self.token_embedding)(token_ids)
        x = x + position_layer(x, start_index=start_index)
        return dropout_layer(x, training=training)

    def encode(self, encoder_token_ids, training=None):
        """Run the encoder stack: int `(B, S)` -> float `(B, S, D)`."""
        x = self._embed(encoder_token_ids, self.encoder_position_embedding,
                        self.encoder_embedding_dropout, training=training,
                        embedding=self.source_token_embedding)
        mask = padding_mask(encoder_token_ids)
        for block in self.encoder_blocks:
            x = block(x, padding_mask=mask, training=training)
        return x if self.encoder_norm is None else self.encoder_norm(x)

    def decode(self, decoder_token_ids, encoder_sequence, encoder_padding_mask, training=None):
        """Run the decoder over a whole prefix (teacher forcing): -> logits `(B, T, V)`."""
        x = self._embed(decoder_token_ids, self.decoder_position_embedding,
                        self.decoder_embedding_dropout, training=training)
        decoder_mask = padding_mask(decoder_token_ids)
        for block in self.decoder_blocks:
            x = block(x, encoder_sequence, decoder_padding_mask=decoder_mask,
                      encoder_padding_mask=encoder_padding_mask, training=training)
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        return self.token_embedding(x, reverse=True)

    # --- incremental decoding ----------------------------------------------------

    def init_cache(self, encoder_sequence, max_length, batch_size=None):
        """Caches for `decode_step`: `{"self_attention": ..., "cross_attention": ...}`.

        Each is a tuple with one `(keys, values)` pair per decoder layer: self-attention
        zeros `(batch_size, N, max_length, H)` each and the encoder's cross-attention
        keys and values `(B, N, S, H)`, computed here once. `batch_size` (default `B`)
        may be a multiple `B * G` of the encoder's rows: the decoder then runs `G` rows
        per sentence (beams) that share its cross-attention cache.
        """
        if batch_size is None:
            batch_size = ops.shape(encoder_sequence)[0]
        head_dim = self.hidden_dim // self.num_heads
        shape = (batch_size, self.num_heads, max_length, head_dim)
        dtype = self.decoder_blocks[0].compute_dtype
        return {
            "self_attention": tuple((ops.zeros(shape, dtype), ops.zeros(shape, dtype))
                                    for _ in self.decoder_blocks),
            "cross_attention": tuple(
                block.compute_cross_attention_cache(encoder_sequence)
                for block in self.decoder_blocks
            ),
        }

    def decode_step(self, decoder_token_ids, cache_index, cache, encoder_padding_mask):
        """Decode `decoder_token_ids` `(B, T)` at positions `cache_index..` with the cache.

        Returns `(logits (B, T, V), new_cache)`; only the self-attention part of the
        cache changes. Gives the same logits as `decode` over the whole prefix.
        """
        x = self._embed(decoder_token_ids, self.decoder_position_embedding,
                        self.decoder_embedding_dropout, start_index=cache_index, training=False)
        new_self_caches = []
        for block, self_cache, cross_cache in zip(
            self.decoder_blocks, cache["self_attention"], cache["cross_attention"], strict=True
        ):
            x, self_cache = block(
                x, encoder_padding_mask=encoder_padding_mask, self_attention_cache=self_cache,
                cross_attention_cache=cross_cache, cache_update_index=cache_index,
                training=False,
            )
            new_self_caches.append(self_cache)
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        new_cache = {"self_attention": tuple(new_self_caches),
                     "cross_attention": cache["cross_attention"]}
        return self.token_embedding(x, reverse=True), new_cache

    # --- inspection ----------------------------------------------------------------

    def attention_weights(self, encoder_token_ids, decoder_token_ids):
        """Every attention map, for plots like the paper's Figures 3-5.

        Returns a dict of lists (one entry per layer) of float32 arrays:
        `"encoder_self_attention"` `(B, N, S, S)`, `"decoder_self_attention"`
        `(B, N, T, T)` and `"cross_attention"` `(B, N, T, S)`.
        """
        encoder_mask = padding_mask(encoder_token_ids)
        x = self._embed(encoder_token_ids, self.encoder_position_embedding,
                        self.encoder_embedding_dropout, training=False,
                        embedding=self.source_token_embedding)
        weights = {"encoder_self_attention": [], "decoder_self_attention": [],
                   "cross_attention": []}
        for block in self.encoder_blocks:
            x, w = block(x, padding_mask=encoder_mask, return_attention_scores=True)
            weights["encoder_self_attention"].append(w)
        encoder_sequence = x if self.encoder_norm is None else self.encoder_norm(x)
        y = self._embed(decoder_token_ids, self.decoder_position_embedding,
                        self.decoder_embedding_dropout, training=False)
        decoder_mask = padding_mask(decoder_token_ids)
        for block in self.decoder_blocks:
            y, w = block(y, encoder_sequence, decoder_padding_mask=decoder_mask,
                         encoder_padding_mask=encoder_mask, return_attention_scores=True)
            weights["decoder_self_attention"].append(w["self_attention"])
            weights["cross_attention"].append(w["cross_attention"])
        return {key: [ops.cast(w, "float32") for w in value] for key, value in weights.items()}

    @property
    def encoder_model(self):
        """A functional model `encoder_token_ids -> encoder_sequence` over these weights."""
        token_ids = keras.Input((None,), dtype="int32", name="encoder_token_ids")
        return keras.Model(token_ids, self.encode(token_ids), name="encoder")

    @property
    def decoder_model(self):
        """A functional model `(decoder_token_ids, encoder_sequence, encoder_padding_mask)
        -> logits` over these weights (a full pass over the prefix)."""
        token_ids = keras.Input((None,), dtype="int32", name="decoder_token_ids")
        sequence = keras.Input((None, self.hidden_dim), name="encoder_sequence")
        mask = keras.Input((None,), dtype="bool", name="encoder_padding_mask")
        inputs = {"decoder_token_ids": token_ids, "encoder_sequence": sequence,
                  "encoder_padding_mask": mask}
        return keras.Model(inputs, self.decode(token_ids, sequence, mask), name="decoder")

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "hidden_dim": self.hidden_dim,
            "intermediate_dim": self.intermediate_dim,
            "num_heads": self.num_heads,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "activation": self.activation,
            "normalize_first": self.normalize_first,
            "position_embedding": self.position_embedding,
            "max_sequence_length": self.max_sequence_length,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "source_vocabulary_size": self.source_vocabulary_size,
            "output_bias": self.output_bias,
            "position_layout": self.position_layout,
            **({"quantization": self.quantization,
                "quantization_filters": self.quantization_filters} if self.quantization else {}),
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def build_transformer(preset="base", *, vocabulary_size, **overrides):
    """Build a `Transformer` from a preset of Table 3, with keyword overrides.

    Presets: `"tiny"` (tests), `"small"` (a laptop), `"base"` and `"big"` (Table 3).

    Example:
    >>> model = build_transformer("tiny", vocabulary_size=100, num_layers=1)
    >>> model.num_layers, model.hidden_dim
    (1, 64)
    """
    if preset not in PRESETS:
        raise ValueError(f"`preset` must be one of {sorted(PRESETS)}. Received: preset={preset!r}")
    return Transformer(vocabulary_size=vocabulary_size, **{**PRESETS[preset], **overrides})
