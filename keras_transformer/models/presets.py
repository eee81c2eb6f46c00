"""Model sizes: Table 3 of Vaswani et al. (2017), plus `tiny` for tests and laptops."""

PRESETS = {
    "tiny": {
        "num_layers": 2,
        "hidden_dim": 64,
        "intermediate_dim": 256,
        "num_heads": 4,
        "dropout": 0.1,
    },
    "small": {
        "num_layers": 3,
        "hidden_dim": 256,
        "intermediate_dim": 1024,
        "num_heads": 4,
        "dropout": 0.1,
    },
    "base": {
        "num_layers": 6,
        "hidden_dim": 512,
        "intermediate_dim": 2048,
        "num_heads": 8,
        "dropout": 0.1,
    },
    "big": {
        "num_layers": 6,
        "hidden_dim": 1024,
        "intermediate_dim": 4096,
        "num_heads": 16,
        "dropout": 0.3,
    },
}
"""Preset name -> `Transformer` keyword arguments: `base` and `big` are Table 3's rows."""
