"""Which tokenizer a data or model folder holds: find, load, copy and fingerprint it.

A folder holds either our SentencePiece `tokenizer.model` (`Tokenizer`), or an imported
OPUS-MT model's `source.spm`, `target.spm` and `vocabulary.json` (`MarianTokenizer`).
Every reader of a folder's tokenizer goes through `load_tokenizer`.
"""

import hashlib
import os
import shutil

from keras_transformer.folders import TOKENIZER_FILE

MARIAN_FILES = ("source.spm", "target.spm", "vocabulary.json")


def tokenizer_files(folder):
    """The names of the tokenizer files in `folder` (empty if it has none).

    Example:
    >>> import tempfile
    >>> tokenizer_files(tempfile.mkdtemp())
    ()
    """
    if all(os.path.isfile(os.path.join(folder, name)) for name in MARIAN_FILES):
        return MARIAN_FILES
    if os.path.isfile(os.path.join(folder, TOKENIZER_FILE)):
        return (TOKENIZER_FILE,)
    return ()


def has_tokenizer(folder):
    """Whether `folder` holds a tokenizer of either kind."""
    return bool(tokenizer_files(folder))


def load_tokenizer(folder):
    """The tokenizer in `folder`: a `MarianTokenizer` or a `Tokenizer`.

    Raises:
        FileNotFoundError: the folder holds neither, naming both kinds of files.

    Example:
    >>> import tempfile
    >>> from keras_transformer.data import train_tokenizer
    >>> folder = tempfile.mkdtemp()
    >>> _ = train_tokenizer(["Guten Tag.", "Good day."] * 5,
    ...                     os.path.join(folder, "tokenizer.model"), vocabulary_size=30)
    >>> type(load_tokenizer(folder)).__name__, tokenizer_files(folder)
    ('Tokenizer', ('tokenizer.model',))
    """
    files = tokenizer_files(folder)
    if files == MARIAN_FILES:
        from keras_transformer.data.marian_tokenizer import MarianTokenizer

        return MarianTokenizer.from_directory(folder)
    if files:
        from keras_transformer.data.tokenizer import Tokenizer

        return Tokenizer.from_file(os.path.join(folder, TOKENIZER_FILE))
    raise FileNotFoundError(
        f"No tokenizer in `{folder}`: expected {TOKENIZER_FILE} (written by `prepare`) or "
        f"{', '.join(MARIAN_FILES)} (written by `import`).")


def remove_tokenizer(folder):
    """Delete the tokenizer files of either kind from `folder` (before writing another)."""
    for name in (TOKENIZER_FILE, *MARIAN_FILES):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            os.remove(path)


def copy_tokenizer(source_folder, destination_folder):
    """Copy the tokenizer files of `source_folder` into `destination_folder`, replacing
    the tokenizer there."""
    files = tokenizer_files(source_folder)
    if not files:
        load_tokenizer(source_folder)  # raises, naming the files
    if os.path.abspath(source_folder) == os.path.abspath(destination_folder):
        return
    remove_tokenizer(destination_folder)
    for name in files:
        shutil.copyfile(os.path.join(source_folder, name),
                        os.path.join(destination_folder, name))


def tokenizer_md5(folder):
    """One MD5 over the tokenizer files of `folder` (`None` if it has none): equal
    fingerprints mean the same ids for the same text."""
    files = tokenizer_files(folder)
    if not files:
        return None
    digest = hashlib.md5()
    for name in files:
        with open(os.path.join(folder, name), "rb") as file:
            for chunk in iter(lambda: file.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()
