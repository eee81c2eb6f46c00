"""keras-transformer: the Transformer of "Attention Is All You Need" in Keras 3.

Example:
>>> import keras_transformer as kt
>>> model = kt.build_transformer("tiny", vocabulary_size=100)
>>> model.count_params() > 0
True
"""

import sys
from typing import TYPE_CHECKING

from keras_transformer.allocator import preload_allocator
from keras_transformer.startup_noise import filter_startup_noise, is_command_line

# The command line restarts itself on tcmalloc before anything allocates much (TensorFlow
# trains up to 2.7x faster on it; `KT_ALLOCATOR=system` opts out), and filters
# TensorFlow's C++ start-up lines, which importing Keras prints.
if is_command_line(sys):
    preload_allocator()
    filter_startup_noise()

# Under KERAS_BACKEND=jax or torch nothing here imports TensorFlow: the TensorFlow-only
# features (tf.data, in-graph tokenizer ops, SavedModel export, tf.distribute) load it
# when first used (see `keras_transformer.backend`).
from keras_transformer import (  # noqa: E402
    data,
    export,
    generation,
    layers,
    losses,
    metrics,
    models,
    optimizers,
    training,
)
from keras_transformer.generation import Translator, generate, plot_attention  # noqa: E402
from keras_transformer.layers.attention import MultiHeadAttention  # noqa: E402
from keras_transformer.layers.decoder import TransformerDecoderBlock  # noqa: E402
from keras_transformer.layers.embedding import TokenEmbedding  # noqa: E402
from keras_transformer.layers.encoder import TransformerEncoderBlock  # noqa: E402
from keras_transformer.layers.feed_forward import PositionwiseFeedForward  # noqa: E402
from keras_transformer.layers.position_embedding import (  # noqa: E402
    LearnedPositionEmbedding,
    SinusoidalPositionEncoding,
)
from keras_transformer.losses import (  # noqa: E402
    LabelSmoothedSparseCategoricalCrossentropy,
    label_smoothed_sparse_categorical_crossentropy,
)
from keras_transformer.metrics import MaskedAccuracy, Perplexity  # noqa: E402
from keras_transformer.models import PRESETS, Transformer, build_transformer  # noqa: E402
from keras_transformer.optimizers import TransformerSchedule  # noqa: E402
from keras_transformer.special_tokens import END_ID, PAD_ID, START_ID, UNK_ID  # noqa: E402
from keras_transformer.training.compile import compile_transformer  # noqa: E402
from keras_transformer.version import __version__ as __version__

if TYPE_CHECKING:  # static tools (docs, IDEs) see it; it loads TensorFlow when first used
    from keras_transformer.export.saved_model import export_saved_model


def __getattr__(name):
    # SavedModel export imports TensorFlow: only when first used.
    if name == "export_saved_model":
        from keras_transformer.export.saved_model import export_saved_model

        return export_saved_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "END_ID",
    "PAD_ID",
    "PRESETS",
    "START_ID",
    "UNK_ID",
    "LabelSmoothedSparseCategoricalCrossentropy",
    "LearnedPositionEmbedding",
    "MaskedAccuracy",
    "MultiHeadAttention",
    "Perplexity",
    "PositionwiseFeedForward",
    "SinusoidalPositionEncoding",
    "TokenEmbedding",
    "Transformer",
    "TransformerDecoderBlock",
    "TransformerEncoderBlock",
    "TransformerSchedule",
    "Translator",
    "build_transformer",
    "compile_transformer",
    "data",
    "export",
    "export_saved_model",
    "generate",
    "generation",
    "label_smoothed_sparse_categorical_crossentropy",
    "layers",
    "losses",
    "metrics",
    "models",
    "optimizers",
    "plot_attention",
    "training",
]
