"""Lark grammars (llguidance dialect) for a family's tool calls, built from its format description.

The grammar is derived from the same ``ToolCallFormat`` the tool parser reads, so the syntax the
constraint forces is the syntax the parser accepts:

* literal texts (call markers, separators) become Lark strings; a marker that the tokenizer
  holds as one special token becomes ``<[id]>`` (special tokens never match plain text);
* a ``"\\n"`` inside a literal is layout, which the parser reads as optional whitespace: it
  becomes a bounded optional whitespace lexeme;
* arguments: ``%json{schema}`` for the JSON dialects (the function's parameter schema, or the
  ``{"name": ..., "arguments": ...}`` wrapper for ``json_named``); for the XML dialects one
  rule per parameter, typed the way the parser types it (``value_types.declared_types``).

Dialects without a grammar here (Python literals, gemma4 literals, Harmony's channel header)
raise ConstraintError rather than leave a forced call unenforced.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vllm_mlx.chat.formats import ToolCallFormat, XmlParameters
from vllm_mlx.tool_parsers.value_types import declared_types

from .errors import ConstraintError

# Arguments are written as json.dumps writes them: no whitespace run a parser could trip on
# (several parsers do not skip whitespace before a call's opening brace), nothing to pad.
CALL_JSON_OPTIONS: dict[str, Any] = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
}
# Optional layout whitespace wherever a literal says "\n".
WS_RULE = r"WS: /[ \t\r\n]{1,8}/"
MAX_CALL_INDEX_DIGITS = 3
UNSUPPORTED_FAMILIES = {
    "harmony": "its calls follow the analysis channel in a header the grammar cannot anchor",
}
SUPPORTED_DIALECTS = ("json", "json_named", "xml")
# Schema keywords that only describe (safe to ignore when typing an XML parameter).
_ANNOTATIONS = {"description", "title", "examples", "default", "$comment", "deprecated"}


@dataclass(frozen=True)
class Function:
    """One callable function: its name and its parameters' JSON schema."""

    name: str
    parameters: dict[str, Any]


def functions_of(tools: Sequence[dict]) -> list[Function]:
    """The functions of an OpenAI ``tools`` array (parameters default to any object)."""
    found = []
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, dict) else {}
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise ConstraintError("every tool needs a function name to force a call")
        params = fn.get("parameters") or {"type": "object"}
        if not isinstance(params, dict):
            raise ConstraintError(f"tool {name!r}: parameters must be a JSON schema object")
        found.append(Function(name, params))
    return found


def lark_string(text: str) -> str:
    """``text`` as a Lark string literal."""
    return json.dumps(text, ensure_ascii=False)


def _regex_escape(text: str) -> str:
    """``text`` as a literal inside a Lark ``/.../`` regex."""
    return re.sub(r"([\\/.^$|?*+()\[\]{}-])", r"\\\1", text).replace("\n", r"\n")


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


