"""Argument checks shared by the layers and the model builder.

Each raises a `ValueError` that names the argument and the received value.
"""


def check_positive_int(name, value, minimum=1):
    """Raise unless `value` is an integer of at least `minimum` (by default, > 0).

    Example:
    >>> check_positive_int("num_layers", 0)
    Traceback (most recent call last):
    ...
    ValueError: `num_layers` must be a positive integer. Received: num_layers=0
    >>> check_positive_int("max_length", 1, minimum=2)
    Traceback (most recent call last):
    ...
    ValueError: `max_length` must be an integer of at least 2. Received: max_length=1
    """
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        wanted = "a positive integer" if minimum == 1 else f"an integer of at least {minimum}"
        raise ValueError(f"`{name}` must be {wanted}. Received: {name}={value!r}")


def check_rate(name, value):
    """Raise unless `0 <= value < 1` (a dropout rate or label smoothing)."""
    if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be in [0, 1). Received: {name}={value!r}")


def check_divisible(hidden_dim, num_heads):
    """Raise unless `num_heads` divides `hidden_dim` (Section 3.2.2: d_k = d_model / h)."""
    if hidden_dim % num_heads:
        raise ValueError(
            f"`hidden_dim` ({hidden_dim}) must be divisible by `num_heads` ({num_heads}). "
            f"Received: hidden_dim={hidden_dim}, num_heads={num_heads}"
        )


def check_choice(name, value, choices):
    """Raise unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {sorted(choices)}. Received: {name}={value!r}")
