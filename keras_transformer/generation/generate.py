"""`generate`: encode once, then decode greedily, with beam search or by sampling.

The search runs in one `while_loop` over static shapes, so it compiles with XLA.
`jit_compile=True` compiles it the way of the running Keras backend, once per model
and configuration: `tf.function(jit_compile=True)` on TensorFlow, `jax.jit` on JAX
(the weights are arguments, so a model that keeps training is read afresh), and on
PyTorch the eager loop under `torch.inference_mode()` (PyTorch has no compiled
`while_loop`; the loop's Python overhead is one dispatch per step). The batch is
shaped for the search by `search_input` (the policy the SavedModel shares), which
bounds the number of compilations. `jit_compile=False` runs the same code eagerly,
for debugging.
"""

import contextlib
import functools
import weakref

import keras
import numpy as np

from keras_transformer.generation.beam_search import beam_search, check_beam_options
from keras_transformer.generation.greedy import greedy_search
from keras_transformer.generation.ngram_blocking import check_no_repeat_ngram_size
from keras_transformer.generation.sampling import sample
from keras_transformer.generation.search_input import (
    DEFAULT_MIN_LENGTH,
    FIRST_SEARCH_SLACK,
    HOST_OPS,
    MAX_LENGTH_OFFSET,
    longest_output,
    max_or_zero,
    output_limit,
    pad_sources,
    search_buffer_length,
    source_lengths,
)
from keras_transformer.generation.step import DecoderStep, check_banned_ids
from keras_transformer.validation import check_choice, check_positive_int

METHODS = ("greedy", "beam", "sample")

_compiled = weakref.WeakKeyDictionary()  # model -> {configuration: tf.function}


def default_max_length(encoder_token_ids, offset=MAX_LENGTH_OFFSET):
    """The paper's output length limit: the longest non-pad input of the batch + `offset`.

    Example:
    >>> default_max_length(np.array([[5, 6, 3, 0], [7, 3, 0, 0]]))
    53
    """
    lengths = source_lengths(np.asarray(encoder_token_ids), ops=HOST_OPS)
    return int(max_or_zero(lengths, ops=HOST_OPS)) + offset


def check_max_length_offset(max_length_offset):
    """Raise a `ValueError` naming the argument unless it is an int >= 0."""
    if not isinstance(max_length_offset, int) or max_length_offset < 0:
        raise ValueError(
            "`max_length_offset` must be an int >= 0. "
            f"Received: max_length_offset={max_length_offset!r}"
        )


def check_min_length(min_length):
    """Raise a `ValueError` naming the argument unless it is an int >= 0."""
    if (isinstance(min_length, bool) or not isinstance(min_length, (int, np.integer))
            or min_length < 0):
        raise ValueError(
            "`min_length` must be an int >= 0 (0 allows an empty output). "
            f"Received: min_length={min_length!r}"
        )


def _check_arguments(model, method, max_length, beam_size, alpha, temperature, top_k, top_p,
                     seed, length_penalty="gnmt", force_end=False):
    check_choice("method", method, METHODS)
    if max_length is not None:
        check_positive_int("max_length", max_length)
    check_beam_options(model.vocabulary_size, beam_size, alpha, length_penalty)
    if not isinstance(force_end, (bool, np.bool_)):
        raise ValueError(f"`force_end` must be True or False. Received: {force_end!r}")
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not (
        temperature > 0
    ):
        raise ValueError(
            f"`temperature` must be a number > 0 (use `method='greedy'` for temperature 0). "
            f"Received: temperature={temperature!r}"
        )
    if top_k is not None:
        check_positive_int("top_k", top_k)
        if top_k > model.vocabulary_size:
            raise ValueError(
                f"`top_k` must be at most the vocabulary size ({model.vocabulary_size}). "
                f"Received: top_k={top_k}"
            )
    if top_p is not None and (
        not isinstance(top_p, (int, float)) or isinstance(top_p, bool) or not 0 < top_p <= 1
    ):
        raise ValueError(f"`top_p` must be in (0, 1], or None. Received: top_p={top_p!r}")
    if seed is not None and (not isinstance(seed, (int, np.integer)) or isinstance(seed, bool)):
        raise ValueError(f"`seed` must be an int or None. Received: seed={seed!r}")


