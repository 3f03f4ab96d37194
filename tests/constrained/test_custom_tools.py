"""Custom (free-form) tools below the surfaces: their ``format`` read from either OpenAI
shape, which forced call becomes the raw constrained input, the input checked against a
grammar after an unforced call, the input decoded from streamed JSON arguments, and the raw
input wrapped as one call; the pipeline on a thinking random-weight model keeps reasoning
free and writes the input in the grammar token by token."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tiny_models import build_tiny_model, build_tiny_tokenizer

from vllm_mlx.chat.custom_tools import RawCallStream
from vllm_mlx.chat.stream import make_output_stream
from vllm_mlx.constrained import Constraint, ConstraintError, content_constraint, text_mismatch
from vllm_mlx.constrained.custom_tools import (
    CustomTool,
    InputDeltas,
    arguments_of,
    check_grammars,
    forced_raw,
    from_format,
    function_form,
    input_mismatch,
    input_of,
)
from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.families.message import ParsedMessage, ToolCall
from vllm_mlx.options import RuntimeOptions
from vllm_mlx.pipeline import Pipeline
from vllm_mlx.reasoning import ReasoningParserManager
from vllm_mlx.request import ChatRequest, RequestError, Sampling
from vllm_mlx.tool_parsers import ToolParserManager

LARK = 'start: "(" /[a-c]/ ("," /[a-c]/)? ")"'
PAREN = re.compile(r"\([a-c](,[a-c])?\)")
REGEX = r"(yes|no)-[0-9]{1,3}"
# Codex's apply_patch grammar, as Codex sends it (source: openai/codex,
# core/src/tools/handlers/apply_patch.lark)
APPLY_PATCH = (Path(__file__).parent / "apply_patch.lark").read_text()


def test_format_shapes_of_both_apis_and_their_errors():
    assert from_format("t", None, "f") == CustomTool("t", field="f")
    assert from_format("t", {}, "f").syntax == "text"
    assert from_format("t", {"type": "text"}, "f").grammar is None
    flat = from_format("t", {"type": "grammar", "syntax": "lark", "definition": LARK}, "f")
    assert flat == CustomTool("t", "lark", LARK, "f.definition")
    shown = function_form(flat, "Pick.")["function"]
    assert shown["parameters"]["required"] == ["input"] and LARK in shown["description"]
    nested = {"type": "grammar", "grammar": {"syntax": "regex", "definition": REGEX}}
    assert from_format("t", nested, "f").field == "f.grammar.definition"
    bad = [
        ({"type": "json"}, "f.type"),
        ({"type": "grammar", "syntax": "ebnf", "definition": "x"}, "f.syntax"),
        ({"type": "grammar", "grammar": {"syntax": "regex"}}, "f.grammar.definition"),
        ({"type": "grammar", "syntax": "regex", "definition": ""}, "f.definition"),
        ("text", "f"),
    ]
    for fmt, param in bad:
        with pytest.raises(ConstraintError) as info:
            from_format("t", fmt, "f")
        assert info.value.param == param, fmt


def test_invalid_grammars_name_their_field(tokenizer):
    for syntax, definition in [("lark", "start: ("), ("regex", "[0-")]:
        tool = CustomTool("t", syntax, definition, "tools.3.format.definition")
        with pytest.raises(ConstraintError) as info:
            check_grammars(tokenizer, [tool])
        assert info.value.param == "tools.3.format.definition"
    check_grammars(tokenizer, [CustomTool("t", "lark", LARK), CustomTool("u")])


def test_which_forced_call_is_the_raw_input():
    grammar, text = CustomTool("g", "regex", REGEX), CustomTool("t")
    tools = [function_form(grammar, None), function_form(text, None)]
    named = {"type": "function", "function": {"name": "g"}}
    assert forced_raw(named, tools, [grammar, text]) is grammar
    assert (
        forced_raw({"type": "function", "function": {"name": "t"}}, tools, [grammar, text]) is None
    )
    assert forced_raw("required", tools[:1], [grammar]) is grammar
    assert forced_raw("required", tools, [grammar, text]) is None  # several: family grammar
    assert forced_raw("auto", tools[:1], [grammar]) is None


def test_input_round_trips_through_arguments():
    for text in ['*** Begin Patch\n"quoted" \\ tab\t é 你好 🎉', ""]:
        assert input_of(arguments_of(text)) == text
    assert input_of("not json") == "not json"
    assert input_of('{"other": 1}') == '{"other": 1}'


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_input_deltas_decode_escapes_split_anywhere(size):
    text = 'line "one"\n\\two\t é \U0001f389 end'
    arguments = json.dumps({"input": text})  # ASCII escapes, a surrogate pair among them
    deltas = InputDeltas()
    streamed = "".join(deltas.feed(arguments[i : i + size]) for i in range(0, len(arguments), size))
    assert streamed == text and deltas.rest() == ""


def test_input_deltas_of_another_shape_come_whole_at_the_end():
    deltas = InputDeltas()
    arguments = json.dumps({"note": "x" * 80, "input": "abc"})
    assert deltas.feed(arguments) == ""
    assert deltas.rest() == "abc"


def test_grammar_check_after_generation(tokenizer):
    assert text_mismatch(tokenizer, CustomTool("t", "lark", LARK).grammar, "(a,b)") is None
    assert "ends before" in text_mismatch(tokenizer, CustomTool("t", "lark", LARK).grammar, "(a")
    assert text_mismatch(tokenizer, CustomTool("t", "regex", REGEX).grammar, "maybe") is not None
    patch = CustomTool("apply_patch", "lark", APPLY_PATCH).grammar
    update = "*** Begin Patch\n*** Update File: a.py\n@@ def f():\n-    return 1\n+    return 2\n"
    assert text_mismatch(tokenizer, patch, update + "*** End Patch\n") is None
    why = text_mismatch(tokenizer, patch, "*** Begin Patch\n*** Add File: a.py\nprint(1)\n")
    assert why is not None and "\n" not in why  # one line: it travels in the response body
    tools = [CustomTool("pick", "regex", REGEX, "tools.0.format.definition"), CustomTool("free")]
    good = ParsedMessage(tool_calls=[ToolCall("c1", "pick", arguments_of("no-12"))])
    free = ParsedMessage(tool_calls=[ToolCall("c1", "free", arguments_of("anything"))])
    bad = ParsedMessage(tool_calls=[ToolCall("c1", "pick", arguments_of("perhaps"))])
    assert input_mismatch(tokenizer, good, tools) is None
    assert input_mismatch(tokenizer, free, tools) is None
    why = input_mismatch(tokenizer, bad, tools)
    assert why is not None and why.startswith("tools.0.format.definition (pick)")


def test_raw_stream_wraps_the_answer_as_one_call():
    inner = make_output_stream(
        reasoning_format=ReasoningParserManager.format("deepseek_r1"),
        tool_format=None,
        prompt_tail="<think>\n",
    )
    stream = RawCallStream(inner, "pick")
    deltas = [stream.feed(p) for p in ["I think", "</think>", '(a,"b")', "\n"]]
    deltas.append(stream.finish())
    message = stream.message
    assert message.reasoning_content == "I think" and message.content is None
    (call,) = message.tool_calls
    assert call.name == "pick" and input_of(call.arguments) == '(a,"b")\n'
    pieces = [c for d in deltas for c in d.tool_calls]
    assert pieces[0].id == call.id and pieces[0].name == "pick"
    assert "".join(c.arguments for c in pieces) == call.arguments
    cut = RawCallStream(make_output_stream(reasoning_format=None, tool_format=None), "pick")
    cut.finish()
    assert cut.message.tool_calls == []  # nothing written: no call


@pytest.fixture(scope="module")
def pipeline():
    tokenizer = build_tiny_tokenizer()
    engine = Engine(ModelBatchSource(build_tiny_model(tokenizer)), tokenizer)
    yield Pipeline(
        engine,
        context_length=2048,
        reasoning_format=ReasoningParserManager.format("deepseek_r1"),
        tool_format=ToolParserManager.format("hermes"),
        options=RuntimeOptions.of(default_thinking_token_budget=4),
    )
    engine.close()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    ("syntax", "definition", "pattern"),
    [("lark", LARK, PAREN), ("regex", REGEX, re.compile(REGEX))],
)
def test_forced_call_of_a_random_model_matches_the_grammar(
    pipeline, syntax, definition, pattern, seed
):
    tool = CustomTool("pick", syntax, definition, "tools.0.format.definition")
    request = ChatRequest(
        messages=[{"role": "user", "content": "Hello"}],
        sampling=Sampling(temperature=1.0, seed=seed),
        max_tokens=60,
        tools=[function_form(tool, "Pick one.")],
        custom_tools=[tool],
        tool_choice={"type": "function", "function": {"name": "pick"}},
    )
    result = pipeline.complete_sync(pipeline.prepare_chat(request))
    assert result.message.reasoning_content  # free (budget 4)
    (call,) = result.message.tool_calls
    assert pattern.fullmatch(input_of(call.arguments)), call.arguments
    assert result.finish_reason == "tool_calls" and result.constraint_gave_up is None


# (seed, max_tokens, how it ends): one input cut off by the limit, one the model finishes.
APPLY_PATCH_RUNS = [(0, 120, "length"), (7, 200, "tool_calls")]


@pytest.mark.parametrize(("seed", "max_tokens", "ends"), APPLY_PATCH_RUNS)
def test_forced_apply_patch_of_a_random_model_is_a_patch(
    pipeline, tokenizer, seed, max_tokens, ends
):
    """Codex's own grammar: every token of the input is accepted by it; an input cut off by
    the limit is a valid prefix, a finished one a whole patch."""
    tool = CustomTool("apply_patch", "lark", APPLY_PATCH, "tools.0.format.definition")
    request = ChatRequest(
        messages=[{"role": "user", "content": "Add a file."}],
        sampling=Sampling(temperature=1.0, seed=seed),
        max_tokens=max_tokens,
        tools=[function_form(tool, "Edit files.")],
        custom_tools=[tool],
        tool_choice="required",
    )
    result = pipeline.complete_sync(pipeline.prepare_chat(request))
    (call,) = result.message.tool_calls
    text = input_of(call.arguments)
    assert text.startswith("*** Begin Patch\n*** ")
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert content_constraint(tokenizer, tool.grammar).sync(ids), text
    # the seeds are chosen to end both ways; if sampling changes, pick seeds that still do
    assert result.finish_reason == ends, (seed, result.finish_reason)
    if ends == "tool_calls":
        assert text_mismatch(tokenizer, tool.grammar, text) is None, text
        assert text.rstrip("\n").endswith("*** End Patch")


def test_forced_grammar_call_with_another_constraint_is_refused(pipeline):
    request = ChatRequest(
        messages=[{"role": "user", "content": "Hello"}],
        tools=[function_form(CustomTool("pick"), None)],
        custom_tools=[CustomTool("pick", "regex", REGEX)],
        tool_choice="required",
        constraint=Constraint("regex", "a+", "guided_regex"),
    )
    with pytest.raises(RequestError) as info:
        pipeline.prepare_chat(request)
    assert info.value.param == "guided_regex"
