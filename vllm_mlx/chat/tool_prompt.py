"""Tools, calls and results for chat templates that cannot render them.

Some templates never show tool definitions (SmolLM2's ChatML, DeepSeek-V3.1), or drop the
history's calls or results. Rather than let the model never hear of them, such requests get
the tools described in a system message, earlier calls written as text and results as
``<tool_response>`` user turns, all in the model family's own call syntax (the detected
`ToolCallFormat` writes the example call and the history calls), so that what the prompt
teaches is what the parser reads. Without a family the Hermes format is used (Qwen2.5's
wording), and replies are parsed with the hermes parser.
"""

from __future__ import annotations

import json

from vllm_mlx.families.formats import ToolCallFormat

FALLBACK_TOOL_PARSER = "hermes"

_INTRO = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_OUTRO = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
_FAMILY_INTRO = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "The functions, one JSON schema a line:"
)
_FAMILY_OUTRO = (
    "\n\nTo call a function, write the call exactly in this format (here calling {name} with "
    "example arguments; use the function and arguments you need):\n{example}"
)


def _is_hermes(tool_format: ToolCallFormat | None) -> bool:
    return tool_format is None or tool_format.name == FALLBACK_TOOL_PARSER


def tool_instructions(tools: list[dict], tool_format: ToolCallFormat | None = None) -> str:
    """The system text that describes ``tools`` and how to call them in the family's syntax."""
    listing = "".join("\n" + json.dumps(tool, ensure_ascii=False) for tool in tools)
    if _is_hermes(tool_format):
        return _INTRO + listing + _OUTRO
    assert tool_format is not None
    function = tools[0].get("function", {}) if tools else {}
    name = function.get("name", "function_name")
    properties = (function.get("parameters") or {}).get("properties") or {}
    example_args = {key: "value" for key in list(properties)[:1]}
    example = tool_format.render_calls([(name, example_args)])
    return _FAMILY_INTRO + listing + _FAMILY_OUTRO.format(name=name, example=example)


def with_tool_system_prompt(
    messages: list[dict], tools: list[dict], tool_format: ToolCallFormat | None = None
) -> list[dict]:
    """The messages with the tools described in the (first) system message."""
    block = tool_instructions(tools, tool_format)
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0])
        first["content"] = f"{first.get('content') or ''}\n\n{block}".lstrip()
        return [first, *messages[1:]]
    return [{"role": "system", "content": block}, *messages]


def as_plain_chat(
    messages: list[dict],
    tool_format: ToolCallFormat | None = None,
    *,
    calls: bool = True,
    results: bool = True,
) -> list[dict]:
    """History with tool calls (``calls``) and tool results (``results``) as text a template
    that drops them renders."""
    plain = []
    for message in messages:
        role, content = message.get("role"), message.get("content") or ""
        if calls and role == "assistant" and message.get("tool_calls"):
            text = content + _calls_text(message["tool_calls"], tool_format)
            plain.append({"role": "assistant", "content": text})
        elif results and role == "tool":
            plain.append(
                {"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"}
            )
        else:
            plain.append(message)
    return plain


def _calls_text(tool_calls: list[dict], tool_format: ToolCallFormat | None) -> str:
    functions = [call.get("function") or {} for call in tool_calls]
    if _is_hermes(tool_format):
        return "".join(_hermes_call(function) for function in functions)
    assert tool_format is not None
    return tool_format.render_calls([(f.get("name", ""), _arguments(f)) for f in functions])


def _arguments(function: dict) -> dict:
    arguments = function.get("arguments") or {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return {}
    return arguments if isinstance(arguments, dict) else {}


def _hermes_call(function: dict) -> str:
    arguments = function.get("arguments") or "{}"
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    name = json.dumps(function.get("name", ""), ensure_ascii=False)
    return f'<tool_call>\n{{"name": {name}, "arguments": {arguments}}}\n</tool_call>'