def _search_function(model, method, buffer_length, options, jit_compile):
    """The search over a padded batch, compiled once per model and configuration."""
    key = (method, buffer_length, tuple(sorted(options.items())), jit_compile)
    functions = _compiled.setdefault(model, {})
    if key in functions:
        return functions[key]

    search_options = dict(options)
    banned_ids = search_options.pop("banned_ids", ())
    force_end = search_options.pop("force_end", False)
    min_length = search_options.pop("min_length", 0)

    def search(encoder_token_ids, max_steps, seed, stop_when_running):
        batch_size = encoder_token_ids.shape[0]
        num_beams = options["beam_size"] if method == "beam" else 1
        step = DecoderStep(model, encoder_token_ids, buffer_length, num_beams,
                           banned_ids=banned_ids, end_at=max_steps if force_end else None,
                           min_length=min_length)
        if method == "beam":
            return beam_search(step, batch_size, buffer_length, max_steps, **search_options,
                               stop_when_running=stop_when_running)
        if method == "greedy":
            return greedy_search(step, batch_size, buffer_length, max_steps, **search_options,
                                 stop_when_running=stop_when_running)
        return sample(step, batch_size, buffer_length, max_steps, seed, **search_options)

    functions[key] = _compile(model, search) if jit_compile else search
    return functions[key]


