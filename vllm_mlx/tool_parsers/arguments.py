"""Incremental readers for a tool call's arguments, one per argument dialect.

Each reader is fed the undecided text and answers ``(json_text, consumed, status)``:
``json_text`` is argument JSON that is now final, ``consumed`` how many characters it used
up (the rest is fed again next time), ``status`` whether the arguments are complete.
JSON and XML readers release text as it arrives; Python and gemma4 readers release each
member once its value is complete (see `_MemberStream`).
"""

from __future__ import annotations

import ast
import json
import re
from enum import Enum
from json.encoder import encode_basestring  # json.dumps(s, ensure_ascii=False) for a str

from vllm_mlx.chat.formats import GEMMA_QUOTE, XmlParameters
from vllm_mlx.tool_parsers.literal import MAX_NAME, Match, match_literal, partial_suffix, skip_space
from vllm_mlx.tool_parsers.value_types import declared_types, typed_value


class Status(Enum):
    MORE = "more"
    DONE = "done"
    FAIL = "fail"


Step = tuple[str, int, Status]
_STRING_BODY = re.compile(r'[^"\\]+')
_PY_SYNTAX = re.compile(r"[\'\"()\[\]{},]")  # what `PythonArguments.feed` reacts to
_GEMMA_SYNTAX = re.compile(r"[{}\[\],]")  # ... and `GemmaArguments.feed` (with `<`)
_CLOSERS = {"}": "{", "]": "["}


class JsonArguments:
    """Streams a JSON object verbatim; a number or literal is held until it ends."""

    streams = True
    settles = None  # held text (a number or literal) may end on any character
    unread = ""  # everything consumed is released

    def __init__(self) -> None:
        self._stack: list[str] = []
        self._in_string = False
        self._escape = False

    def quick(self, text: str) -> str | None:
        """The JSON text of a feed that neither ends the object nor holds a literal back
        (the reader is left as it was otherwise)."""
        if self._in_string and not self._escape and '"' not in text and "\\" not in text:
            return text  # inside a string that neither ends nor escapes
        saved = self._stack[:], self._in_string, self._escape
        piece, used, status = self.feed(text, False)
        if status is Status.MORE and used == len(text):
            return piece
        self._stack, self._in_string, self._escape = saved
        return None

    def feed(self, text: str, final: bool) -> Step:
        i = start = 0
        if not self._stack:
            i = start = skip_space(text, 0)
            if i == len(text):
                return "", i, Status.MORE
            if text[i] != "{":
                return "", i, Status.FAIL
        literal_at = -1
        n = len(text)
        while i < n:
            c = text[i]
            if self._in_string:
                if self._escape:
                    self._escape = False
                elif c == "\\":
                    self._escape = True
                elif c == '"':
                    self._in_string = False
                else:
                    m = _STRING_BODY.match(text, i)
                    i = m.end() if m else i + 1
                    continue
            elif c == '"':
                literal_at = -1
                self._in_string = True
            elif c in "{[":
                literal_at = -1
                self._stack.append(c)
            elif c in "}]":
                literal_at = -1
                if not self._stack or self._stack.pop() != _CLOSERS[c]:
                    return text[start:i], i, Status.FAIL
                if not self._stack:
                    return text[start : i + 1], i + 1, Status.DONE
            elif c in " \t\r\n,:":
                literal_at = -1
            elif literal_at < 0:
                literal_at = i
            i += 1
        end = literal_at if literal_at >= 0 and not final else n
        return text[start:end], end, Status.MORE


class NameLastObject:
    """A ``json_named`` call written with its arguments before its name: the whole object is
    held until it closes, then read (it stays content unless it names a function)."""

    streams = False
    settles = None
    unread = ""  # reported only once the whole object is read

    def __init__(self, arguments_keys: tuple[str, ...]) -> None:
        self._scan = JsonArguments()
        self._raw: list[str] = []
        self._keys = arguments_keys
        self.name = ""

    def quick(self, text: str) -> str | None:
        if self._scan.quick(text) is None:
            return None
        self._raw.append(text)
        return ""

    def feed(self, text: str, final: bool) -> Step:
        _, used, status = self._scan.feed(text, final)
        self._raw.append(text[:used])
        if status is not Status.DONE:
            return "", used, status
        try:
            obj = json.loads("".join(self._raw))
        except ValueError:
            return "", used, Status.FAIL
        name = obj.get("name")
        args = next((obj[k] for k in self._keys if k in obj), None)
        if not isinstance(name, str) or not name or not isinstance(args, dict):
            return "", used, Status.FAIL
        self.name = name
        return json.dumps(args, ensure_ascii=False), used, Status.DONE


class _XmlPhase(Enum):
    KEY_OR_END = "key_or_end"
    KEY = "key"
    VALUE = "value"


