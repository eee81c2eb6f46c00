"""The package's two "lowest" values, in one place.

- `FLOAT32_LOWEST` (about -3.4e38) replaces logits that must get zero probability before
  a softmax or a top-k (attention masks, top-k / top-p filtering, ended beams): the
  softmax of the row is exact, and a row with every logit masked is handled where it
  arises (attention zeroes its weights).
- `LOWEST_SCORE` (-1e9) is a finite "never" for scores that are added, divided and
  compared afterwards (banned tokens' logits, empty beam slots): far below any real
  log-probability, yet sums and divisions of it never overflow to -inf or NaN. A score
  above `LOWEST_SCORE / 2` is a real one.

Example:
>>> FLOAT32_LOWEST < LOWEST_SCORE < -1e8
True
"""

FLOAT32_LOWEST = -3.4e38
LOWEST_SCORE = -1e9