def _compile(model, search):
    """`search(ids, max_steps, seed, stop_when_running)` compiled for the running backend."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        # One function per padded shape: each shape is its own XLA program anyway, and
        # one function traced for many shapes makes TensorFlow warn about retracing.
        # (TensorFlow counts traces per code object; a `partial` is counted alone.) Its
        # concrete function is called directly: `tf.function`'s own dispatch hashes the
        # arguments and every captured weight on each call, 0.7 ms of a 7 ms search.
        by_shape = {}

        def search_by_shape(encoder_token_ids, *args):
            key = (tuple(encoder_token_ids.shape), encoder_token_ids.dtype.name)
            if key not in by_shape:
                by_shape[key] = tf.function(
                    functools.partial(search), jit_compile=True, reduce_retracing=False
                ).get_concrete_function(encoder_token_ids, *args)
            return by_shape[key](encoder_token_ids, *args)

        search_by_shape.by_shape = by_shape
        return search_by_shape
    if backend == "jax":
        import jax

        def stateless_search(values, *args):
            mapping = list(zip(model.variables, values, strict=True))
            with keras.StatelessScope(state_mapping=mapping):
                return search(*args)

        compiled = jax.jit(stateless_search)

        def search_with_weights(*args):
            return compiled([v.value for v in model.variables], *args)

        search_with_weights.compiled = compiled
        return search_with_weights
    return search  # PyTorch: the eager loop, run without gradients by `generate`


def _no_gradients():
    """A context without gradient tracking for the eager search (PyTorch records them)."""
    if keras.backend.backend() == "torch":
        import torch

        return torch.inference_mode()
    return contextlib.nullcontext()


_OVER_THE_BUFFER = ("token_ids", "nbest_token_ids", "log_probs")


def _search_in_shrinking_batches(search_for, ids, model, limit, seed, shrink):
    """Search `ids` `(B, S)` with `search_for(buffer_length)`; when `shrink`, search the
    sentences left running, by a short first buffer or once at most a quarter of the
    batch runs, again in a smaller batch with the whole buffer, until all are done.

    Every search keeps the first batch's source width and output limit, so each
    sentence sees exactly the inputs it would have in one whole-batch search.
    """
    buffer_length = search_buffer_length(limit, model)
    if shrink:
        longest = int(max_or_zero(source_lengths(ids, ops=HOST_OPS), ops=HOST_OPS))
        first_buffer = search_buffer_length(min(limit, longest + FIRST_SEARCH_SLACK), model)
    pending = np.arange(ids.shape[0])
    result, num_steps, first = {}, 0, True
    while pending.size:
        buffer, first = (first_buffer if shrink and first else buffer_length), False
        stop_when_running = pending.size // 4 if shrink else 0
        outputs = search_for(buffer)(
            keras.ops.convert_to_tensor(pad_sources(ids[pending], model, ops=HOST_OPS)),
            keras.ops.convert_to_tensor(np.int32(limit)),
            keras.ops.convert_to_tensor(np.int32(seed)),
            keras.ops.convert_to_tensor(np.int32(stop_when_running)))
        outputs = {name: keras.ops.convert_to_numpy(value) for name, value in outputs.items()}
        steps = int(outputs.pop("num_steps"))
        num_steps = max(num_steps, steps)
        done = outputs.pop("done")[: pending.size] | (steps >= limit)
        for name, value in outputs.items():
            if name not in result:  # outputs over the buffer get the whole one
                width = (buffer_length,) if name in _OVER_THE_BUFFER else ()
                shape = (ids.shape[0],) + value.shape[1:len(value.shape) - len(width)] + width
                result[name] = np.zeros(shape, value.dtype)  # PAD_ID and log-prob 0
            columns = (Ellipsis, slice(value.shape[-1])) if value.ndim > 1 else ()
            result[name][(pending[done], *columns)] = value[: pending.size][done]
        pending = pending[~done]
    result["num_steps"] = num_steps
    return result


def generate(
    model,
    encoder_token_ids,
    method="greedy",
    *,
    max_length=None,
    max_length_offset=MAX_LENGTH_OFFSET,
    beam_size=4,
    alpha=0.6,
    length_penalty="gnmt",
    banned_ids=None,
    force_end=False,
    min_length=DEFAULT_MIN_LENGTH,
    temperature=1.0,
    top_k=None,
    top_p=None,
    seed=None,
    no_repeat_ngram_size=None,
    shrink_batch=True,
    jit_compile=True,
):
    """Translate a batch of token ids with a `Transformer` (Section 6.1).

    Every method stops each sequence at its end token and the loop once all have.
    `PAD_ID` and `START_ID` are never generated.

    Args:
        model: a `keras_transformer.Transformer`.
        encoder_token_ids: int array `(B, S)`: source pieces then `END_ID`, padded
            with `PAD_ID`.
        method: `"greedy"`, `"beam"` (beam search with the GNMT length penalty) or
            `"sample"`. Defaults to `"greedy"`.
        max_length: int or `None`. Explicit cap on the output length (end token
            included). By default the limit is the paper's input length + 50, where
            the input length is the batch's longest non-pad source.
        max_length_offset: int. The `+ 50` of the default limit.
        beam_size: int. Beam size K (beam search). Defaults to `4` (the paper).
        alpha: float. Length penalty exponent (beam search). Defaults to `0.6`.
        length_penalty: `"gnmt"` (the paper's `((5 + |Y|) / 6) ** alpha`, the default)
            or `"average"` (Hugging Face's `|Y| ** alpha`; beam search).
        banned_ids: list of ints or `None`. Ids never generated (every method), beside
            `PAD_ID` and `START_ID` (Hugging Face's single-token `bad_words_ids`).
        force_end: bool. The last token a search may take is always `END_ID`
            (Hugging Face's `forced_eos_token_id`). Defaults to `False`: an output that
            reaches the limit ends without one.
        min_length: int >= 0. Every method: the end token is never taken before this
            many output tokens, so a non-empty source never gets an empty translation
            (CTranslate2's `min_decoding_length` and fairseq's `--min-len`, both 1 by
            default). Defaults to `1`; `0` lets the end token come first (Hugging
            Face's default, which imported models keep).
        temperature: float > 0. Sampling: divide the logits by `temperature`.
            Defaults to `1.0`.
        top_k: int or `None`. Sampling: keep only the `top_k` most probable tokens.
        top_p: float in (0, 1] or `None`. Sampling: keep only the smallest set of most
            probable tokens holding `top_p` of the probability (nucleus sampling).
        seed: int or `None`. Sampling seed; the same seed gives the same output,
            eagerly or compiled. `None` draws one from NumPy's global generator (so
            `keras.utils.set_random_seed` makes it reproducible).
        no_repeat_ngram_size: int or `None`. Every method: never repeat an n-gram of
            this size in an output (fairseq's and Hugging Face's remedy for loops; not
            in the paper). `None` or `0` (the default): off.
        shrink_batch: bool. Greedy and beam search: once at most a quarter of the
            batch's sentences are still being searched, stop and search those again
            from the start in a smaller batch, so a sentence that runs to the length
            limit no longer keeps every finished row of its batch computing. Each
            sentence's search is independent of the others, so the tokens are the
            same (`True`, the default). Sampling always keeps its batch whole.
        jit_compile: bool. Run compiled for the backend (`True`, the default: XLA on
            TensorFlow and JAX, the no-gradient loop on PyTorch) or eagerly.

    Returns:
        A dict of NumPy arrays: `"token_ids"` int32 `(B, L)` (the best output, no start
        token, ending with `END_ID` when one was produced, `PAD_ID` after it; `L` is
        the longest output), `"scores"` float32 `(B,)` (its log-probability,
        length-penalized for beam search), for greedy and sampling `"log_probs"`
        `(B, L)` per token, for beam search `"nbest_token_ids"` `(B, K, L)` and
        `"nbest_scores"` `(B, K)` (best first), and `"max_length"` (the limit used).

    Example:
    >>> from keras_transformer.models import build_transformer
    >>> model = build_transformer("tiny", vocabulary_size=30)
    >>> out = generate(model, np.array([[5, 6, 7, 3]]), method="beam", max_length=6,
    ...                jit_compile=False)
    >>> out["token_ids"].dtype, out["token_ids"].shape[1] <= 6, out["nbest_scores"].shape
    (dtype('int32'), True, (1, 4))
    """
    _check_arguments(model, method, max_length, beam_size, alpha, temperature, top_k, top_p,
                     seed, length_penalty, force_end)
    banned_ids = check_banned_ids(banned_ids, model.vocabulary_size)
    check_max_length_offset(max_length_offset)
    check_min_length(min_length)
    check_no_repeat_ngram_size(no_repeat_ngram_size)
    if not isinstance(shrink_batch, (bool, np.bool_)):
        raise ValueError(f"`shrink_batch` must be True or False. Received: {shrink_batch!r}")
    ids = keras.ops.convert_to_numpy(encoder_token_ids)
    if ids.ndim != 2:
        raise ValueError(
            "`encoder_token_ids` must have rank 2, (batch, source length); wrap a single "
            f"sentence as `[ids]`. Received: encoder_token_ids.shape={ids.shape}"
        )
    if not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(
            f"`encoder_token_ids` must hold integer ids. Received: dtype={ids.dtype}"
        )
    batch_size, source_length = ids.shape
    if batch_size == 0:
        raise ValueError("`encoder_token_ids` must hold at least one sequence. Received none.")

    limit = int(output_limit(source_lengths(ids, ops=HOST_OPS), max_length, model,
                             max_length_offset, ops=HOST_OPS))

    if method == "beam":
        options = {"beam_size": beam_size, "alpha": float(alpha),
                   "length_penalty": length_penalty}
    elif method == "sample":
        options = {"temperature": float(temperature), "top_k": top_k, "top_p": top_p}
    else:
        options = {}
    if no_repeat_ngram_size:
        options["no_repeat_ngram_size"] = no_repeat_ngram_size
    if banned_ids:
        options["banned_ids"] = banned_ids
    if force_end:
        options["force_end"] = True
    if min_length:
        options["min_length"] = int(min_length)
    if seed is None:
        seed = int(np.random.randint(0, 2**31 - 1))
    def search_for(buffer_length):
        return _search_function(model, method, buffer_length, options, jit_compile)

    with _no_gradients():
        result = _search_in_shrinking_batches(
            search_for, ids, model, limit, seed % 2**31,
            shrink_batch and method != "sample")
    tokens = result["nbest_token_ids"] if method == "beam" else result["token_ids"]
    longest = int(longest_output(tokens, ops=HOST_OPS))
    for name in ("token_ids", "nbest_token_ids", "log_probs"):
        if name in result:
            result[name] = result[name][..., :longest]
    result["token_ids"] = result["token_ids"].astype("int32")
    result["scores"] = result["scores"].astype("float32")
    result["num_steps"] = int(result["num_steps"])
    result["max_length"] = limit
    return result
