"""Corpus BLEU and chrF of a translator on sentence pairs, with sacrebleu."""

import sacrebleu


def score_translations(hypotheses, references):
    """sacrebleu corpus BLEU and chrF of `hypotheses` against one reference each.

    Returns a dict with `bleu`, `chrf`, `signature` (sacrebleu's BLEU signature, so the
    figure can be compared with others) and `sentences`.

    Example:
    >>> score_translations(["Good wine needs to mellow."], ["Good wine needs to mellow."])["bleu"]
    100.0
    """
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(
            f"Got {len(hypotheses)} hypotheses for {len(references)} references: "
            "they must align one to one."
        )
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    return {
        "bleu": round(bleu_score.score, 2),
        "chrf": round(chrf.corpus_score(hypotheses, [references]).score, 2),
        "signature": str(bleu.get_signature()),
        "sentences": len(hypotheses),
    }


def evaluate_translator(translator, pairs, method=None, progress=True, **generate_kwargs):
    """Translate the sources of `pairs` and score them; adds `examples` (first 10).

    Args:
        translator: a `Translator` (anything with `translate(sources, method=...,
            progress=..., **options)` -> list of str).
        pairs: list of `(source, reference)` string pairs.
        method: decoding method, or `None` (the default) for the translator's own
            (`"beam"`, the paper's, unless an imported model saved another).
        progress: bool. Show a progress bar.
        **generate_kwargs: passed to `translate` (e.g. `beam_size=8`).

    Returns:
        The dict of `score_translations`, plus `method` and `examples`.

    Example:
    >>> class Echo:  # a stand-in translator that returns its input
    ...     def translate(self, sources, method, progress):
    ...         return list(sources)
    >>> result = evaluate_translator(Echo(), [("a b c d", "a b c d"), ("x y", "z y")],
    ...                              progress=False)
    >>> result["sentences"], result["method"], result["examples"][1]["translation"]
    (2, 'beam', 'x y')
    """
    pairs = list(pairs)
    if not pairs:
        raise ValueError("`pairs` is empty: nothing to evaluate.")
    method = method or getattr(translator, "method", "beam")
    sources = [source for source, _ in pairs]
    references = [target for _, target in pairs]
    hypotheses = translator.translate(sources, method=method, progress=progress,
                                      **generate_kwargs)
    result = score_translations(hypotheses, references)
    result["method"] = method
    result["examples"] = [
        {"source": s, "reference": r, "translation": h}
        for s, r, h in list(zip(sources, references, hypotheses, strict=True))[:10]
    ]
    return result
