"""The project's train/validation/test split (see the data guide).

Only sentence pairs can be held out: a pair goes to test when
`md5(german.encode()) % 10 == 0` and to validation when it is `1`. Every other pair,
phrase pairs included, trains. The split depends only on the German text, so it is the
same on every run and machine.
"""

import hashlib

_SENTENCE_END = (".", "?", "!")


def is_sentence_pair(source, target):
    """Whether a pair is a full sentence pair rather than a word or phrase.

    A sentence pair has a source that starts upper-case and has 3 or more words, and both
    sides end in `.`, `?` or `!`.

    Args:
        source: str. The German side.
        target: str. The English side.

    Returns:
        bool.

    Example:
    >>> is_sentence_pair("Guter Wein muss reifen.", "Good wine needs to mellow.")
    True
    >>> is_sentence_pair("Aas", "carrion")
    False
    """
    return (
        source[:1].isupper()
        and source.endswith(_SENTENCE_END)
        and target.endswith(_SENTENCE_END)
        and len(source.split()) >= 3
    )


def sentence_pairs_only(pairs):
    """Keeps the sentence pairs (see `is_sentence_pair`), in order.

    Example:
    >>> sentence_pairs_only([("Aas", "carrion"), ("Ich bin hier.", "I am here.")])
    [('Ich bin hier.', 'I am here.')]
    """
    return [pair for pair in pairs if is_sentence_pair(*pair)]


def split_pairs(pairs):
    """Splits pairs into `"train"`, `"validation"` and `"test"` by the project's rule.

    Sentence pairs with `md5(source.encode()) % 10` equal to 0 go to test, equal to 1 to
    validation; all other pairs go to train. Order within each split is kept.

    Args:
        pairs: iterable of `(source, target)` string pairs, deduplicated beforehand
            (`load_ding` does so).

    Returns:
        Dict with keys `"train"`, `"validation"` and `"test"`, each a list of pairs.

    Example:
    >>> splits = split_pairs([
    ...     ("Aas", "carrion"),
    ...     ("Ich bin hier.", "I am here."),  # md5 % 10 == 4
    ...     ("Er ist krank.", "He is ill."),  # 1
    ...     ("Wie spät ist es?", "What time is it?"),  # 0
    ... ])
    >>> {name: len(split) for name, split in splits.items()}
    {'train': 2, 'validation': 1, 'test': 1}
    """
    splits = {"train": [], "validation": [], "test": []}
    for pair in pairs:
        name = "train"
        if is_sentence_pair(*pair):
            bucket = int(hashlib.md5(pair[0].encode()).hexdigest(), 16) % 10
            name = {0: "test", 1: "validation"}.get(bucket, "train")
        splits[name].append(pair)
    return splits
