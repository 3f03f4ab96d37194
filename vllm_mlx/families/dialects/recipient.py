"""The ``recipient`` dialect: Functionary v3.2's ``>>>RECIPIENT\\n{json}`` calls.

The name is the message's recipient and the arguments one JSON object, except for the
recipient ``python``, whose message is raw code (read as ``{"code": ...}``). Writing and forcing
are the ``json`` dialect's (the code form is never forced).
"""

from __future__ import annotations

from json.encoder import encode_basestring
from typing import Any, ClassVar

from ..literal import Match, match_literal, match_name, partial_suffix, skip_space
from .base import ArgumentReader, Layout, Status, Step, expect_object
from .json_arguments import JsonArguments, JsonDialect

RAW_CODE_RECIPIENTS = ("python",)
_NEXT = ">>>"  # the next message's recipient marker ends raw code


class CodeOrObject:
    """A JSON object, or raw code up to the next recipient (``{"code": ...}``)."""

    settles = None
    unread = ""
    name = ""
    streams = True

    def __init__(self) -> None:
        self._json: JsonArguments | None = None
        self._code = False

    def quick(self, text: str) -> str | None:
        if self._json is not None:
            return self._json.quick(text)
        if self._code and ">" not in text and not text[-1:].isspace():
            return encode_basestring(text)[1:-1]
        return None

    def close(self) -> str:
        """The JSON object's own closing, or the code string's."""
        if self._json is not None:
            return self._json.close()
        return '"}' if self._code else ""

    def feed(self, text: str, final: bool) -> Step:
        if self._json is not None:
            return self._json.feed(text, final)
        out = ""
        if not self._code:
            at = skip_space(text, 0)
            if at == len(text) and not final:
                return "", 0, Status.MORE
            if text.startswith("{", at):
                self._json = JsonArguments()
                return self._json.feed(text, final)
            self._code, out = True, '{"code": "'
        end = text.find(_NEXT)
        if end >= 0 or final:
            body = text[: end if end >= 0 else len(text)]
            return out + encode_basestring(body.rstrip())[1:-1] + '"}', len(body), Status.DONE
        rest = text[: len(text) - partial_suffix(text, [_NEXT])]
        body = rest.rstrip()  # trailing whitespace waits: it is dropped before the end
        return out + encode_basestring(body)[1:-1], len(body), Status.MORE


class RecipientDialect(JsonDialect):
    """``NAME name_end {...}``, or raw code for the ``python`` recipient."""

    name: ClassVar[str] = "recipient"

    def reader(self, properties: dict[str, Any], named: bool = True) -> ArgumentReader:
        return CodeOrObject()

    def match_header(
        self, layout: Layout, text: str, pos: int, final: bool
    ) -> tuple[Match, int, str | None]:
        state, end = match_name(text, pos, final)
        if state is not Match.MATCH:
            return state, end, ""
        name = text[pos:end]
        state, end = match_literal(text, end, layout.name_end, final)
        if state is not Match.MATCH:
            return state, end, ""
        if name in RAW_CODE_RECIPIENTS:
            return Match.MATCH, end, name
        return expect_object(text, end, final, name)


RECIPIENT = RecipientDialect()
