"""The fixed token ids every part of the package agrees on.

The tokenizer reserves them, the model treats `PAD_ID` as padding, and generation
starts from `START_ID` and stops at `END_ID`.
"""

PAD_ID = 0
"""Padding: masked out of attention, the loss and the metrics."""
UNK_ID = 1
"""A piece the tokenizer does not know."""
START_ID = 2
"""The first decoder input; generation starts from it."""
END_ID = 3
"""Ends every source and every output; generation stops at it."""
