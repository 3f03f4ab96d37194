"""Lexical guard for JSON output: no raw control characters in strings, bounded digit runs,
no exponent notation, no trailing commas.

Backends differ in what they let through: lm-format-enforcer accepts raw control characters
inside strings (invalid JSON), and neither backend bounds how long a number's digit run can
grow, so a model could pad ``1234567...`` until ``max_tokens``. The guard tracks the lexical
state of the JSON text per position (so rollbacks restore it) and narrows the backend's mask.
It works on each token's own text, which keeps every ASCII character exact even for
byte-level vocabularies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ..protocols import Tokenizer
from .masks import pack
from .tokenizer_cache import per_tokenizer, token_texts

MAX_DIGIT_RUN = 16


class Lexical(NamedTuple):
    """Lexical state after some JSON text."""

    in_string: bool = False
    escaped: bool = False
    digit_run: int = 0
    after_comma: bool = False  # last non-whitespace character outside strings was ","


def advance(state: Lexical, text: str) -> Lexical:
    """The lexical state after appending ``text``."""
    in_string, escaped, run, comma = state
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch in " \t\n\r":
            run = 0
            continue
        comma = ch == ","
        if ch == '"':
            in_string, run = True, 0
        elif ch.isdigit():
            run += 1
        else:
            run = 0
    return Lexical(in_string, escaped, run, comma)


def _has_raw_control_in_string(text: str, escaped: bool) -> bool:
    state = Lexical(in_string=True, escaped=escaped)
    for ch in text:
        if state.in_string and not state.escaped and ch < " ":
            return True
        state = advance(state, ch)
    return False


class GuardTables(NamedTuple):
    """Packed masks (see ``masks``) of the tokens each rule bans."""

    control_in_string: np.ndarray  # token would put a raw control char inside the open string
    control_after_escape: np.ndarray  # same, when the previous token ended with a backslash
    starts_with_digit_or_exponent: np.ndarray
    starts_with_exponent: np.ndarray
    closes_bracket: np.ndarray  # first non-whitespace character is "}" or "]"


@per_tokenizer("json_guard")
def guard_tables(tokenizer: Tokenizer) -> GuardTables:
    """Per-token lookup tables for the guard, packed (built once per tokenizer)."""
    texts = token_texts(tokenizer)
    digit = pack(np.array([bool(t) and t[0].isdigit() for t in texts], dtype=bool))
    exponent = pack(np.array([bool(t) and t[0] in "eE" for t in texts], dtype=bool))
    return GuardTables(
        pack(np.array([_has_raw_control_in_string(t, False) for t in texts], dtype=bool)),
        pack(np.array([_has_raw_control_in_string(t, True) for t in texts], dtype=bool)),
        digit | exponent,
        exponent,
        pack(np.array([t.lstrip(" \t\n\r")[:1] in ("}", "]") for t in texts], dtype=bool)),
    )


class JsonLexicalGuard:
    """Narrows a JSON constraint's mask; state is kept per position for exact rollback."""

    def __init__(self, tokenizer: Tokenizer, max_digit_run: int = MAX_DIGIT_RUN) -> None:
        self._tables = guard_tables(tokenizer)
        self._texts = token_texts(tokenizer)
        self._max_digit_run = max_digit_run
        self._states: list[Lexical] = [Lexical()]
        self._seen: list[int] = []

    def _sync(self, content: Sequence[int]) -> Lexical:
        keep = 0
        limit = min(len(self._seen), len(content))
        while keep < limit and self._seen[keep] == content[keep]:
            keep += 1
        del self._seen[keep:]
        del self._states[keep + 1 :]
        for token in content[keep:]:
            text = self._texts[token] if token < len(self._texts) else ""
            self._states.append(advance(self._states[-1], text))
            self._seen.append(token)
        return self._states[-1]

    def narrow(self, content: Sequence[int], allowed: np.ndarray) -> np.ndarray:
        """Packed ``allowed`` minus the tokens the guard bans after ``content`` (never
        emptied; returned unchanged, without work, when no rule applies)."""
        state = self._sync(content)
        if state.in_string:
            table = (
                self._tables.control_after_escape
                if state.escaped
                else self._tables.control_in_string
            )
            narrowed = allowed & ~table
        elif state.after_comma:
            # lm-format-enforcer accepts a trailing comma when only optional keys remain.
            narrowed = allowed & ~self._tables.closes_bracket
        elif state.digit_run >= self._max_digit_run:
            narrowed = allowed & ~self._tables.starts_with_digit_or_exponent
        elif state.digit_run:
            # Exponents are valid JSON, but lm-format-enforcer also lets them into integers.
            narrowed = allowed & ~self._tables.starts_with_exponent
        else:
            return allowed
        return narrowed if narrowed.any() else allowed
