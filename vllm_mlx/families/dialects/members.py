"""Arguments read member by member, for the literal dialects (``python``, ``gemma``)."""

from __future__ import annotations

import json
from json.encoder import encode_basestring  # json.dumps(s, ensure_ascii=False) for a str

from .base import Status, Step


class MemberStream:
    """Streams an object one member at a time: each ``key=value`` / ``key:value`` is held
    until the next top-level comma or the closing bracket, then released as JSON text.

    The call is reported with its first member, so a call that is malformed from the start
    stays content; one that fails later is cut off there, like a truncated JSON call, and
    the failed member's text (``unread``) goes back to content.
    """

    streams = False
    settles = None
    name = ""

    def __init__(self) -> None:
        self._raw: list[str] = []  # text of the member being read
        self._members = 0

    @property
    def unread(self) -> str:
        """Text consumed but not released as arguments."""
        return "".join(self._raw)

    def close(self) -> str:
        return "}" if self._members else ""

    def _member(self, text: str, start: int, end: int, last: bool, out: list[str]) -> bool:
        """Release the member ending at ``text[end]``; False if it is not one."""
        self._raw.append(text[start:end])
        source = "".join(self._raw)
        if not source.strip():
            if not (last and self._empty_close_ok()):
                return False
            out.append("}" if self._members else "{}")
        else:
            member = self._read(source)
            if member is None or len(member) != 1:
                return False
            ((key, value),) = member.items()
            body = encode_basestring(str(key)) + ": " + json.dumps(value, ensure_ascii=False)
            out.append(("{" if not self._members else ", ") + body + ("}" if last else ""))
            self._members += 1
        self._raw = []
        return True

    def _fail(self, text: str, start: int, at: int, out: list[str]) -> Step:
        self._raw.append(text[start:at])
        return "".join(out), at, Status.FAIL

    def _empty_close_ok(self) -> bool:
        return True

    def _read(self, source: str) -> dict | None:
        raise NotImplementedError
