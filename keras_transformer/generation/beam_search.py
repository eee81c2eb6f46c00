"""Beam search with the GNMT length penalty (Section 6.1 of Vaswani et al., 2017).

"We used beam search with a beam size of 4 and length penalty alpha = 0.6"; the
penalty is that of Wu et al. (2016): hypotheses are ranked by
`log P(Y | X) / lp(Y)` with `lp(Y) = ((5 + |Y|) / 6) ** alpha`, where `|Y|` counts
the output tokens including the end token.

Each step expands the `K` live hypotheses of every sentence and takes the `2K` best
continuations. End tokens among the first `K` of them join the finished hypotheses,
kept apart from the live ones; the best `K` continuations without an end token
become the new live hypotheses. A sentence is done once it has `K` finished
hypotheses (every beam has finished), or once no live hypothesis can beat the best
finished one any more: log-probabilities only fall, so a live hypothesis can at most
reach `log P / lp(max_length)`. With `K = 1` this is exactly greedy search.

`length_penalty="average"` ranks by `log P / |Y| ** alpha` instead: Hugging Face's
rule (its `length_penalty` is our `alpha`, 1.0 by default there), which imported
OPUS-MT models were tuned with. With it, this search gives the tokens of Hugging
Face's `generate(num_beams=K, early_stopping=True)`: both stop a sentence once it has
`K` finished hypotheses, and the bound above only ends a sentence whose best finished
hypothesis no later one can beat.
"""

from typing import Any, NamedTuple

from keras import ops

from keras_transformer.generation.ngram_blocking import block_repeated_ngrams
from keras_transformer.numerics import FLOAT32_LOWEST, LOWEST_SCORE
from keras_transformer.special_tokens import END_ID, PAD_ID, START_ID
from keras_transformer.validation import check_choice, check_positive_int


class BeamState(NamedTuple):
    """The beam search's loop state (B sentences, K beams, W = buffer length + 1)."""

    index: Any  # int32 scalar: the decoder step, the position of the input token
    live_tokens: Any  # int32 (B, K, W): running hypotheses, the start token at 0
    live_log_probs: Any  # float32 (B, K): their log P (LOWEST_SCORE for empty slots)
    live_length: Any  # int32 (B,): the step at which a sentence was done
    finished_tokens: Any  # int32 (B, K, W): the best hypotheses that ended
    finished_scores: Any  # float32 (B, K): their length-penalized scores, best first
    done: Any  # bool (B,): the sentence's search is over
    cache: Any  # the `DecoderStep`'s key/value cache, rows `b * K + k`


LENGTH_PENALTIES = ("gnmt", "average")


def check_beam_options(vocabulary_size, beam_size, alpha, rule="gnmt"):
    """Raise a `ValueError` naming the argument unless the beam options are usable."""
    check_choice("length_penalty", rule, LENGTH_PENALTIES)
    check_positive_int("beam_size", beam_size)
    if 2 * beam_size > vocabulary_size:
        raise ValueError(
            f"`beam_size` ({beam_size}) must be at most half the vocabulary size "
            f"({vocabulary_size}). Received: beam_size={beam_size}"
        )
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or alpha < 0:
        raise ValueError(f"`alpha` must be a number >= 0. Received: alpha={alpha!r}")


def length_penalty(length, alpha=0.6):
    """GNMT's `lp(Y) = ((5 + |Y|) / 6) ** alpha` (Wu et al., 2016, Section 7).

    Example:
    >>> round(float(length_penalty(1, alpha=0.6)), 6)
    1.0
    >>> round(float(length_penalty(7, alpha=0.6)), 4)
    1.5157
    """
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


def penalty(length, alpha=0.6, rule="gnmt"):
    """The divisor of a hypothesis' log-probability: GNMT's `length_penalty`, or
    `|Y| ** alpha` for `rule="average"` (Hugging Face's).

    Example:
    >>> round(float(penalty(4, alpha=1.0, rule="average")), 6)
    4.0
    """
    if rule == "average":
        return ops.power(ops.cast(length, "float32"), alpha)
    return length_penalty(length, alpha)


