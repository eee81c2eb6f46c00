"""Greedy search: pick the most probable token at every step (Section 6.1's special case).

The token-by-token loop here also serves sampling, which only changes how the next
token is chosen.
"""

from keras import ops

from keras_transformer.generation.ngram_blocking import block_repeated_ngrams
from keras_transformer.special_tokens import END_ID, PAD_ID, START_ID


def decode_token_by_token(step, batch_size, buffer_length, max_steps, select,
                          no_repeat_ngram_size=None, stop_when_running=None):
    """Extend each sequence with `select(log_probs, index)` until it emits `END_ID`.

    A static-shape `while_loop`: the token buffer `(B, buffer_length + 1)` starts with
    `START_ID` and is written with `ops.slice_update`; finished sequences get `PAD_ID`.
    The loop ends when every sequence has finished or after `max_steps` tokens.

    Args:
        step: a `DecoderStep` over `batch_size` sequences.
        batch_size: int. B.
        buffer_length: int. Static length of the output buffer; the loop stops there
            when it is below `max_steps`.
        max_steps: int or int32 scalar tensor. Most tokens per sequence.
        select: callable `(log_probs (B, V), index) -> int32 (B,)`.
        no_repeat_ngram_size: int or `None`. See `block_repeated_ngrams`.
        stop_when_running: int, int32 scalar tensor or `None`. Also stop the loop once
            at most this many sequences have not finished (see `beam_search`).

    Returns:
        A dict: `"token_ids"` int32 `(B, buffer_length)` without the start token,
        `"scores"` float32 `(B,)` (the summed log-probabilities of the chosen tokens)
        `"log_probs"` float32 `(B, buffer_length)` (one per token, 0 after the end)
        `"num_steps"` (decoder steps taken) and `"done"` bool `(B,)` (the sequence
        emitted `END_ID`).
    """
    tokens = ops.concatenate(
        [ops.full((batch_size, 1), START_ID, "int32"),
         ops.full((batch_size, buffer_length), PAD_ID, "int32")], axis=1)
    state = (
        ops.convert_to_tensor(0, "int32"),
        tokens,
        ops.zeros((batch_size,), "bool"),
        ops.zeros((batch_size,), "float32"),
        ops.zeros((batch_size, buffer_length), "float32"),
        step.cache,
    )

    steps_bound = ops.minimum(max_steps, buffer_length)

    def cond(index, tokens, finished, scores, log_probs, cache):
        running = ops.sum(ops.cast(ops.logical_not(finished), "int32"))
        if stop_when_running is None:
            return ops.logical_and(index < steps_bound, running > 0)
        return ops.logical_and(index < steps_bound, running > stop_when_running)

    def body(index, tokens, finished, scores, log_probs, cache):
        step_log_probs, cache = step(ops.take(tokens, index, axis=1), index, cache)
        step_log_probs = block_repeated_ngrams(step_log_probs, tokens, index,
                                               no_repeat_ngram_size)
        next_tokens = ops.where(finished, PAD_ID, ops.cast(select(step_log_probs, index), "int32"))
        token_log_probs = ops.take_along_axis(step_log_probs, next_tokens[:, None], axis=1)[:, 0]
        token_log_probs = ops.where(finished, 0.0, token_log_probs)
        tokens = ops.slice_update(tokens, [0, index + 1], next_tokens[:, None])
        log_probs = ops.slice_update(log_probs, [0, index], token_log_probs[:, None])
        finished = ops.logical_or(finished, ops.equal(next_tokens, END_ID))
        return index + 1, tokens, finished, scores + token_log_probs, log_probs, cache

    num_steps, tokens, finished, scores, log_probs, _ = ops.while_loop(cond, body, state)
    return {"token_ids": tokens[:, 1:], "scores": scores, "log_probs": log_probs,
            "num_steps": num_steps, "done": finished}


def greedy_search(step, batch_size, buffer_length, max_steps, no_repeat_ngram_size=None,
                  stop_when_running=None):
    """Greedy decoding with a `DecoderStep`; see `decode_token_by_token` for the output.

    Example:
    >>> from keras_transformer.generation.step import DecoderStep
    >>> from keras_transformer.models import build_transformer
    >>> model = build_transformer("tiny", vocabulary_size=20, num_layers=1)
    >>> step = DecoderStep(model, np.array([[5, 6, 3]], "int32"), cache_length=4)
    >>> out = greedy_search(step, batch_size=1, buffer_length=4, max_steps=4)
    >>> tuple(out["token_ids"].shape)
    (1, 4)
    """
    return decode_token_by_token(
        step, batch_size, buffer_length, max_steps,
        lambda log_probs, index: ops.argmax(log_probs, axis=-1), no_repeat_ngram_size,
        stop_when_running,
    )
