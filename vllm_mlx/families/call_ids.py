"""Tool-call ids in the shape a family's template expects.

Most templates print a call's id as given, but some enforce a shape: Mistral's raise unless an
id is 9 alphanumeric characters; Kimi prints the id where the model writes ``functions.NAME:N``.
The server generates ids in the family's shape, and a client's own ids are mapped onto it
deterministically (the same client id always maps to the same id, in the call and in its
result, on every turn), while ids already in the shape stay as they are.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import string
from typing import Literal

IdStyle = Literal["openai", "alnum9", "kimi"]

_ALNUM = string.ascii_letters + string.digits
_ALNUM9 = re.compile(r"[A-Za-z0-9]{9}")
_KIMI = re.compile(r"functions\.[\w.\-]+:\d+")
# Ids must be unique, not secret (one urandom-seeded generator, reseeded in forked children).
_rng = random.Random()
os.register_at_fork(after_in_child=_rng.seed)


def accepts(style: IdStyle, call_id: str) -> bool:
    """Whether ``call_id`` already has the style's shape."""
    if style == "alnum9":
        return bool(_ALNUM9.fullmatch(call_id))
    if style == "kimi":
        return bool(_KIMI.fullmatch(call_id))
    return bool(call_id)


def new_id(style: IdStyle, name: str = "", index: int = 0) -> str:
    """A fresh id in the style (``openai``: ``call_`` + 24 hex characters)."""
    if style == "alnum9":
        return "".join(_rng.choice(_ALNUM) for _ in range(9))
    if style == "kimi":
        return f"functions.{name}:{index}"
    return f"call_{_rng.getrandbits(96):024x}"


def mapped_id(style: IdStyle, call_id: str, name: str = "", index: int = 0) -> str:
    """``call_id`` in the style: unchanged when it already fits, else derived from it (so the
    mapping is stable without any state)."""
    if accepts(style, call_id):
        return call_id
    if style == "alnum9":
        digest = int.from_bytes(hashlib.sha256(call_id.encode()).digest()[:8], "big")
        chars = []
        for _ in range(9):
            digest, rest = divmod(digest, len(_ALNUM))
            chars.append(_ALNUM[rest])
        return "".join(chars)
    if style == "kimi":
        return f"functions.{name}:{index}"
    return call_id or new_id(style)