def beam_search(step, batch_size, buffer_length, max_steps, beam_size=4, alpha=0.6,
                no_repeat_ngram_size=None, stop_when_running=None, length_penalty="gnmt"):
    """Beam search with a `DecoderStep` built with `num_beams=beam_size`.

    Args:
        step: a `DecoderStep` over `batch_size * beam_size` rows (`b * K + k`).
        batch_size: int. B.
        buffer_length: int. Static length of the output buffers. The loop stops there
            when it is below `max_steps` (sentences not done are then unfinished).
        max_steps: int or int32 scalar tensor. Most tokens per hypothesis (it also
            bounds what a live hypothesis can still score).
        beam_size: int. K. Defaults to `4` (the paper).
        alpha: float >= 0. Length penalty exponent. Defaults to `0.6` (the paper).
        length_penalty: `"gnmt"` (the paper's, the default) or `"average"` (Hugging
            Face's `log P / |Y| ** alpha`).
        no_repeat_ngram_size: int or `None`. See `block_repeated_ngrams`.
        stop_when_running: int, int32 scalar tensor or `None`. Also stop the loop once
            at most this many sentences are still being searched (`generate` then
            searches those again in a smaller batch). `None`: only `max_steps` and
            the end of every search stop it.

    Returns:
        A dict: `"nbest_token_ids"` int32 `(B, K, buffer_length)` (without the start
        token, `PAD_ID` after the end token), `"nbest_scores"` float32 `(B, K)`
        (length-penalized log-probabilities, best first), `"token_ids"` and
        `"scores"` (the best hypothesis), `"num_steps"` (decoder steps taken) and
        `"done"` bool `(B,)` (the sentence's search ended before the loop did).
        A sentence that reaches `max_steps` without `K` finished hypotheses fills
        the list with its best unfinished ones (which have no end token).

    Example:
    >>> from keras_transformer.generation.step import DecoderStep
    >>> from keras_transformer.models import build_transformer
    >>> model = build_transformer("tiny", vocabulary_size=20, num_layers=1)
    >>> step = DecoderStep(model, np.array([[5, 6, 3]], "int32"), 5, num_beams=2)
    >>> out = beam_search(step, batch_size=1, buffer_length=5, max_steps=5, beam_size=2)
    >>> tuple(out["nbest_token_ids"].shape), tuple(out["nbest_scores"].shape)
    ((1, 2, 5), (1, 2))
    """
    k = beam_size
    width = buffer_length + 1  # position 0 holds the start token
    rows_of_batch = ops.arange(batch_size, dtype="int32")[:, None] * k  # (B, 1)

    def gather(values, indices):
        """`values` `(B, K', ...)`, `indices` `(B, M)` into axis 1 -> `(B, M, ...)`."""
        kk = ops.shape(values)[1]
        flat = ops.reshape(values, (-1,) + tuple(values.shape[2:]))
        rows = ops.arange(batch_size, dtype="int32")[:, None] * kk + ops.cast(indices, "int32")
        return ops.take(flat, rows, axis=0)

    start_tokens = ops.concatenate(
        [ops.full((batch_size, k, 1), START_ID, "int32"),
         ops.full((batch_size, k, buffer_length), PAD_ID, "int32")], axis=2)
    # Only the first live beam is real at the start; the others would duplicate it.
    first_live = ops.where(ops.arange(k) == 0, 0.0, LOWEST_SCORE)
    initial = BeamState(
        index=ops.convert_to_tensor(0, "int32"),
        live_tokens=start_tokens,
        live_log_probs=ops.tile(ops.cast(first_live, "float32")[None], (batch_size, 1)),
        live_length=ops.zeros((batch_size,), "int32"),
        finished_tokens=ops.full((batch_size, k, width), PAD_ID, "int32"),
        finished_scores=ops.full((batch_size, k), LOWEST_SCORE, "float32"),
        done=ops.zeros((batch_size,), "bool"),
        cache=step.cache,
    )
    rule = length_penalty
    max_penalty = penalty(max_steps, alpha, rule)
    steps_bound = ops.minimum(max_steps, buffer_length)

    def cond(state):
        running = ops.sum(ops.cast(ops.logical_not(state.done), "int32"))
        if stop_when_running is None:
            return ops.logical_and(state.index < steps_bound, running > 0)
        return ops.logical_and(state.index < steps_bound, running > stop_when_running)

    def body(state):
        index, done = state.index, state.done
        inputs = ops.reshape(ops.take(state.live_tokens, index, axis=2), (-1,))
        logits, cache = step.logits(inputs, index, state.cache)  # (B * K, V)
        normalizer = ops.logsumexp(logits, axis=-1, keepdims=True)  # log-probs = logits - it
        logits = block_repeated_ngrams(
            logits, ops.reshape(state.live_tokens, (batch_size * k, width)), index,
            no_repeat_ngram_size)
        # The 2K best of a sentence's K * V continuations are among the 2K best of each
        # beam: rank each beam's V tokens first, then its K * 2K survivors (the same
        # choice as one top-k over K * V, ties included, on far fewer values).
        row_logits, row_tokens = ops.top_k(logits, 2 * k)  # (B * K, 2K)
        row_log_probs = ops.reshape(row_logits - normalizer, (batch_size, k, 2 * k))
        candidates = ops.reshape(state.live_log_probs[:, :, None] + row_log_probs,
                                 (batch_size, -1))
        top_log_probs, top_indices = ops.top_k(candidates, 2 * k)  # (B, 2K)
        top_beams = top_indices // (2 * k)
        top_tokens = ops.cast(ops.take_along_axis(
            ops.reshape(row_tokens, (batch_size, -1)), top_indices, axis=1), "int32")
        top_sequences = ops.slice_update(
            gather(state.live_tokens, top_beams), [0, 0, index + 1], top_tokens[:, :, None]
        )
        is_end = ops.equal(top_tokens, END_ID)

        # End tokens among the first K continuations finish; keep the K best finished.
        length = index + 1
        finishes = is_end & (ops.arange(2 * k) < k)[None] & ops.logical_not(done)[:, None]
        new_scores = ops.where(finishes, top_log_probs / penalty(length, alpha, rule),
                               LOWEST_SCORE)
        pool_scores = ops.concatenate([state.finished_scores, new_scores], axis=1)
        pool_tokens = ops.concatenate([state.finished_tokens, top_sequences], axis=1)
        finished_scores, best = ops.top_k(pool_scores, k)
        finished_tokens = gather(pool_tokens, best)

        # The K best continuations without an end token live on (frozen once done).
        _, live = ops.top_k(ops.where(is_end, FLOAT32_LOWEST, top_log_probs), k)
        keep = done[:, None]
        live_log_probs = ops.where(keep, state.live_log_probs, ops.take_along_axis(
            top_log_probs, live, axis=1))
        live_tokens = ops.where(keep[:, :, None], state.live_tokens,
                                gather(top_sequences, live))
        parent_rows = rows_of_batch + ops.cast(ops.take_along_axis(top_beams, live, axis=1),
                                               "int32")
        cache = step.reorder(cache, ops.reshape(parent_rows, (-1,)))

        # Done: K finished, or no live hypothesis can still beat the best finished one.
        num_finished = ops.sum(ops.cast(finished_scores > LOWEST_SCORE / 2, "int32"), axis=1)
        bound = ops.max(live_log_probs, axis=1) / max_penalty
        newly_done = ops.logical_and(
            ops.logical_not(done),
            ops.logical_or(num_finished >= k, finished_scores[:, 0] >= bound),
        )
        return (BeamState(
            index=index + 1, live_tokens=live_tokens, live_log_probs=live_log_probs,
            live_length=ops.where(newly_done, length, state.live_length),
            finished_tokens=finished_tokens, finished_scores=finished_scores,
            done=ops.logical_or(done, newly_done), cache=cache),)

    (state,) = ops.while_loop(cond, body, (initial,))
    num_steps, done = state.index, state.done
    live_log_probs, finished_scores = state.live_log_probs, state.finished_scores

    # Fill the n-best list: sentences still running take any live hypothesis; done ones
    # only fill empty slots (their live hypotheses cannot beat the best finished one).
    live_length = ops.where(done, state.live_length, num_steps)
    live_scores = live_log_probs / penalty(live_length, alpha, rule)[:, None]
    num_finished = ops.sum(ops.cast(finished_scores > LOWEST_SCORE / 2, "int32"), axis=1)
    fills = ops.logical_or(ops.logical_not(done)[:, None],
                           ops.arange(k)[None] < (k - num_finished)[:, None])
    live_scores = ops.where(fills & (live_log_probs > LOWEST_SCORE / 2), live_scores,
                            LOWEST_SCORE)
    nbest_scores, best = ops.top_k(ops.concatenate([finished_scores, live_scores], 1), k)
    nbest_tokens = gather(ops.concatenate([state.finished_tokens, state.live_tokens], 1),
                          best)[:, :, 1:]
    return {
        "token_ids": nbest_tokens[:, 0],
        "scores": nbest_scores[:, 0],
        "nbest_token_ids": nbest_tokens,
        "nbest_scores": nbest_scores,
        "num_steps": num_steps,
        "done": done,
    }
