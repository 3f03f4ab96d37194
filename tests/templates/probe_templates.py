"""Render each minimal template in this folder through the current chat renderer and report.

A probe of the renderer over real model families: every template here reproduces one thing
real chat templates do (see README.md). For each one the probe renders a conversation with a
tool call (content: null, a client id ``call_1``) and its result, then says whether rendering
worked, whether the tools, the earlier call and the result reach the prompt, whether a plain
request without tools renders, what the prompt tail is, which thinking switch was found, and
which parsers detection picks.

    PYTHONPATH=/work/main python tests/templates/probe_templates.py [TEMPLATE ...]

It uses the renderer's internal functions (``render_chat``, ``decide_thinking``, the parser
managers); the import paths are tried in order because those modules are being moved.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

HERE = Path(__file__).parent
TOOL_DESC = "Current weather for a city"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": TOOL_DESC,
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"},
    {"role": "user", "content": "And tomorrow?"},
]
# The thinking variable each template really reads (None: no variable).
THINKING_READS = {
    "think_enable_thinking": "enable_thinking",
    "think_thinking": "thinking",
    "think_thinking_mode": "thinking_mode",
    "think_reasoning_effort": "reasoning_effort",
    "think_budget": "thinking_budget",
    "think_slash_switch": None,
    "think_word_in_prose": "reasoning",
}


def _first(*paths: str):
    for path in paths:
        module, _, name = path.rpartition(".")
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    sys.exit(f"none of {paths} can be imported; update the probe's import paths")


render_chat = _first("vllm_mlx.chat.template.render_chat", "vllm_mlx.families.template.render_chat")
decide_thinking = _first(
    "vllm_mlx.chat.thinking_switch.decide_thinking",
    "vllm_mlx.families.thinking_switch.decide_thinking",
)
ToolParserManager = _first("vllm_mlx.tool_parsers.ToolParserManager")
choose_parsers = _first("vllm_mlx.runtime.choose_parsers")


def tokenizer_for(template) -> PreTrainedTokenizerFast:
    """A word-level tokenizer whose only job is to carry the template (no model needed)."""
    core = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", chat_template=template)


def load(path: Path):
    if path.suffix == ".json":
        return json.loads(path.read_text())["chat_template"]
    return path.read_text()


def probe(path: Path) -> dict:
    template = load(path)
    row: dict = {"template": path.name}
    choice = choose_parsers("model", tokenizer_for(template))
    tool_format = ToolParserManager.formats[choice.tool]
    try:
        rendered = render_chat(
            tokenizer_for(template), MESSAGES, tools=TOOLS, tool_format=tool_format
        )
    except Exception as exc:  # report every failure, whatever its class
        row["render"] = f"ERROR {type(exc).__name__}: {exc}"
    else:
        text = rendered.text
        after_user = text.split("Weather in Paris?", 1)[-1]
        row["render"] = "ok"
        row["tools_shown"] = TOOL_DESC in text
        row["hermes_injected"] = "<tools>" in text and "# Tools" in text
        row["family_injected"] = "# Tools" in text and "<tools>" not in text
        row["history_call"] = "get_weather" in after_user and "Paris" in after_user
        row["history_args_json"] = '{"city": "Paris"}' in text or '"city": "Paris"' in text
        row["result_shown"] = "18C, sunny" in text
        row["prints_None_or_null"] = "None" in text or "null" in text.replace('"null"', "")
        row["tail"] = rendered.tail
    try:
        render_chat(tokenizer_for(template), MESSAGES[:2], tools=None)
        row["plain_render"] = "ok"
    except Exception as exc:
        row["plain_render"] = f"ERROR {type(exc).__name__}: {exc}"
    try:
        decision = decide_thinking(template, enabled=False)
        row["thinking_kwargs"] = decision.template_kwargs
        if decision.system_switch:
            row["thinking_system_switch"] = decision.system_switch
    except Exception as exc:
        row["thinking_kwargs"] = f"ERROR {exc}"
    if path.stem in THINKING_READS:
        row["thinking_reads"] = THINKING_READS[path.stem]
    row["detect_tool"] = f"{choice.tool} ({choice.tool_why})"
    row["detect_reasoning"] = choice.reasoning
    return row


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or sorted([*HERE.glob("*.jinja"), *HERE.glob("*.json")])
    for path in paths:
        print(json.dumps(probe(path), ensure_ascii=False))


if __name__ == "__main__":
    main()