class XmlArguments:
    """Reads XML-style parameters and streams them as a JSON object.

    A parameter declared ``string`` (or undeclared) streams as a JSON string as it arrives;
    other declared types are held until the value ends, then converted (see `value_types`).
    One newline right inside the value's tags is layout, not value.
    """

    streams = True
    unread = ""  # (a held typed value of a cut-off call is not content)

    def __init__(self, params: XmlParameters, properties: dict[str, dict]) -> None:
        self._p = params
        self._properties = properties
        self._phase = _XmlPhase.KEY_OR_END
        self._count = 0
        self._opened = False
        self._key = ""
        self._string = True  # is the current key's value a string?
        self._pending = ""  # raw text of a held (non-string) value
        self._key_end = params.key_end.rstrip("\n")
        self._lead_newline = (params.value_start or params.key_end).endswith("\n")
        self._value_end = params.value_end.lstrip("\n")
        self._trail_newline = params.value_end.startswith("\n")
        # the characters that can complete held markup (see `MarkedToolParser._may_decide`)
        literals = (params.key_start, params.key_end + params.value_start, params.value_end)
        self.settles = "".join({lit.rstrip()[-1] for lit in literals})

    def quick(self, text: str) -> str | None:
        """Value text that cannot hold the value's end (nor its layout newline)."""
        if self._phase is not _XmlPhase.VALUE or self._value_end[0] in text:
            return None
        if self._trail_newline and text.endswith("\n"):
            return None
        if self._string:
            return encode_basestring(text)[1:-1]
        self._pending += text
        return ""

    def feed(self, text: str, final: bool) -> Step:
        out: list[str] = []
        if not self._opened:
            self._opened = True
            out.append("{")
        pos = 0
        while True:
            if self._phase is _XmlPhase.KEY_OR_END:
                p = skip_space(text, pos)
                state, end = match_literal(text, p, self._p.key_start, final)
                if state is Match.FAIL:
                    out.append("}")
                    return "".join(out), p, Status.DONE
                if state is Match.PARTIAL:
                    return "".join(out), p, Status.MORE
                self._phase, pos = _XmlPhase.KEY, end
            elif self._phase is _XmlPhase.KEY:
                got = self._read_key(text, pos, final)
                if got is None:
                    if len(text) - pos > MAX_NAME + len(self._p.value_start) + 2 or final:
                        return "".join(out), pos, Status.FAIL
                    return "".join(out), pos, Status.MORE
                key, pos = got
                self._key, self._string = key, self._is_string(key)
                out.append((", " if self._count else "") + encode_basestring(key))
                out.append(": " + ('"' if self._string else ""))
                self._count, self._phase = self._count + 1, _XmlPhase.VALUE
            else:
                at = text.find(self._value_end, pos)
                if at < 0:
                    keep = 0 if final else partial_suffix(text[pos:], [self._value_end])
                    segment = text[pos : len(text) - keep]
                    if self._trail_newline and segment.endswith("\n") and not final:
                        segment, keep = segment[:-1], keep + 1
                    self._value_text(segment, out)
                    return "".join(out), len(text) - keep, Status.MORE
                segment = text[pos:at]
                if self._trail_newline and segment.endswith("\n"):
                    segment = segment[:-1]
                self._value_text(segment, out)
                self._close_value(out)
                self._phase, pos = _XmlPhase.KEY_OR_END, at + len(self._value_end)

    def _read_key(self, text: str, pos: int, final: bool) -> tuple[str, int] | None:
        """Key, its closing tag, the value's opening and one layout newline; None if the
        text does not hold all of it yet."""
        at = text.find(self._key_end, pos)
        if at < 0 or at - pos > MAX_NAME:
            return None
        end = at + len(self._key_end)
        if self._p.value_start:
            state, end = match_literal(text, end, self._p.value_start.rstrip("\n"), final)
            if state is not Match.MATCH:
                return None
        if self._lead_newline:
            if end == len(text) and not final:
                return None
            if text.startswith("\n", end):
                end += 1
        return text[pos:at].strip(), end

    def _is_string(self, key: str) -> bool:
        types = declared_types(self._properties.get(key))
        return not types or "string" in types

    def _value_text(self, segment: str, out: list[str]) -> None:
        if self._string:
            out.append(encode_basestring(segment)[1:-1])
        else:
            self._pending += segment

    def _close_value(self, out: list[str]) -> None:
        if self._string:
            out.append('"')
        else:
            value = typed_value(self._pending, self._properties.get(self._key))
            out.append(json.dumps(value, ensure_ascii=False))
            self._pending = ""


class _MemberStream:
    """Streams an object one member at a time: each ``key=value`` / ``key:value`` is held
    until the next top-level comma or the closing bracket, then released as JSON text.

    The call is reported with its first member, so a call that is malformed from the start
    stays content; one that fails later is cut off there, like a truncated JSON call, and
    the failed member's text (``unread``) goes back to content.
    """

    streams = False
    settles = None

    def __init__(self) -> None:
        self._raw: list[str] = []  # text of the member being read
        self._members = 0

    @property
    def unread(self) -> str:
        """Text consumed but not released as arguments."""
        return "".join(self._raw)

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


