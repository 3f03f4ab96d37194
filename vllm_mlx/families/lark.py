"""Writing Lark grammars (llguidance's dialect) from format literals: the pieces every
argument dialect's grammar is made of.

Plain text only: this module builds grammar text and never imports a grammar engine, so the
family descriptions that use it stay importable everywhere.

* literal texts (call markers, separators) become Lark strings; a marker that the tokenizer
  holds as one special token becomes ``<[id]>`` (special tokens never match plain text);
* a ``"\\n"`` inside a literal is layout, which the parsers read as optional whitespace: it
  becomes a bounded optional whitespace lexeme (``WS_RULE``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

# Optional layout whitespace wherever a literal says "\n".
WS_RULE = r"WS: /[ \t\r\n]{1,8}/"


class GrammarError(ValueError):
    """A call that cannot be expressed as a grammar (the constraint layer reports it)."""


def lark_string(text: str) -> str:
    """``text`` as a Lark string literal."""
    return json.dumps(text, ensure_ascii=False)


def regex_escape(text: str) -> str:
    """``text`` as a literal inside a Lark ``/.../`` regex."""
    return re.sub(r"([\\/.^$|?*+()\[\]{}-])", r"\\\1", text).replace("\n", r"\n")


def json_value(schema: dict[str, Any], options: dict[str, Any]) -> str:
    """A ``%json{...}`` item for ``schema`` with the backend's whitespace options."""
    return "%json" + json.dumps({**schema, "x-guidance": options}, ensure_ascii=False)


def hoisted(schema: dict[str, Any], inner: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with ``inner``'s definitions moved to its root (local refs keep resolving)."""
    for key in ("$defs", "definitions"):
        if key in inner:
            schema[key] = inner[key]
    return schema


def without_defs(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k not in ("$defs", "definitions")}


class LiteralWriter:
    """Turns format literals into Lark sequences, using ``<[id]>`` for special-token markers."""

    def __init__(self, special_markers: dict[str, int]) -> None:
        # Longest first, so a marker that contains another is matched whole.
        self._markers = sorted(special_markers.items(), key=lambda kv: -len(kv[0]))

    def items(self, text: str) -> list[str]:
        """Lark items for ``text`` (a ``"\\n"`` is optional whitespace)."""
        out: list[str] = []
        for piece, special_id in self._split_specials(text):
            if special_id is not None:
                out.append(f"<[{special_id}]>")
                continue
            for i, line in enumerate(piece.split("\n")):
                if i and (not out or out[-1] != "WS?"):
                    out.append("WS?")
                if line:
                    out.append(lark_string(line))
        return out

    def seq(self, *texts: str) -> list[str]:
        """Items for several consecutive literals, layout whitespace merged."""
        out: list[str] = []
        for text in texts:
            for item in self.items(text):
                if item == "WS?" and out and out[-1] == "WS?":
                    continue
                out.append(item)
        return out

    def _split_specials(self, text: str) -> list[tuple[str, int | None]]:
        parts: list[tuple[str, int | None]] = []
        rest = text
        while rest:
            hits = [(rest.find(m), m, i) for m, i in self._markers if m in rest]
            if not hits:
                parts.append((rest, None))
                break
            at, marker, token_id = min(hits, key=lambda h: (h[0], -len(h[1])))
            if at:
                parts.append((rest[:at], None))
            parts.append((marker, token_id))
            rest = rest[at + len(marker) :]
        return parts


class LarkRules:
    """The rules and lexemes of one grammar being written, with the tokenizer's literals and
    the JSON whitespace options every ``%json`` item uses."""

    def __init__(self, literals: LiteralWriter, json_options: dict[str, Any]) -> None:
        self.lit = literals
        self.json_options = json_options
        self.rules: list[str] = []
        self.lexemes: dict[str, str] = {}

    def rule(self, name: str, items: Sequence[str]) -> str:
        """Add ``name: items`` and return the name."""
        body = " ".join(items) if items else '""'
        self.rules.append(f"{name}: {body}")
        return name

    def lexeme(self, key: str, body: str) -> str:
        """The name of the lexeme for ``key``, defined as ``body`` the first time."""
        if key not in self.lexemes:
            self.lexemes[key] = f"VALUE_{len(self.lexemes)}: {body}"
        return self.lexemes[key].split(":", 1)[0]

    def text(self, start: str) -> str:
        """The whole grammar, ``start`` being the start rule's body."""
        return "\n".join(["start: " + start, *self.rules, WS_RULE, *self.lexemes.values()])
