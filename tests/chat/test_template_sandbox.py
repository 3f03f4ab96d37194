"""Chat templates render in a bounded sandbox: the same text as transformers for ordinary
templates, a bounded error for hostile ones, and request templates only when allowed."""

from __future__ import annotations

import openai
import pytest
from servers import echo_server
from tiny_gguf import CHAT_TEMPLATE
from tiny_models import QWEN3_STYLE_CHAT_TEMPLATE

from vllm_mlx.chat import template_probe
from vllm_mlx.chat.jinja_sandbox import RenderLimits
from vllm_mlx.chat.template import (
    MAX_REQUEST_TEMPLATE_CHARS,
    TemplateLimitError,
    render_chat,
    special_tokens,
    template_variables,
)
from vllm_mlx.chat.template_kwargs import RENDERER_KEYS, ChatTemplateError
from vllm_mlx.models.loader import load_tokenizer_only

# Exercises what real templates use: namespace, loop controls, macros, tojson with options,
# filters, the generation tag and special tokens.
FEATURES_TEMPLATE = (
    "{{ bos_token }}{% set ns = namespace(last_user=-1) %}"
    "{% macro block(role, text) %}<|{{ role }}|>{{ text | trim }}{{ eos_token }}\n{% endmacro %}"
    "{% for m in messages %}{% if m.role == 'user' %}{% set ns.last_user = loop.index0 %}"
    "{% endif %}{% endfor %}"
    "{% if tools %}{{ block('tools', tools | map(attribute='function') | map(attribute='name')"
    " | join(', ')) }}{{ tools | tojson(indent=2, sort_keys=true) }}\n{% endif %}"
    "{% for m in messages %}{% if m.role == 'tool' %}{% continue %}{% endif %}"
    "{% if m.role == 'assistant' %}{% generation %}{{ block('assistant', m.content or '') }}"
    "{% endgeneration %}{% if m.reasoning_content %}[{{ m.reasoning_content }}]{% endif %}"
    "{% for call in m.tool_calls or [] %}{{ call.function.arguments | tojson }}{% endfor %}"
    "{% else %}{{ block(m.role, m.content) }}{% endif %}"
    "{% if loop.index0 == ns.last_user %}(last user){% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% if greeting is defined %}{{ greeting }}"
    "{% endif %}{% endif %}"
)

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "  Weather in Paris? é ✓ "},
    {
        "role": "assistant",
        "content": None,
        "reasoning_content": "Need the tool.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "18C"},
    {"role": "user", "content": "Thanks"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
NESTED_LOOPS = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer_only(None).tokenizer


class WithTemplate:
    """The real tokenizer with another chat template."""

    def __init__(self, tokenizer, template):
        self._tokenizer = tokenizer
        self.chat_template = template

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def transformers_render(tokenizer, template, messages, tools, kwargs):
    """What transformers renders from the same prepared variables."""
    variables = template_variables(template, special_tokens(tokenizer), messages, tools)
    rest = {k: v for k, v in variables.items() if k not in {"messages", "tools", "documents"}}
    return tokenizer.apply_chat_template(
        variables["messages"],
        tools=variables.get("tools") or variables.get("custom_tools"),
        tokenize=False,
        add_generation_prompt=True,
        chat_template=template,
        **{**rest, **kwargs},
    )


@pytest.mark.parametrize("name", ["model", "qwen3_style", "plain", "features"])
@pytest.mark.parametrize("with_tools", [False, True])
def test_ordinary_templates_render_as_transformers_does(tokenizer, name, with_tools):
    template = {
        "model": tokenizer.chat_template,
        "qwen3_style": QWEN3_STYLE_CHAT_TEMPLATE,
        "plain": CHAT_TEMPLATE,
        "features": FEATURES_TEMPLATE,
    }[name]
    tools = TOOLS if with_tools else None
    kwargs = {"enable_thinking": False, "greeting": "Hi"}
    expected = transformers_render(tokenizer, template, MESSAGES, tools, kwargs)
    rendered = render_chat(
        WithTemplate(tokenizer, template), MESSAGES, tools=tools, template_kwargs=kwargs
    )
    assert rendered.text == expected


# name -> (template, what stops it)
HOSTILE = {
    "nested loops": (NESTED_LOOPS, "steps"),
    "doubling macro": (
        "{% macro d(n) %}{% if n > 0 %}{{ d(n - 1) }}{{ d(n - 1) }}{% else %}x{% endif %}"
        "{% endmacro %}{{ d(60) }}",
        "steps",
    ),
    "doubling string": (
        "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}{{ ns.s | length }}",
        "produced more than",
    ),
    "nested macro output": (
        "{% macro m(s) %}{{ s }}{{ s }}{% endmacro %}"
        + "{{ "
        + "m(" * 30
        + "'x' * 1000"
        + ")" * 30
        + " }}",
        "produced more than",
    ),
    "literal in loops": (
        "{% for a in range(100000) %}{% for b in range(100000) %}"
        + "x" * 64
        + "{% endfor %}{% endfor %}",
        "steps",
    ),
    "string times": ("{{ 'x' * 10 ** 9 }}", "repeated value"),
    "repeated list": ("{{ ([1] * 100000) * 1000 }}", "repeated value"),
    "power": ("{{ 7 ** 99999999 }}", "power is too large"),
    "center": ("{{ 'x' | center(10 ** 9) }}", "integer argument"),
    "format width": ("{{ '{:>999999999}'.format(1) }}", "format width"),
    "percent width": ("{{ '%999999999d' % 1 }}", "format width"),
    "format filter": ("{{ '%999999999d' | format(1) }}", "format width"),
    "replace": ("{% set s = 'x' * 1000000 %}{{ s.replace('', s) }}", "replaced text"),
    "replace filter": ("{% set s = 'x' * 1000000 %}{{ s | replace('x', s) }}", "replaced text"),
    "join": ("{% set s = 'x' * 1000000 %}{{ s.join(range(100000) | list) }}", "joined text"),
    "join of a generator": (
        "{{ range(20000) | map('string') | join('x' * 1000000) }}",
        "joined text",
    ),
    "indent": ("{% set s = 'x\n' * 1000000 %}{{ s | indent('y' * 1000) }}", "indented text"),
    "tojson indent": ("{{ range(1000) | list | tojson(indent=999999) }}", "tojson"),
    "tojson separators": ("{{ [1, 2] | tojson(separators=('x' * 100000, ':')) }}", "tojson"),
    "split": ("{% set s = 'ab ' * 5000000 %}{{ s.split() | length }}", "split text"),
    "list of characters": ("{% set s = 'ab' * 5000000 %}{{ s | list | length }}", "characters"),
}


@pytest.mark.parametrize(("template", "reason"), list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_templates_are_stopped_by_the_budget(tokenizer, template, reason):
    limits = RenderLimits(max_steps=200_000, max_seconds=60)
    with pytest.raises(TemplateLimitError, match="the chat template was stopped") as info:
        render_chat(
            tokenizer,
            MESSAGES[:2],
            template_kwargs={"chat_template": template},
            allow_request_templates=True,
            limits=limits,
        )
    assert reason in str(info.value)


def test_the_probes_of_a_runaway_template_share_one_deadline(monkeypatch):
    # The first probe runs to the shared deadline; the other probes are not rendered at all.
    monkeypatch.setattr(template_probe, "PROBE_SECONDS", 0.2)
    renders = []
    render = template_probe.render_bounded

    def counted(*args, **kwargs):
        renders.append(args[0])
        return render(*args, **kwargs)

    monkeypatch.setattr(template_probe, "render_bounded", counted)
    runaway = HOSTILE["doubling macro"][0] + "{# probed alone #}"
    profile = template_probe.profile_template(runaway, {})
    assert profile.error == "no probe conversation renders"
    assert len(renders) == 1


def test_nested_loops_are_stopped_by_the_default_budget(tokenizer):
    with pytest.raises(TemplateLimitError, match="steps|longer than"):
        render_chat(
            tokenizer,
            MESSAGES[:2],
            template_kwargs={"chat_template": NESTED_LOOPS},
            allow_request_templates=True,
        )


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ messages.append(1) }}",
        "{% set ns = namespace(_x=1) %}",
        "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
        "{{ raise_exception('no') }}",
    ],
)
def test_sandbox_escapes_and_errors_are_template_errors(tokenizer, template):
    with pytest.raises(ChatTemplateError):
        render_chat(
            tokenizer,
            MESSAGES[:2],
            template_kwargs={"chat_template": template},
            allow_request_templates=True,
        )