class PythonArguments(_MemberStream):
    """Keyword arguments up to the closing parenthesis, read as Python literals."""

    def __init__(self) -> None:
        super().__init__()
        self._depth = 0
        self._quote = ""
        self._escape = False

    def quick(self, text: str) -> str | None:
        """Text that can neither end a member nor open or close a string is only kept."""
        if self._quote:
            if self._escape or self._quote in text or "\\" in text:
                return None
        elif _PY_SYNTAX.search(text):
            return None
        self._raw.append(text)
        return ""

    def feed(self, text: str, final: bool) -> Step:
        out: list[str] = []
        start = 0
        for i, c in enumerate(text):
            if self._quote:
                if self._escape:
                    self._escape = False
                elif c == "\\":
                    self._escape = True
                elif c == self._quote:
                    self._quote = ""
            elif c in "'\"":
                self._quote = c
            elif c in "([{":
                self._depth += 1
            elif c in ")]}" and self._depth:
                self._depth -= 1
            elif c in ")]}" or (c == "," and not self._depth):
                if c in "]}":
                    return self._fail(text, start, i, out)
                if not self._member(text, start, i, c == ")", out):
                    return "".join(out), i, Status.FAIL
                if c == ")":
                    return "".join(out), i + 1, Status.DONE
                start = i + 1
        self._raw.append(text[start:])
        return "".join(out), len(text), Status.MORE

    def _read(self, source: str) -> dict | None:
        return _python_kwargs(source)


def _python_kwargs(source: str) -> dict | None:
    try:
        call = ast.parse(f"f({source})", mode="eval").body
        assert isinstance(call, ast.Call) and not call.args
        return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
    except (SyntaxError, ValueError, AssertionError, TypeError, MemoryError, RecursionError):
        return None


class GemmaArguments(_MemberStream):
    """gemma4's ``{key:<|"|>text<|"|>,n:1}`` object, converted to JSON member by member."""

    def __init__(self) -> None:
        super().__init__()
        self._depth = 0
        self._in_string = False

    def quick(self, text: str) -> str | None:
        """Text that can neither end a member nor open or close a string is only kept."""
        if "<" in text or not self._depth:
            return None
        if not self._in_string and _GEMMA_SYNTAX.search(text):
            return None
        self._raw.append(text)
        return ""

    def feed(self, text: str, final: bool) -> Step:
        out: list[str] = []
        i = start = 0
        if self._depth == 0:
            i = skip_space(text, 0)
            if i == len(text):
                return "", i, Status.MORE
            if text[i] != "{":
                return "", i, Status.FAIL
            self._depth, i = 1, i + 1
            start = i
        n = len(text)
        while i < n:
            if self._in_string:
                at = text.find(GEMMA_QUOTE, i)
                if at < 0:
                    return self._keep(text, start, n - partial_suffix(text[i:], [GEMMA_QUOTE]), out)
                self._in_string, i = False, at + len(GEMMA_QUOTE)
                continue
            if text.startswith(GEMMA_QUOTE, i):
                self._in_string, i = True, i + len(GEMMA_QUOTE)
                continue
            if GEMMA_QUOTE.startswith(text[i:]) and not final:
                return self._keep(text, start, i, out)
            c = text[i]
            if c in "{[":
                self._depth += 1
            elif c in "}]" and self._depth > 1:
                self._depth -= 1
            elif c in "}]" or (c == "," and self._depth == 1):
                if c == "]":
                    return self._fail(text, start, i, out)
                if not self._member(text, start, i, c == "}", out):
                    return "".join(out), i, Status.FAIL
                if c == "}":
                    return "".join(out), i + 1, Status.DONE
                start = i + 1
            i += 1
        return self._keep(text, start, n, out)

    def _keep(self, text: str, start: int, upto: int, out: list[str]) -> Step:
        self._raw.append(text[start:upto])
        return "".join(out), upto, Status.MORE

    def _empty_close_ok(self) -> bool:
        return not self._members  # `{}`, not `{a:1,}`

    def _read(self, source: str) -> dict | None:
        value = gemma_to_python("{" + source + "}")
        return value if isinstance(value, dict) else None


_GEMMA_TOKEN = re.compile(
    r'\s*(?:(?P<str><\|"\|>(?P<body>.*?)<\|"\|>)|(?P<key>[A-Za-z_][\w\-.]*)\s*:'
    r"|(?P<lit>true|false|null|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<punct>[{}\[\],]))",
    re.DOTALL,
)


def gemma_to_python(source: str) -> object:
    """Translate gemma4 literal syntax into JSON text and decode it (None if invalid)."""
    parts: list[str] = []
    pos = 0
    source = source.strip()
    while pos < len(source):
        m = _GEMMA_TOKEN.match(source, pos)
        if m is None:
            return None
        pos = m.end()
        if m["str"] is not None:
            parts.append(json.dumps(m["body"], ensure_ascii=False))
        elif m["key"] is not None:
            parts.append(json.dumps(m["key"]) + ":")
        else:
            parts.append(m["lit"] or m["punct"])
    try:
        return json.loads("".join(parts))
    except ValueError:
        return None