def _hoisted(schema: dict[str, Any], inner: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with ``inner``'s definitions moved to its root (local refs keep resolving)."""
    for key in ("$defs", "definitions"):
        if key in inner:
            schema[key] = inner[key]
    return schema


def json_value(schema: dict[str, Any], options: dict[str, Any]) -> str:
    """A ``%json{...}`` item for ``schema`` with the backend's whitespace options."""
    return "%json" + json.dumps({**schema, "x-guidance": options}, ensure_ascii=False)


class ToolGrammarBuilder:
    """Builds the Lark grammar forcing calls of ``functions`` in ``fmt`` (and its variants)."""

    def __init__(
        self,
        fmt: ToolCallFormat,
        literals: LiteralWriter,
        json_options: dict[str, Any],
    ) -> None:
        if fmt.name in UNSUPPORTED_FAMILIES:
            raise ConstraintError(
                f"tool_choice cannot be enforced for the {fmt.name} tool-call format: "
                f"{UNSUPPORTED_FAMILIES[fmt.name]}"
            )
        if fmt.dialect not in SUPPORTED_DIALECTS:
            raise ConstraintError(
                f"tool_choice cannot be enforced for the {fmt.name} tool-call format: "
                f"its {fmt.dialect!r} argument syntax has no grammar (supported: "
                f"{', '.join(SUPPORTED_DIALECTS)})"
            )
        self.fmt = fmt
        self.lit = literals
        self.json_options = json_options
        self._rules: list[str] = []
        self._lexemes: dict[str, str] = {}

    # -- public ----------------------------------------------------------------------------
    def grammar(
        self,
        functions: Sequence[Function],
        *,
        multiple: bool,
        content_schema: dict[str, Any] | None = None,
        content_options: dict[str, Any] | None = None,
    ) -> str:
        """The grammar: one call (or one or more with ``multiple``) of any of ``functions``;
        with ``content_schema``, schema-valid JSON content (``content_options``) is the other
        alternative."""
        if not functions:
            raise ConstraintError("tool_choice needs at least one tool")
        variants = [self.fmt, *self.fmt.variants]
        names = [self._variant(v, k, functions, multiple) for k, v in enumerate(variants)]
        start = " | ".join(names)
        if content_schema is not None:
            start += " | " + json_value(content_schema, content_options or self.json_options)
        return "\n".join(["start: " + start, *self._rules, WS_RULE, *self._lexemes.values()])

    # -- structure -------------------------------------------------------------------------
    def _rule(self, name: str, items: Sequence[str]) -> str:
        body = " ".join(items) if items else '""'
        self._rules.append(f"{name}: {body}")
        return name

    def _variant(
        self, fmt: ToolCallFormat, k: int, functions: Sequence[Function], multiple: bool
    ) -> str:
        calls = [self._call(fmt, f"v{k}_f{i}", fn) for i, fn in enumerate(functions)]
        call = self._rule(f"v{k}_call", [" | ".join(calls)])
        body = [call]
        if multiple:
            sep = self.lit.items(fmt.separator)
            body = [call, "(", *sep, call, ")*"]
        items = [*self.lit.items(fmt.section_start), *body, *self.lit.items(fmt.section_end)]
        return self._rule(f"v{k}", items)

    def _call(self, fmt: ToolCallFormat, name: str, fn: Function) -> str:
        lit = self.lit
        if fmt.dialect == "json_named":
            wrapper = _hoisted(
                {
                    "type": "object",
                    "properties": {
                        "name": {"const": fn.name},
                        fmt.arguments_key: _without_defs(fn.parameters),
                    },
                    "required": ["name", fmt.arguments_key],
                    "additionalProperties": False,
                },
                fn.parameters,
            )
            items = [
                *lit.seq(fmt.call_start),
                json_value(wrapper, self.json_options),
                *lit.seq(fmt.args_end, fmt.call_end),
            ]
            return self._rule(name, items)
        head = [*lit.seq(fmt.call_start, fmt.name_prefix), lark_string(fn.name)]
        if fmt.name_prefix:  # kimi_k2 numbers its calls: functions.NAME:0
            head += ['":"', f"/[0-9]{{1,{MAX_CALL_INDEX_DIGITS}}}/"]
        head += lit.items(fmt.name_end)
        if fmt.dialect == "json":
            args = [json_value(fn.parameters, self.json_options)]
        else:
            assert fmt.xml is not None
            args = self._xml_arguments(fmt.xml, name, fn)
        return self._rule(name, [*head, *args, *lit.seq(fmt.args_end, fmt.call_end)])

    # -- XML dialect -----------------------------------------------------------------------
    def _xml_arguments(self, xml: XmlParameters, name: str, fn: Function) -> list[str]:
        params = fn.parameters
        if params.get("type", "object") != "object":
            raise ConstraintError(f"tool {fn.name!r}: XML arguments need an object schema")
        required = set(params.get("required") or ())
        items = []
        for i, (key, prop) in enumerate((params.get("properties") or {}).items()):
            rule = self._rule(f"{name}_p{i}", self._xml_parameter(xml, fn, key, prop, params))
            items.append(rule if key in required else f"{rule}?")
        missing = required - set(params.get("properties") or {})
        if missing:
            raise ConstraintError(
                f"tool {fn.name!r}: required parameters {sorted(missing)} are not in properties"
            )
        return items

    def _xml_parameter(
        self, xml: XmlParameters, fn: Function, key: str, prop: Any, root: dict[str, Any]
    ) -> list[str]:
        lit = self.lit
        opening = [*lit.seq(xml.key_start), lark_string(key)]
        key_end = xml.key_end.rstrip("\n")
        lead_newline = (xml.value_start or xml.key_end).endswith("\n")
        value_start = xml.value_start.rstrip("\n")
        opening += lit.seq(key_end, value_start)
        types = declared_types(prop)
        if not isinstance(prop, dict) or (not types and set(prop) - _ANNOTATIONS):
            raise ConstraintError(
                f"tool {fn.name!r}, parameter {key!r}: the {self.fmt.name} format types values "
                "by their declared JSON type, and this schema declares none"
            )
        if not types or "string" in types:
            value = self._xml_string(xml, fn, key, prop, lead_newline)
        else:
            value = [
                "WS?",
                json_value(_hoisted(_without_defs(prop), root), self.json_options),
                *lit.seq("\n" + xml.value_end.lstrip("\n")),
            ]
        return [*opening, *value, "WS?"]

    def _xml_string(
        self, xml: XmlParameters, fn: Function, key: str, prop: dict, lead_newline: bool
    ) -> list[str]:
        """A verbatim string value and its end tag (one layout newline on each side)."""
        end = xml.value_end.lstrip("\n")
        trail = '"\\n"?' if xml.value_end.startswith("\n") else None
        lead = ['"\\n"?'] if lead_newline else []
        choices = prop.get("enum") if "enum" in prop else None
        if "const" in prop:
            choices = [prop["const"]]
        if choices is not None:
            options = " | ".join(lark_string(str(c)) for c in choices)
            return [*lead, f"({options})", *([trail] if trail else []), *self.lit.seq(end)]
        for keyword in ("pattern", "format"):
            if keyword in prop:
                raise ConstraintError(
                    f"tool {fn.name!r}, parameter {key!r}: {keyword!r} cannot be enforced on "
                    f"verbatim strings of the {self.fmt.name} format"
                )
        low, high = int(prop.get("minLength", 0)), prop.get("maxLength")
        bound = (
            "*" if high is None and not low else f"{{{low},{'' if high is None else int(high)}}}"
        )
        body = f"(.|\\n){bound}"
        end_re = _regex_escape(end)
        tail = "\\n?" if trail else ""
        lexeme = f"VALUE_{len(self._lexemes)}"
        self._lexemes.setdefault(
            f"{low}:{high}:{end}",
            f"{lexeme}: /{body}{tail}{end_re}/ & ~/(.|\\n)*{end_re}(.|\\n)+/",
        )
        defined = self._lexemes[f"{low}:{high}:{end}"].split(":", 1)[0]
        return [*lead, defined]


def _without_defs(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k not in ("$defs", "definitions")}


def special_markers(
    vocabulary: dict[str, int], is_special: Callable[[int], bool]
) -> dict[str, int]:
    """The added-vocabulary entries that the matcher treats as special tokens."""
    return {text: i for text, i in vocabulary.items() if is_special(i)}
