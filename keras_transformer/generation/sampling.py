"""Sampling: draw each token from the model's distribution, with temperature, top-k, top-p.

A draw is the Gumbel-max trick, `argmax(logits + Gumbel noise)`, on uniform noise
from a counter-based hash of `(seed, step, row, token)` written in integer
`keras.ops`. It is stateless, so a given seed gives the same samples eagerly and
under XLA. (`keras.random` takes only Python or `SeedGenerator` seeds, which cannot
vary per step inside a compiled loop, and TensorFlow's stateless Philox and
categorical kernels draw differently under XLA than eagerly.)
"""

from keras import ops

from keras_transformer.generation.greedy import decode_token_by_token
from keras_transformer.numerics import FLOAT32_LOWEST


def _signed(value):
    """A 32-bit constant as the int32 with the same bits."""
    return value - (1 << 32) if value >= 1 << 31 else value


def _shift(x, bits):
    """Logical right shift of int32 bit patterns (as uint32 would shift)."""
    return ops.bitwise_and(ops.right_shift(x, bits), (1 << (32 - bits)) - 1)


def _mix(x):
    """A 32-bit integer hash (Wellons' "lowbias32") on int32 bit patterns.

    The arithmetic is int32, which wraps modulo 2**32 on every backend; uint32 does
    not exist everywhere (PyTorch promotes it to int64, which stops the wrapping).
    """
    x = ops.bitwise_xor(x, _shift(x, 16))
    x = ops.multiply(x, ops.cast(0x7FEB352D, "int32"))
    x = ops.bitwise_xor(x, _shift(x, 15))
    x = ops.multiply(x, ops.cast(_signed(0x846CA68B), "int32"))
    return ops.bitwise_xor(x, _shift(x, 16))


def stateless_uniform(shape, seed, step):
    """Uniform float32 noise in (0, 1) of static 2-D `shape`, a function of `(seed, step)`.

    The same `(seed, step)` gives the same numbers on every backend, eagerly or compiled.

    Example:
    >>> a = np.asarray(stateless_uniform((2, 3), seed=1, step=0))
    >>> b = np.asarray(stateless_uniform((2, 3), seed=1, step=0))
    >>> bool((a == b).all() and (a > 0).all() and (a < 1).all())
    True
    """
    golden = ops.cast(_signed(0x9E3779B9), "int32")
    key = _mix(ops.bitwise_xor(_mix(ops.cast(seed, "int32")),
                               ops.multiply(ops.cast(step, "int32") + 1, golden)))
    counter = ops.cast(ops.reshape(ops.arange(shape[0] * shape[1]), shape), "int32")
    bits = _mix(ops.bitwise_xor(_mix(counter + key), key))
    return (ops.cast(_shift(bits, 8), "float32") + 0.5) / 16777216.0  # / 2**24


def filter_logits(logits, temperature=1.0, top_k=None, top_p=None):
    """Scale `logits` `(B, V)` by `1 / temperature` and mask all but the top-k / top-p.

    Top-p (nucleus sampling, Holtzman et al., 2020) keeps the smallest set of most
    probable tokens whose probabilities sum to at least `top_p`. Masked logits become
    the lowest float32 value.

    Example:
    >>> logits = np.log(np.array([[0.5, 0.3, 0.2]], "float32"))
    >>> (np.asarray(filter_logits(logits, top_k=2)) > -1e30).tolist()
    [[True, True, False]]
    >>> (np.asarray(filter_logits(logits, top_p=0.6)) > -1e30).tolist()
    [[True, True, False]]
    """
    logits = ops.cast(logits, "float32") / temperature
    lowest = ops.cast(FLOAT32_LOWEST, "float32")
    if top_k is not None:
        kth_best = ops.top_k(logits, top_k)[0][:, -1:]
        logits = ops.where(logits < kth_best, lowest, logits)
    if top_p is not None and top_p < 1.0:
        sorted_logits = ops.flip(ops.sort(logits, axis=-1), axis=-1)
        probs = ops.softmax(sorted_logits, axis=-1)
        mass_before = ops.cumsum(probs, axis=-1) - probs
        kept = ops.where(mass_before < top_p, sorted_logits, ops.cast(-FLOAT32_LOWEST, "float32"))
        threshold = ops.min(kept, axis=-1, keepdims=True)
        logits = ops.where(logits < threshold, lowest, logits)
    return logits


def sample(step, batch_size, buffer_length, max_steps, seed, temperature=1.0, top_k=None,
           top_p=None, no_repeat_ngram_size=None):
    """Sample with a `DecoderStep`; output as `decode_token_by_token` (model log-probs).

    Args:
        seed: int or int32 scalar tensor. The same seed gives the same tokens (the
            noise also depends on each sentence's row in the batch).
        temperature: float > 0. The logits are divided by it.
        top_k: int or `None`. Keep only the `top_k` most probable tokens.
        top_p: float in (0, 1] or `None`. Keep only the nucleus holding `top_p`.
        no_repeat_ngram_size: int or `None`. See `block_repeated_ngrams`.

    Example:
    >>> from keras_transformer.generation.step import DecoderStep
    >>> from keras_transformer.models import build_transformer
    >>> model = build_transformer("tiny", vocabulary_size=20, num_layers=1)
    >>> ids = np.array([[5, 6, 3]], "int32")
    >>> first = sample(DecoderStep(model, ids, 4), 1, 4, 4, seed=7)["token_ids"]
    >>> again = sample(DecoderStep(model, ids, 4), 1, 4, 4, seed=7)["token_ids"]
    >>> bool(np.all(np.asarray(first) == np.asarray(again)))
    True
    """
    def select(log_probs, index):
        logits = filter_logits(log_probs, temperature, top_k, top_p)
        uniform = stateless_uniform((batch_size, log_probs.shape[-1]), seed, index)
        return ops.argmax(logits - ops.log(-ops.log(uniform)), axis=-1)

    return decode_token_by_token(step, batch_size, buffer_length, max_steps, select,
                                 no_repeat_ngram_size)
