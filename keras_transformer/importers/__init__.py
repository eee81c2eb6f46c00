"""Pretrained translation models from other toolkits, as ordinary model folders.

`import_marian` reads a local Hugging Face snapshot of an OPUS-MT (Marian) model and
writes a folder that `translate`, `evaluate`, `export`, `average` and `train` accept.
Each toolkit gets a module of its own here (FSMT, with its Moses+BPE tokenizer and
its own position offset, would be the next).
"""

from keras_transformer.importers.marian import import_marian

__all__ = ["import_marian"]
