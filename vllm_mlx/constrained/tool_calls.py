"""Forced tool calls: the family's call syntax with each function's schema as arguments.

``tool_choice: "required"`` forces at least one call of any listed function (exactly one when
``parallel_tool_calls`` is false); a named function forces exactly one call of it. ``auto``
with a ``response_format`` schema allows either calls or schema-valid content. The grammar
comes from the family's ``ToolCallFormat`` (see ``tool_grammar``) and always runs on
llguidance: lm-format-enforcer has no grammar support. After the call(s) EOS is allowed.
"""

from __future__ import annotations

from typing import Any

from vllm_mlx.families.formats import ToolCallFormat
from vllm_mlx.families.lark import LiteralWriter

from ..protocols import Tokenizer
from .content_constraint import ContentConstraint
from .errors import ConstraintError
from .llguidance_backend import JSON_OPTIONS, LLGuidanceConstraint, llguidance_tokenizer
from .schema_check import check_enforceable
from .tokenizer_cache import hf_tokenizer, per_tokenizer
from .tool_grammar import CALL_JSON_OPTIONS, Function, ToolGrammarBuilder, functions_of
from .tool_grammar import special_markers as _special_markers


@per_tokenizer("special_markers")
def special_markers(tokenizer: Tokenizer) -> dict[str, int]:
    """Added-vocabulary texts that llguidance treats as single special tokens."""
    hf = hf_tokenizer(tokenizer)
    vocabulary = hf.get_added_vocab() if hasattr(hf, "get_added_vocab") else {}
    return _special_markers(vocabulary, llguidance_tokenizer(tokenizer).is_special_token)


def chosen_functions(tool_choice: Any, functions: list[Function]) -> tuple[list[Function], bool]:
    """(functions a call may use, whether the call is forced) for ``tool_choice``."""
    if tool_choice in (None, "auto", "none"):
        return functions, False
    if tool_choice == "required":
        return functions, True
    if isinstance(tool_choice, dict):
        inner = tool_choice.get("function")
        name = (inner if isinstance(inner, dict) else tool_choice).get("name")
        for fn in functions:
            if fn.name == name:
                return [fn], True
        raise ConstraintError(f"tool_choice names {name!r}, which is not in tools")
    raise ConstraintError(f"unsupported tool_choice {tool_choice!r}")


def tool_call_grammar(
    tokenizer: Tokenizer,
    fmt: ToolCallFormat,
    functions: list[Function],
    *,
    multiple: bool,
    content_schema: dict | None = None,
) -> str:
    """The Lark grammar for calls of ``functions`` in ``fmt`` on this tokenizer."""
    builder = ToolGrammarBuilder(fmt, LiteralWriter(special_markers(tokenizer)), CALL_JSON_OPTIONS)
    return builder.grammar(
        functions,
        multiple=multiple,
        content_schema=content_schema,
        content_options=dict(JSON_OPTIONS),
    )


def call_opener_id(tokenizer: Tokenizer, fmt: ToolCallFormat) -> int | None:
    """The id of the family's call opener when it is one special token (None otherwise):
    what ``tool_choice: "none"`` bans."""
    opener = fmt.section_start or fmt.call_start
    if fmt.channels is not None or not opener:
        return None
    items = LiteralWriter(special_markers(tokenizer)).items(opener)
    if items and items[0].startswith("<["):
        return int(items[0][2:-2])
    return None


def forced_tool_call_constraint(
    tokenizer: Tokenizer,
    *,
    tool_choice: Any,
    tools: list[dict] | None,
    tool_format: ToolCallFormat | None,
    parallel_tool_calls: bool,
    content_schema: dict | None,
) -> ContentConstraint | None:
    """The constraint forcing a call for ``tool_choice`` required/named (or allowing calls or
    schema-valid content for ``auto`` with a schema); None when nothing is enforced."""
    if not tools or tool_choice == "none":
        return None
    functions, forced = chosen_functions(tool_choice, functions_of(tools))
    if not forced and content_schema is None:
        return None
    if tool_format is None:
        raise ConstraintError("tool_choice cannot be enforced: the model has no tool-call format")
    for tool in tools:
        check_enforceable((tool.get("function") or {}).get("parameters"))
    named = isinstance(tool_choice, dict)
    grammar = tool_call_grammar(
        tokenizer,
        tool_format,
        functions,
        multiple=parallel_tool_calls and not named,
        content_schema=None if forced else content_schema,
    )
    kind = "named" if named else ("required" if forced else "auto+schema")
    return LLGuidanceConstraint.for_lark(
        tokenizer, grammar, f"tool_choice {kind}/{tool_format.name}"
    )
