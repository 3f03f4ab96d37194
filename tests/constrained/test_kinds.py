"""Every constraint kind on llguidance, token by token and on a random-weight model: regex,
choice, Lark, GBNF (llama.cpp dialect), structural tags; invalid specs are errors naming the
field; each composes with the thinking-aware processor (free reasoning, matching answer)."""

from __future__ import annotations

import json
import re

import pytest
from tiny_models import build_tiny_model

from constrained.forcing import accepts, sample_ids
from vllm_mlx.constrained import (
    Constraint,
    ConstraintError,
    build_logits_processors,
    content_constraint,
    grammar_constraint,
)
from vllm_mlx.families.catalog import REASONING_FORMATS

REGEX = r"(yes|no)-[0-9]{1,3}"
CHOICES = ["red", "green", "blue sky"]
LARK = 'start: "(" item ("," item)* ")"\nitem: /[a-c]{1,2}/'
GBNF = 'root ::= "(" item ("," item)* ")"\nitem ::= [a-c] [a-c]?'
LANG = re.compile(r"\([a-c]{1,2}(,[a-c]{1,2})*\)")
# (kind, spec, accepted texts, rejected texts, a full-match test for generated answers)
CASES = [
    ("regex", REGEX, ["yes-1", "no-123"], ["yes-1234", "maybe-1", "yes-"], re.compile(REGEX)),
    ("choice", CHOICES, CHOICES, ["re", "redd", "blue"], re.compile("red|green|blue sky")),
    ("lark", LARK, ["(a)", "(ab,c,cc)"], ["()", "(abc)", "(a,)"], LANG),
    ("gbnf", GBNF, ["(a)", "(ab,c,cc)"], ["()", "(abc)", "(a,)"], LANG),
    ("gbnf", LARK, ["(a)", "(ab,c)"], ["(d)"], LANG),  # Lark text given as a grammar
]


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_model(tokenizer, seed=1)


@pytest.mark.parametrize(("kind", "spec", "good", "bad", "_"), CASES)
def test_kind_accepts_matches_and_rejects_the_rest(tokenizer, kind, spec, good, bad, _):
    for text in good:
        assert accepts(tokenizer, content_constraint(tokenizer, Constraint(kind, spec)), text)
    for text in bad:
        assert not accepts(tokenizer, content_constraint(tokenizer, Constraint(kind, spec)), text)


@pytest.mark.parametrize(("kind", "spec", "_", "__", "pattern"), CASES)
def test_random_weights_answer_in_the_language(model, tokenizer, kind, spec, _, __, pattern):
    prompt = tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    for seed in range(3):
        processors = build_logits_processors(tokenizer, constraint=Constraint(kind, spec))
        text = tokenizer.decode(sample_ids(model, tokenizer, prompt, processors, seed, 120))
        assert pattern.fullmatch(text), text
        assert processors[0].gave_up is None


@pytest.mark.parametrize(("kind", "spec", "_", "__", "pattern"), CASES[:3])
def test_reasoning_stays_free_and_the_answer_matches(model, tokenizer, kind, spec, _, __, pattern):
    tail = "<|im_start|>assistant\n<think>\n"
    prompt = tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n" + tail)
    for seed in range(3):
        (processor,) = build_logits_processors(
            tokenizer,
            constraint=Constraint(kind, spec),
            reasoning_format=REASONING_FORMATS["qwen3"],
            prompt_tail=tail,
            thinking_budget=6,
        )
        text = tokenizer.decode(sample_ids(model, tokenizer, prompt, [processor], seed, 120))
        reasoning, _, answer = text.partition("</think>")
        assert reasoning  # unconstrained: random text, not in the answer's language
        assert pattern.fullmatch(answer), text


def test_structural_tag_constrains_only_inside_the_tag(tokenizer):
    tag = {
        "type": "structural_tag",
        "structures": [
            {
                "begin": "<fn=add>",
                "schema": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}},
                    "required": ["a"],
                    "additionalProperties": False,
                },
                "end": "</fn>",
            }
        ],
        "triggers": ["<fn="],
    }
    make = lambda: content_constraint(tokenizer, Constraint("structural_tag", tag))  # noqa: E731
    assert accepts(tokenizer, make(), 'any text <fn=add>{"a": 1}</fn> more')
    assert accepts(tokenizer, make(), "no tag at all")
    assert not accepts(tokenizer, make(), 'x <fn=add>{"a": "one"}</fn>')


@pytest.mark.parametrize(
    ("kind", "spec", "message"),
    [
        ("regex", "[0-9", "regex"),
        ("regex", "", "regular expression"),
        ("choice", [], "non-empty list"),
        ("choice", ["a", 3], "strings"),
        ("lark", "start: undefined_rule", "lark"),
        ("gbnf", "root ::= (", "gbnf"),
        ("json_schema", {"type": "strin"}, "invalid JSON schema"),
        ("structural_tag", {"structures": [], "triggers": ["<f"]}, "structures"),
        ("structural_tag", {"structures": [{"begin": "<g>"}], "triggers": ["<f"]}, "trigger"),
    ],
)
def test_invalid_specs_name_their_field(tokenizer, kind, spec, message):
    with pytest.raises(ConstraintError, match=message) as info:
        build_logits_processors(tokenizer, constraint=Constraint(kind, spec, field="my.field"))
    assert info.value.param == "my.field"


def test_grammar_constraint_is_the_custom_tool_entry_point(tokenizer):
    assert accepts(tokenizer, grammar_constraint(tokenizer, "lark", LARK), "(a,b)")
    assert accepts(tokenizer, grammar_constraint(tokenizer, "regex", REGEX), "no-7")
    with pytest.raises(ConstraintError, match="syntax") as info:
        grammar_constraint(tokenizer, "peg", "x", field="tools.0.format")
    assert info.value.param == "tools.0.format"


def test_a_grammar_cannot_combine_with_a_forced_call(tokenizer):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with pytest.raises(ConstraintError, match="tool_choice") as info:
        build_logits_processors(
            tokenizer,
            constraint=Constraint("regex", "a+", field="guided_regex"),
            tool_choice="required",
            tools=tools,
        )
    assert info.value.param == "guided_regex"


def test_json_schema_text_is_accepted(tokenizer):
    schema = json.dumps({"type": "object", "properties": {"a": {"type": "boolean"}}})
    (processor,) = build_logits_processors(tokenizer, constraint=Constraint("json_schema", schema))
    assert accepts(tokenizer, processor.constraint, '{"a": true}')
