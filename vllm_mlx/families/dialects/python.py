"""The ``python`` dialect: ``NAME(a=1, b="x")``, keyword arguments as Python literals
(pythonic / llama4). Each keyword is released once its value is complete; the grammar writes
each parameter as a Python literal of its schema's type (``literal_grammar``)."""

from __future__ import annotations

import ast
import re
from typing import Any, ClassVar

from ..lark import LarkRules
from .base import ArgumentReader, Dialect, Layout, Status, Step
from .literal_grammar import LiteralGrammar, LiteralSyntax
from .members import MemberStream

_PY_SYNTAX = re.compile(r"[\'\"()\[\]{},]")  # what `PythonArguments.feed` reacts to


class PythonDialect(Dialect):
    name: ClassVar[str] = "python"

    def reader(self, properties: dict[str, Any], named: bool = True) -> ArgumentReader:
        return PythonArguments()

    def render_arguments(self, arguments: dict) -> str:
        return ", ".join(f"{k}={_python_literal(v)}" for k, v in arguments.items()) + ")"

    def arguments_grammar(
        self, layout: Layout, rule: str, function: str, parameters: dict, g: LarkRules
    ) -> list[str]:
        return [*LiteralGrammar(PYTHON_SYNTAX, g, []).members(rule, parameters, True), '")"']


# Python literals: either quote, True/False/None, "k=v" keywords, ", " (or ",") separators.
PYTHON_SYNTAX = LiteralSyntax(
    name="python",
    string=r"""/"([^"\\\n]|\\.)*"|'([^'\\\n]|\\.)*'/""",
    true="True",
    false="False",
    null="None",
    kwarg="{}=",
    keys=('"{}"', "'{}'"),
    colon=('":"', '" "?'),
    separator=('","', '" "?'),
)


PYTHON = PythonDialect()


def _python_literal(value: object) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, dict):
        items = ", ".join(f"{_python_literal(k)}: {_python_literal(v)}" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_python_literal(v) for v in value) + "]"
    return repr(value)


class PythonArguments(MemberStream):
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
