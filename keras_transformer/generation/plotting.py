"""Attention heat maps like Figures 3-5 of Vaswani et al. (2017). Needs matplotlib."""

KINDS = ("cross_attention", "encoder_self_attention", "decoder_self_attention")


def plot_attention(attention, kind="cross_attention", layer=-1, heads=None, axes=None):
    """Plot the attention of one layer, one subplot per head.

    Args:
        attention: the dict of `Translator.attention`.
        kind: `"cross_attention"` (rows: output pieces, columns: source pieces),
            `"encoder_self_attention"` or `"decoder_self_attention"`.
        layer: int. Layer index (`-1`: the last, as in the paper's figures).
        heads: int, list of int, or `None` (every head).
        axes: matplotlib axes to draw on, one per head; created when `None`.

    Returns:
        The matplotlib `Figure`.

    Example:
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> attention = {"source_pieces": ["a", "</s>"], "target_pieces": ["b", "</s>"],
    ...              "cross_attention": [np.full((2, 2, 2), 0.5)]}
    >>> len(plot_attention(attention).axes)
    2
    """
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {sorted(KINDS)}. Received: kind={kind!r}")
    import matplotlib.pyplot as plt  # imported lazily: plotting is optional

    maps = attention[kind][layer]  # (N, T, S)
    heads = list(range(maps.shape[0])) if heads is None else heads
    heads = [heads] if isinstance(heads, int) else list(heads)
    if any(not 0 <= h < maps.shape[0] for h in heads):
        raise ValueError(f"`heads` must be in [0, {maps.shape[0]}). Received: heads={heads}")
    source = attention["source_pieces"]
    target = attention["target_pieces"]
    rows, columns = {
        "cross_attention": (target, source),
        "encoder_self_attention": (source, source),
        "decoder_self_attention": (target, attention.get("decoder_input_pieces", target)),
    }[kind]
    if axes is None:
        size = max(len(columns), 4) * 0.35 + 1
        figure, axes = plt.subplots(1, len(heads), figsize=(size * len(heads), size),
                                    squeeze=False)
        axes = axes[0]
    else:
        axes = [axes] if not hasattr(axes, "__len__") else list(axes)
        figure = axes[0].figure
    for ax, head in zip(axes, heads, strict=True):
        ax.imshow(maps[head], cmap="viridis", vmin=0.0, aspect="auto")
        ax.set_xticks(range(len(columns)), columns, rotation=90)
        ax.set_yticks(range(len(rows)), rows)
        ax.set_title(f"layer {layer}, head {head}")
    figure.tight_layout()
    return figure
