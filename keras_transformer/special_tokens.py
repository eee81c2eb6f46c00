"""The fixed token ids every part of the package agrees on.

The tokenizer reserves them, the model treats `PAD_ID` as padding, and generation
starts from `START_ID` and stops at `END_ID`.
"""

PAD_ID = 0
UNK_ID = 1
START_ID = 2
END_ID = 3
