"""Matching literal markers against text that may still be arriving.

A newline in a marker means "optional whitespace" here (see `families.formats`). Every
matcher answers MATCH (with the end position), PARTIAL (the text so far could still become a
match) or FAIL, so a stream can hold back exactly the text that is still undecided.
"""

from __future__ import annotations

import re
from enum import Enum
from functools import lru_cache

NAME_CHARS = re.compile(r"[\w.\-:/]+")
MAX_NAME = 256


class Match(Enum):
    MATCH = "match"
    PARTIAL = "partial"
    FAIL = "fail"


# Markers are special tokens: models (and detokenizers that put spaces between special
# tokens) write whitespace between them, e.g. ``[TOOL_CALLS] [`` or a newline after a
# section opener. A boundary is where a marker ends (``>``, ``]``) and another or an opening
# bracket begins (``<``, ``[``, ``{``); a literal that begins with one may follow whitespace.
_BOUNDARY = re.compile(r"(?<=[>\]])(?=[<\[{])")
_OPENS = "<[{"


@lru_cache(maxsize=512)
def literal_pieces(literal: str) -> tuple[str, ...]:
    """``literal`` split where optional whitespace may stand: at its newlines, at marker
    boundaries, and before it when it begins with a marker or bracket."""
    pieces = [p for line in literal.split("\n") for p in _BOUNDARY.split(line)]
    if literal[:1] in _OPENS:
        pieces.insert(0, "")
    # split("\n") keeps empty pieces for the newlines; `_BOUNDARY` splits need the same
    # whitespace skip, which match_literal applies between every two pieces
    return tuple(pieces)


def first_marker(literal: str) -> str:
    """The literal text up to its first point of optional whitespace."""
    return next((p for p in literal_pieces(literal) if p), "")


def match_literal(text: str, pos: int, literal: str, final: bool) -> tuple[Match, int]:
    """Match ``literal`` at ``text[pos:]``; whitespace is optional where `literal_pieces`
    splits it."""
    pieces = literal_pieces(literal)
    i = pos
    for n, piece in enumerate(pieces):
        if n > 0:
            while i < len(text) and text[i].isspace():
                i += 1
        if not piece:
            continue
        if i == len(text):
            return (Match.FAIL if final else Match.PARTIAL), i
        got = text[i : i + len(piece)]
        if not piece.startswith(got):
            return Match.FAIL, i
        if len(got) < len(piece):
            return (Match.FAIL if final else Match.PARTIAL), len(text)
        i += len(piece)
    return Match.MATCH, i


def skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def match_name(text: str, pos: int, final: bool) -> tuple[Match, int]:
    """A function name (word characters, ``.``, ``-``, ``:``, ``/``) that has ended."""
    m = NAME_CHARS.match(text, pos)
    if m is None:
        return (Match.PARTIAL if pos == len(text) and not final else Match.FAIL), pos
    if m.end() - pos > MAX_NAME:
        return Match.FAIL, pos
    if m.end() == len(text):  # the name may still continue, or was cut off
        return (Match.FAIL if final else Match.PARTIAL), m.end()
    return Match.MATCH, m.end()


def partial_suffix(text: str, markers: list[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of some marker."""
    best = 0
    for marker in markers:
        for k in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:k]):
                best = k
                break
    return best


def split_held(text: str, marker: str) -> tuple[str, str, bool]:
    """Split at the first ``marker``: (before, after, found). When not found, ``after`` is
    the held-back tail that could still begin the marker."""
    at = text.find(marker)
    if at >= 0:
        return text[:at], text[at + len(marker) :], True
    keep = partial_suffix(text, [marker])
    return text[: len(text) - keep], text[len(text) - keep :], False
