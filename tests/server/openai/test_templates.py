"""Real templates' behaviours through the real server and the openai SDK.

The echo server answers with the prompt the template rendered, so each test sends one of our
minimal templates (tests/templates/, allowed by the operator's opt-in) with an OpenAI-style
history and reads what the model would have seen. A replay server checks the ids the server
generates for a family that enforces their shape.
"""

from __future__ import annotations

import re
from pathlib import Path

import openai
import pytest
from servers import echo_server, replay_server
from shared import CITY_TOOLS, tool_history

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


@pytest.fixture(scope="module")
def client():
    with echo_server(allow_request_chat_templates=True, tool_call_parser="mistral") as (base, _):
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)


def echoed(client, name: str, messages=None, **kwargs) -> str:
    """The rendered prompt (content plus any calls the parser read out of it)."""
    reply = client.chat.completions.create(
        model="echo",
        messages=messages or tool_history(),
        max_tokens=1500,
        extra_body={"chat_template_kwargs": {"chat_template": (TEMPLATES / name).read_text()}},
        **kwargs,
    )
    message = reply.choices[0].message
    calls = "".join(f"<{c.function.name} {c.function.arguments}>" for c in message.tool_calls or [])
    return (message.content or "") + calls


@pytest.mark.parametrize(
    "name", ["content_null_split.jinja", "content_null_concat.jinja", "content_null_tojson.jinja"]
)
def test_history_with_null_content_renders(client, name):
    text = echoed(client, name, tools=CITY_TOOLS)
    assert "18C, sunny" in text and "And tomorrow?" in text


def test_client_ids_map_to_the_same_nine_characters_every_turn(client):
    first = echoed(client, "mistral_id9.jinja", tool_choice="none")
    ids = re.findall(r'"(?:id|call_id)": "([A-Za-z0-9]{9})"', first)
    assert len(ids) == 2 and ids[0] == ids[1]
    later = [*tool_history(), {"role": "assistant", "content": "Also sunny."}]
    assert ids[0] in echoed(client, "mistral_id9.jinja", later, tool_choice="none")


def test_a_template_without_system_role_gets_the_system_text_in_the_user_turn(client):
    text = echoed(client, "no_system_role.jinja")
    assert re.search(r"<start_of_turn>user\s*Be brief\.\s+Weather in Paris\?", text)


def test_the_slash_switch_turns_thinking_off(client):
    text = echoed(client, "think_slash_switch.jinja", tool_history()[:2], reasoning_effort="none")
    assert text.endswith("<think></think>") and "/no_think" not in text


def test_the_budget_switch_gets_zero_when_thinking_is_off(client):
    text = echoed(client, "think_budget.jinja", tool_history()[:2], reasoning_effort="none")
    assert "Your thinking budget is 0 tokens." in text


def test_the_effort_switch_gets_the_requests_effort(client):
    text = echoed(
        client, "think_reasoning_effort.jinja", tool_history()[:2], reasoning_effort="high"
    )
    assert "Reasoning: high" in text


def test_injected_tools_teach_the_syntax_the_parser_reads():
    """DeepSeek-V3.1 prints no tools: they are injected with an example call in its own
    syntax, and the echoed prompt's example comes back as a parsed call."""
    with echo_server(allow_request_chat_templates=True, tool_call_parser="deepseek_v31") as (
        base,
        _,
    ):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        text = echoed(client, "args_string_concat.jinja", tool_history()[:2], tools=CITY_TOOLS)
    assert "<tool_call>" not in text
    assert '<get_weather {"city": "value"}>' in text


def test_generated_ids_have_the_familys_shape():
    output = '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]'
    with replay_server(output, tool_call_parser="mistral") as (base, _):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        kwargs = dict(model="replay", messages=tool_history()[:2], tools=CITY_TOOLS)
        whole = client.chat.completions.create(**kwargs)
        chunks = list(client.chat.completions.create(stream=True, **kwargs))
    ids = [whole.choices[0].message.tool_calls[0].id]
    ids += [c.id for ch in chunks for c in ch.choices[0].delta.tool_calls or [] if c.id]
    assert len(ids) == 2 and all(re.fullmatch(r"[A-Za-z0-9]{9}", i) for i in ids)
