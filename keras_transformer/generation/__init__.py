"""Generation (Section 6.1): greedy, beam search and sampling over one shared decoder step.

Example:
>>> from keras_transformer.models import build_transformer
>>> model = build_transformer("tiny", vocabulary_size=30)
>>> out = generate(model, np.array([[5, 6, 3]]), method="greedy", max_length=4)
>>> out["token_ids"].shape[1] <= 4
True
"""

from keras_transformer.generation.beam_search import beam_search, length_penalty
from keras_transformer.generation.generate import default_max_length, generate
from keras_transformer.generation.greedy import greedy_search
from keras_transformer.generation.ngram_blocking import block_repeated_ngrams
from keras_transformer.generation.plotting import plot_attention
from keras_transformer.generation.sampling import filter_logits, sample
from keras_transformer.generation.step import DecoderStep
from keras_transformer.generation.translator import Translator

__all__ = [
    "DecoderStep",
    "Translator",
    "beam_search",
    "block_repeated_ngrams",
    "default_max_length",
    "filter_logits",
    "generate",
    "greedy_search",
    "length_penalty",
    "plot_attention",
    "sample",
]
