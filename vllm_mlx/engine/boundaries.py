"""Where a chat prompt's messages end, in tokens: the offsets worth a prefix-cache checkpoint.

An agent's next turn resends this prompt's messages and appends to them, often with the
previous assistant turn rewritten; what it shares for certain is everything up to the end of
the last message, i.e. the prompt without its generation prompt (the tail).
"""

from __future__ import annotations

from ..protocols import Tokenizer


def history_end(tokenizer: Tokenizer, token_ids: list[int], tail: str) -> list[int]:
    """``[offset]`` of the last message's end when the tail is whole tokens, else ``[]``.

    Walks back from the end only as far as the tail's length, so it costs a few decodes
    whatever the prompt's length."""
    if not tail:
        return [len(token_ids)]
    for start in range(len(token_ids) - 1, 0, -1):
        text = tokenizer.decode(token_ids[start:])
        if len(text) >= len(tail):
            return [start] if text == tail else []
    return []