def test_request_templates_are_refused_unless_allowed(tokenizer):
    custom = "{% for m in messages %}[{{ m.content }}]{% endfor %}"
    with pytest.raises(ChatTemplateError, match="does not accept chat templates"):
        render_chat(tokenizer, MESSAGES[:2], template_kwargs={"chat_template": custom})
    allowed = render_chat(
        tokenizer,
        MESSAGES[:2],
        template_kwargs={"chat_template": custom},
        allow_request_templates=True,
    )
    assert allowed.text == "[Be brief.][  Weather in Paris? é ✓ ]"


def test_a_named_model_template_may_be_chosen(tokenizer):
    named = WithTemplate(
        tokenizer, {"default": CHAT_TEMPLATE, "short": "{{ messages[-1].content }}"}
    )
    assert render_chat(named, MESSAGES[:2]).text.startswith("<|im_start|>system")
    chosen = render_chat(named, MESSAGES[:2], template_kwargs={"chat_template": "short"})
    assert chosen.text == "  Weather in Paris? é ✓ "


@pytest.mark.parametrize(
    "key",
    ["tokenize", "add_generation_prompt", "conversation", "tools", "documents", "messages"],
)
def test_renderer_owned_kwargs_are_a_clear_error(tokenizer, key):
    assert key in RENDERER_KEYS
    with pytest.raises(ChatTemplateError, match=f"chat_template_kwargs.{key} is set by the server"):
        render_chat(tokenizer, MESSAGES[:2], template_kwargs={key: True})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tokenize": True}, "chat_template_kwargs.tokenize"),
        ({"add_generation_prompt": False}, "chat_template_kwargs.add_generation_prompt"),
        ({"chat_template": NESTED_LOOPS}, "does not accept chat templates"),
    ],
)
def test_the_server_answers_400_for_template_kwargs_it_owns(openai_client, kwargs, message):
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=1,
            extra_body={"chat_template_kwargs": kwargs},
        )
    assert message in str(info.value)


def test_an_oversized_request_template_is_refused_before_compiling(tokenizer):
    huge = "{{ 1 }}" * (MAX_REQUEST_TEMPLATE_CHARS // 7 + 1)
    with pytest.raises(ChatTemplateError, match="characters"):
        render_chat(
            tokenizer,
            MESSAGES[:2],
            template_kwargs={"chat_template": huge},
            allow_request_templates=True,
        )


def test_an_operator_may_allow_request_templates():
    """With the operator's opt-in the request's own template is what the model sees."""
    template = "{% for m in messages %}<<{{ m.content }}>>{% endfor %}"
    with echo_server(allow_request_chat_templates=True) as (base, _runtime):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused")
        reply = client.chat.completions.create(
            model="echo",
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=64,
            extra_body={"chat_template_kwargs": {"chat_template": template}},
        )
    assert reply.choices[0].message.content == "<<Hi>>"
