"""The ``xml_spaced_name`` dialect: the ``xml`` dialect whose function name may hold inner
spaces (Poolside v1: ``<tool_call>  get weather  <arg_key>…``, read as ``get weather``, as
vLLM reads it). The name ends at a newline or at the first ``<``; an empty name is no call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from ..literal import MAX_NAME, Match, match_literal
from .base import Layout
from .xml_arguments import Xml

_NAME = re.compile(r"[ \t]*([\w.\-:/]+(?: [\w.\-:/]+)*)[ \t]*")


@dataclass(frozen=True)
class SpacedNameXml(Xml):
    name: ClassVar[str] = "xml_spaced_name"

    def match_header(
        self, layout: Layout, text: str, pos: int, final: bool
    ) -> tuple[Match, int, str | None]:
        m = _NAME.match(text, pos)
        if m is None or m.end(1) - pos > MAX_NAME:
            undecided = not final and text[pos:].strip(" \t") == "" and len(text) - pos < MAX_NAME
            return (Match.PARTIAL if undecided else Match.FAIL), pos, ""
        if m.end() == len(text):  # the name may go on, or was cut off
            return (Match.FAIL if final else Match.PARTIAL), m.end(), ""
        state, end = match_literal(text, m.end(), layout.name_end, final)
        if state is not Match.MATCH:
            return state, end, ""
        return Match.MATCH, end, m.group(1)
