"""Tools for chat templates that cannot render them.

Many small models' templates (SmolLM2's ChatML among them) ignore ``tools`` and cannot show
tool calls or tool results. Rather than let the model never hear of them, such requests get
the tools described in a system message in the Hermes format (Qwen2.5's wording), earlier
calls written as ``<tool_call>`` text and results as ``<tool_response>`` user turns, and
replies are parsed with the hermes parser.
"""

from __future__ import annotations

import json

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


def template_renders_tools(chat_template: str | None) -> bool:
    return chat_template is not None and "tools" in chat_template


def with_tool_system_prompt(messages: list[dict], tools: list[dict]) -> list[dict]:
    """The messages with the tools described in the (first) system message."""
    listing = "".join("\n" + json.dumps(tool, ensure_ascii=False) for tool in tools)
    block = _INTRO + listing + _OUTRO
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0])
        first["content"] = f"{first.get('content') or ''}\n\n{block}".lstrip()
        return [first, *messages[1:]]
    return [{"role": "system", "content": block}, *messages]


def as_plain_chat(messages: list[dict]) -> list[dict]:
    """History with tool calls and tool results as text a plain template renders."""
    plain = []
    for message in messages:
        role, content = message.get("role"), message.get("content") or ""
        if role == "assistant" and message.get("tool_calls"):
            calls = "".join(_call_text(c.get("function", {})) for c in message["tool_calls"])
            plain.append({"role": "assistant", "content": content + calls})
        elif role == "tool":
            plain.append(
                {"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"}
            )
        else:
            plain.append({**message, "content": content})
    return plain


def _call_text(function: dict) -> str:
    arguments = function.get("arguments") or "{}"
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    name = json.dumps(function.get("name", ""), ensure_ascii=False)
    return f'<tool_call>\n{{"name": {name}, "arguments": {arguments}}}\n</tool_call>'
