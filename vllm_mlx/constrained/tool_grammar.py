"""Lark grammars (llguidance dialect) for a family's tool calls, built from its format description.

The grammar is derived from the same ``ToolCallFormat`` the tool parser reads, so the syntax the
constraint forces is the syntax the parser accepts. This module writes the structure (variants,
section markers, separators, one or more calls); each call's name and arguments come from the
family's dialect (``Dialect.grammar`` in `vllm_mlx.families.dialects`): ``%json{schema}`` for
the JSON dialects, one typed rule per parameter for XML. Literals become Lark items through
`vllm_mlx.families.lark` (special-token markers as ``<[id]>``, a ``"\\n"`` as optional
whitespace).

Harmony's calls are messages of its channel stream: an optional analysis message (free
text), then ``to=functions.NAME`` on the commentary (or analysis) channel, either order, an
optional ``<|constrain|>json``, the JSON arguments and ``<|call|>`` (one call per message).
A dialect without a grammar raises ConstraintError rather than leave a call unenforced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vllm_mlx.families.dialects import DIALECTS
from vllm_mlx.families.formats import Channels, ToolCallFormat
from vllm_mlx.families.lark import GrammarError, LarkRules, LiteralWriter, json_value, lark_string

from .errors import ConstraintError

# Arguments are written as json.dumps writes them: no whitespace run a parser could trip on
# (several parsers do not skip whitespace before a call's opening brace), nothing to pad.
CALL_JSON_OPTIONS: dict[str, Any] = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
}
# Harmony writes its JSON arguments freely (vLLM's outputs have newlines): bounded whitespace.
HARMONY_JSON_OPTIONS: dict[str, Any] = {"whitespace_pattern": r"[\x20\x0A\x0D\x09]{0,8}"}
GRAMMAR_DIALECTS = tuple(name for name, d in DIALECTS.items() if d.has_grammar)


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


class ToolGrammarBuilder:
    """Builds the Lark grammar forcing calls of ``functions`` in ``fmt`` (and its variants)."""

    def __init__(
        self,
        fmt: ToolCallFormat,
        literals: LiteralWriter,
        json_options: dict[str, Any],
    ) -> None:
        refusal = f"tool_choice cannot be enforced for the {fmt.name} tool-call format: "
        if not fmt.dialect.has_grammar:
            raise ConstraintError(
                f"{refusal}its {fmt.dialect.name!r} argument syntax has no grammar "
                f"(supported: {', '.join(GRAMMAR_DIALECTS)})"
            )
        self.fmt = fmt
        self.g = LarkRules(literals, json_options)

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
        try:
            if self.fmt.channels is not None:
                if content_schema is not None:
                    raise GrammarError(
                        "harmony: tool_choice auto with a JSON schema cannot be enforced"
                    )
                names = [self._harmony(self.fmt.channels, functions, multiple)]
            else:
                names = [self._variant(v, k, functions, multiple) for k, v in enumerate(variants)]
        except GrammarError as exc:
            raise ConstraintError(str(exc)) from None
        start = " | ".join(names)
        if content_schema is not None:
            start += " | " + json_value(content_schema, content_options or self.g.json_options)
        return self.g.text(start)

    def _variant(
        self, fmt: ToolCallFormat, k: int, functions: Sequence[Function], multiple: bool
    ) -> str:
        g = self.g
        calls = [
            g.rule(f"v{k}_f{i}", fmt.dialect.grammar(fmt, f"v{k}_f{i}", fn.name, fn.parameters, g))
            for i, fn in enumerate(functions)
        ]
        call = g.rule(f"v{k}_call", [" | ".join(calls)])
        body = [call]
        if multiple:
            body = [call, "(", *g.lit.items(fmt.separator), call, ")*"]
        items = [*g.lit.items(fmt.section_start), *body, *g.lit.items(fmt.section_end)]
        return g.rule(f"v{k}", items)

    def _harmony(self, ch: Channels, functions: Sequence[Function], multiple: bool) -> str:
        """An optional analysis message (or a new assistant header), then one call (or, with
        ``multiple``, more, each in a new assistant message)."""
        g, lit = self.g, self.g.lit
        header = [*lit.items(ch.start), '"assistant"']
        end = lit.items(ch.end)
        text = g.lexeme("harmony_text", r"/(.|\n)*/")
        if end[0].startswith("<["):  # a special token never matches text: greedy is exact
            body = g.rule("h_text", [text, *end])
        else:
            g.rules.append(f"h_text[lazy]: {text} {' '.join(end)}")
            body = "h_text"
        analysis = [*lit.items(ch.channel), lark_string(ch.reasoning_channel)]
        analysis += [*lit.items(ch.message), body, "WS?", *header]
        pre = g.rule("h_pre", [" | ".join([" ".join(analysis), " ".join(header)])])
        channel = [
            *lit.items(ch.channel),
            f"({lark_string(ch.tool_channel)} | {lark_string(ch.reasoning_channel)})",
        ]
        calls = []
        for i, fn in enumerate(functions):
            to = lark_string(f" {ch.recipient}{ch.functions}{fn.name}")
            where = f"({to} {' '.join(channel)} | {' '.join(channel)} {to})"
            constrain = f'(" "? {" ".join(lit.items(ch.constrain))} "json")?'
            args = json_value(fn.parameters, HARMONY_JSON_OPTIONS)
            items = [where, constrain, '" "?', *lit.items(ch.message), args, *lit.items(ch.call)]
            calls.append(g.rule(f"h_f{i}", items))
        one = g.rule("h_one", [" | ".join(calls)])
        again = f"(WS? {' '.join(header)} {one})*" if multiple else ""
        return g.rule("h_call", [f"{pre}? {one} {again}"])


def special_markers(
    vocabulary: dict[str, int], is_special: Callable[[int], bool]
) -> dict[str, int]:
    """The added-vocabulary entries that the matcher treats as special tokens."""
    return {text: i for text, i in vocabulary.items() if is_special(i)}
