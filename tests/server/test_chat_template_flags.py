"""``serve --chat-template`` and ``--chat-template-kwargs``: the operator's template and
variables act like a shipped template's (parser detection, the thinking switch, what
count_tokens counts), a request's own fields win over the variables, and bad values stop
the server before anything loads."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import click
import openai
import pytest
from pydantic import ValidationError
from servers import cli_server

from vllm_mlx.fleet.settings import ModelSettings
from vllm_mlx.options import ServeOptions
from vllm_mlx.server.serve_command import serve

THINK_TEMPLATE = Path(__file__).resolve().parents[1] / "templates" / "think_enable_thinking.jinja"
QUESTION = [{"role": "user", "content": "Why is the sky blue?"}]


def parsed(*args: str) -> ServeOptions:
    context = serve.make_context("serve", list(args))
    return ServeOptions.of(**{k: v for k, v in context.params.items() if k != "model"})


def test_a_template_is_a_file_or_the_text_itself():
    assert parsed(f"--chat-template={THINK_TEMPLATE}").serving.chat_template == (
        THINK_TEMPLATE.read_text()
    )
    inline = "{% for m in messages %}{{ m.content }}{% endfor %}"
    assert parsed("--chat-template", inline).serving.chat_template == inline


@pytest.mark.parametrize(
    "args",
    [
        ("--chat-template", "no/such/template.jinja"),
        ("--chat-template-kwargs", "{not json"),
        ("--chat-template-kwargs", '["enable_thinking"]'),
        ("--chat-template-kwargs", '{"add_generation_prompt": false}'),
        ("--chat-template-kwargs", '{"chat_template": "{{ 1 }}"}'),
    ],
)
def test_bad_values_stop_the_server_at_start_up(args):
    with pytest.raises(click.BadParameter):
        parsed(*args)


def test_models_toml_variables_are_checked_like_the_flag():
    entry = ModelSettings.model_validate({"chat_template_kwargs": {"enable_thinking": False}})
    assert entry.options() == {"chat_template_kwargs": {"enable_thinking": False}}
    for bad in ({"messages": []}, {"chat_template": "x"}):
        with pytest.raises(ValidationError):
            ModelSettings.model_validate({"chat_template_kwargs": bad})


@pytest.fixture(scope="module")
def thinking_off(tmp_path_factory):
    """The default model's tokenizer answering "Answer" under the operator's thinking
    template with thinking switched off by default."""
    folder = tmp_path_factory.mktemp("template_flags")
    (folder / "out.txt").write_text("Answer")
    kwargs = json.dumps({"enable_thinking": False})
    args = ("--replay", str(folder / "out.txt"), "--chat-template", str(THINK_TEMPLATE))
    with cli_server(
        *args, "--chat-template-kwargs", kwargs, log_path=folder / "server.log"
    ) as base:
        yield base


def test_the_variables_switch_thinking_off_and_a_request_switches_it_back(thinking_off):
    client = openai.OpenAI(base_url=f"{thinking_off}/v1", api_key="unused", max_retries=0)
    plain = client.chat.completions.create(model="m", messages=QUESTION).choices[0].message
    assert (plain.content, getattr(plain, "reasoning_content", None)) == ("Answer", None)
    # the template's switch was detected from the override: the request's own variable
    # opens the thinking block, and the detected reasoning parser reads the answer as such
    thinking = client.chat.completions.create(
        model="m",
        messages=QUESTION,
        extra_body={"chat_template_kwargs": {"enable_thinking": True}},
    ).choices[0]
    assert thinking.message.content is None
    assert thinking.message.reasoning_content == "Answer"


def test_count_tokens_counts_the_operator_template(thinking_off):
    client = anthropic.Anthropic(base_url=thinking_off, api_key="unused", max_retries=0)
    closed = client.messages.count_tokens(model="m", messages=QUESTION).input_tokens
    opened = client.messages.count_tokens(
        model="m", messages=QUESTION, thinking={"type": "enabled", "budget_tokens": 1024}
    ).input_tokens
    # off: "<think>\n\n</think>\n\n" closes the block in the prompt; on: "<think>\n" opens it
    assert closed > opened
