"""Every tool-call family: round trips through its own format, real model outputs, malformed
and truncated calls, in both modes."""

from __future__ import annotations

import json

import pytest
from parser_cases import (
    WEATHER_TOOLS,
    assert_same_in_every_mode,
    calls_of,
    parse,
    shape,
    stream,
)

from vllm_mlx.families.catalog import REASONING_FORMATS, TOOL_CALL_FORMATS
from vllm_mlx.families.dialects import DIALECTS

MARKED = [n for n in TOOL_CALL_FORMATS if n != "harmony"]
TRICKY = {
    "city": 'São "Paulo" \\ <b>&amp; 東京\nline2',
    "days": 3,
    "opts": {"nested": {"deep": [1, 2.5, None, True]}, "s": "}{]["},
    "tags": ["a", "b"],
}
CALLS = [("get_weather", TRICKY), ("noop", {})]


def _variants(name):
    fmt = TOOL_CALL_FORMATS[name]
    return [fmt, *fmt.variants]


@pytest.mark.parametrize("name", MARKED)
def test_plain_content_passes_through(name):
    text = "The answer is 42. Nothing to call here, {braces} and [brackets] too."
    msg = assert_same_in_every_mode(text, name, tools=WEATHER_TOOLS)
    assert msg.content == text and msg.tool_calls == []


@pytest.mark.parametrize("name", MARKED)
def test_one_call_then_several_calls_round_trip(name):
    for fmt in _variants(name):
        one = assert_same_in_every_mode(fmt.render_calls(CALLS[:1]), name, tools=WEATHER_TOOLS)
        assert calls_of(one) == CALLS[:1] and one.content is None
        both = assert_same_in_every_mode(fmt.render_calls(CALLS), name, tools=WEATHER_TOOLS)
        assert calls_of(both) == CALLS
        assert len({c.id for c in both.tool_calls}) == 2


@pytest.mark.parametrize("name", MARKED)
def test_content_before_a_call(name):
    for fmt in _variants(name):
        if len((fmt.section_start + fmt.call_start).split("\n")[0]) <= 1:
            continue  # bare `[`/`{` openings count only at the start of the output
        text = "Let me check.\n\n" + fmt.render_calls(CALLS[:1])
        msg = assert_same_in_every_mode(text, name, tools=WEATHER_TOOLS)
        assert msg.content == "Let me check."
        assert calls_of(msg) == CALLS[:1]


@pytest.mark.parametrize("name", MARKED)
def test_truncated_before_the_arguments_stays_content(name):
    for fmt in _variants(name):
        full = fmt.render_calls(CALLS[:1])
        opening = fmt.section_start + fmt.call_start
        cut = full[: len(opening) + 5]
        msg = assert_same_in_every_mode("Hi " + cut, name, tools=WEATHER_TOOLS)
        assert msg.tool_calls == []
        assert msg.content == ("Hi " + cut).rstrip()


@pytest.mark.parametrize("name", MARKED)
def test_partial_marker_is_held_then_released(name):
    opening = TOOL_CALL_FORMATS[name].section_start + TOOL_CALL_FORMATS[name].call_start
    trigger = opening.split("\n")[0][:4]
    text = "abc " + trigger
    joined, _, deltas = stream(text, [1], name)
    assert joined.content == text.rstrip()
    # what may start a call is held (with the space before it), then released at the end
    assert "".join(d.content for d in deltas[:-1]) == "abc"
    assert deltas[-1].content == " " + trigger


def test_hermes_real_qwen3_output_and_argument_streaming():
    text = (
        "I'll look that up.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris", "days": 12}}\n'
        "</tool_call>\n<tool_call>\n"
        '{"name": "noop", "arguments": {}}\n</tool_call>'
    )
    msg = assert_same_in_every_mode(text, "hermes")
    assert msg.content == "I'll look that up."
    assert [c.arguments for c in msg.tool_calls] == ['{"city": "Paris", "days": 12}', "{}"]
    _, _, deltas = stream(text, [1], "hermes")
    pieces = [tc.arguments for d in deltas for tc in d.tool_calls if tc.arguments]
    # string values stream character by character (keys and commas wait for their value)
    assert len(pieces) > 5
    assert "1" not in pieces and "12" in "".join(pieces)  # a number is held until it ends


def test_hermes_malformed_json_after_commit_keeps_the_rest_as_content():
    text = '<tool_call>\n{"name": "f", "arguments": {"a": 1]}\n</tool_call>'
    msg = assert_same_in_every_mode(text, "hermes")
    assert [c.name for c in msg.tool_calls] == ["f"]
    assert "</tool_call>" in msg.content


def test_hermes_not_json_stays_content():
    text = "<tool_call>\nnot json at all\n</tool_call>"
    msg = assert_same_in_every_mode(text, "hermes")
    assert msg.tool_calls == [] and msg.content == text


def test_hermes_truncated_inside_arguments_keeps_the_call():
    text = '<tool_call>\n{"name": "f", "arguments": {"city": "Par'
    msg = assert_same_in_every_mode(text, "hermes")
    # what was streamed is kept, and ended so that the arguments are valid JSON
    assert [(c.name, c.arguments) for c in msg.tool_calls] == [("f", '{"city": "Par"}')]


def test_qwen3_coder_typed_values_and_verbatim_strings():
    text = (
        "<tool_call>\n<function=get_weather>\n"
        '<parameter=city>\n  01234 &amp; {"x": 1}\n</parameter>\n'
        "<parameter=zip>\n007\n</parameter>\n"
        "<parameter=days>\n7\n</parameter>\n<parameter=scale>\n1.5\n</parameter>\n"
        '<parameter=metric>\nTrue\n</parameter>\n<parameter=tags>\n[1, "x"]\n</parameter>\n'
        "<parameter=opts>\nnot json\n</parameter>\n<parameter=extra>\n5\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    msg = assert_same_in_every_mode(text, "qwen3_coder", tools=WEATHER_TOOLS)
    assert calls_of(msg) == [
        (
            "get_weather",
            {
                "city": '  01234 &amp; {"x": 1}',
                "zip": "007",
                "days": 7,
                "scale": 1.5,
                "metric": True,
                "tags": [1, "x"],
                "opts": "not json",
                "extra": "5",
            },
        )
    ]


def test_glm45_and_glm47_layouts():
    for text in (
        "<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
        "<tool_call>get_weather<arg_key>days</arg_key><arg_value>2</arg_value></tool_call>",
    ):
        msg = assert_same_in_every_mode(text, "glm45", tools=WEATHER_TOOLS)
        assert calls_of(msg) == [("get_weather", {"days": 2})]


def test_kimi_k2_keeps_dotted_hyphenated_names_and_raw_ids():
    text = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.mcp.git-status:3"
        '<|tool_call_argument_begin|>{"repo": "."}<|tool_call_end|><|tool_calls_section_end|>'
    )
    msg = assert_same_in_every_mode(text, "kimi_k2")
    assert msg.tool_calls[0].name == "mcp.git-status"
    assert msg.tool_calls[0].id == "functions.mcp.git-status:3"


KIMI_SECTION = "<|tool_calls_section_begin|>{}<|tool_calls_section_end|>"
KIMI_CALL = "<|tool_call_begin|>functions.{}:{} <|tool_call_argument_begin|>{}<|tool_call_end|>"


@pytest.mark.parametrize(
    "bad",
    [
        '{"city": "Beijing"',  # cut off before its end marker
        '{"city": Beijing}',  # not JSON
        '{"city": "Beijing", }',  # a trailing comma
    ],
)
def test_kimi_k2_malformed_call_is_never_streamed_and_hides_no_sibling(bad):
    text = "Help. " + KIMI_SECTION.format(
        KIMI_CALL.format("bad", 0, bad) + KIMI_CALL.format("good", 1, '{"city": "Shanghai"}')
    )
    msg = assert_same_in_every_mode(text, "kimi_k2")
    assert calls_of(msg) == [("good", {"city": "Shanghai"})]
    assert msg.content == "Help."
    for sizes in ([1], [3], [7]):
        _, _, deltas = stream(text, sizes, "kimi_k2")
        streamed = [c for d in deltas for c in d.tool_calls]
        assert {c.name for c in streamed if c.name} == {"good"}, sizes
        # a call appears whole: its name and all its arguments in the same delta
        assert len(streamed) == 1 and streamed[0].arguments == '{"city": "Shanghai"}'


def test_kimi_k2_cut_off_call_is_kept_closed():
    text = KIMI_SECTION.format(KIMI_CALL.format("f", 0, '{"a": "b"'))
    text = text[: text.index("<|tool_call_end|>")]
    assert calls_of(assert_same_in_every_mode(text, "kimi_k2")) == [("f", {"a": "b"})]


def test_mistral_both_syntaxes_are_inferred_from_the_text():
    old = '[TOOL_CALLS] [{"name": "noop", "arguments": {}}]'
    new = '[TOOL_CALLS]noop[ARGS]{}[TOOL_CALLS]get_weather[ARGS]{"days": 1}'
    assert calls_of(assert_same_in_every_mode(old, "mistral")) == [("noop", {})]
    assert calls_of(assert_same_in_every_mode(new, "mistral")) == [
        ("noop", {}),
        ("get_weather", {"days": 1}),
    ]


def test_llama3_json_bare_and_tagged():
    bare = '{"name": "noop", "parameters": {}}; {"name": "get_weather", "parameters": {"a": 1}}'
    assert [n for n, _ in calls_of(assert_same_in_every_mode(bare, "llama3_json"))] == [
        "noop",
        "get_weather",
    ]
    prose = 'Use {"name": "x"} like this.'
    assert assert_same_in_every_mode(prose, "llama3_json").content == prose


def test_pythonic_literals_and_malformed():
    ok = '[get_weather(city="Paris", days=2, opts={"a": None}), noop()]'
    assert calls_of(assert_same_in_every_mode(ok, "pythonic")) == [
        ("get_weather", {"city": "Paris", "days": 2, "opts": {"a": None}}),
        ("noop", {}),
    ]
    bad = "[get_weather(city=Paris)]"
    msg = assert_same_in_every_mode(bad, "pythonic")
    assert msg.tool_calls == [] and msg.content == bad


def test_gemma4_strings_may_contain_syntax():
    text = '<|tool_call>call:get_weather{city:<|"|>a, b: {c}<|"|>,days:2}<tool_call|>'
    msg = assert_same_in_every_mode(text, "gemma4")
    assert calls_of(msg) == [("get_weather", {"city": "a, b: {c}", "days": 2})]


def test_deepseek_v3_real_output():
    text = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        '```json\n{"city": "Hangzhou"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    )
    assert calls_of(assert_same_in_every_mode(text, "deepseek_v3")) == [
        ("get_weather", {"city": "Hangzhou"})
    ]


def test_minimax_m2_typed():
    text = (
        '<minimax:tool_call>\n<invoke name="get_weather">\n'
        '<parameter name="days">4</parameter>\n<parameter name="zip">04</parameter>\n'
        "</invoke>\n</minimax:tool_call>"
    )
    msg = assert_same_in_every_mode(text, "minimax_m2", tools=WEATHER_TOOLS)
    assert calls_of(msg) == [("get_weather", {"days": 4, "zip": "04"})]


def test_harmony_calls_with_recipient_in_channel_or_header():
    for header in (
        "<|channel|>commentary to=functions.get_weather <|constrain|>json",
        " to=functions.get_weather<|channel|>commentary json",
        "<|channel|>commentary to=functions.get_weather",
    ):
        text = (
            "<|channel|>analysis<|message|>Think.<|end|>"
            f'<|start|>assistant{header}<|message|>{{"city": "Oslo"}}<|call|>'
        )
        msg = assert_same_in_every_mode(
            text, "harmony", "harmony", prompt_tail="<|start|>assistant"
        )
        assert msg.reasoning_content == "Think."
        assert calls_of(msg) == [("get_weather", {"city": "Oslo"})]


def test_harmony_rendered_calls_round_trip_through_the_channel_parser():
    """Harmony's format is derived from the `Channels` its parser reads: what the description
    writes (after reasoning written in its `ReasoningFormat`) parses back."""
    reasoning = REASONING_FORMATS["harmony"]
    calls = TOOL_CALL_FORMATS["harmony"].render_calls(CALLS)
    text = f"{reasoning.start}Think.{reasoning.end}{calls}"
    msg = assert_same_in_every_mode(text, "harmony", "harmony", tools=WEATHER_TOOLS)
    assert msg.reasoning_content == "Think." and msg.content is None
    assert calls_of(msg) == CALLS


def test_every_family_uses_a_registered_dialect():
    for fmt in TOOL_CALL_FORMATS.values():
        for variant in (fmt, *fmt.variants):
            assert DIALECTS[variant.dialect.name] is type(variant.dialect)


def test_harmony_final_channel_is_content():
    text = "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>Hi!"
    msg = assert_same_in_every_mode(text, "harmony", "harmony", prompt_tail="<|start|>assistant")
    assert shape(msg) == ("hm", "Hi!", [])


def test_arguments_are_json_objects_when_complete():
    for name in MARKED:
        fmt = TOOL_CALL_FORMATS[name]
        msg = parse(fmt.render_calls(CALLS), name, tools=WEATHER_TOOLS)
        assert len(msg.tool_calls) == len(CALLS), name
        for call in msg.tool_calls:
            assert isinstance(json.loads(call.arguments), dict)


@pytest.mark.parametrize("name", ["hermes", "llama3_json", "mistral", "granite"])
def test_arguments_before_name_is_still_a_call(name):
    fmt = TOOL_CALL_FORMATS[name]
    key = fmt.dialect.arguments_key
    obj = json.dumps({key: TRICKY, "name": "get_weather"}, ensure_ascii=False)
    text = fmt.section_start + fmt.call_start + obj + fmt.call_end + fmt.section_end
    msg = assert_same_in_every_mode(text, name, tools=WEATHER_TOOLS)
    assert calls_of(msg) == [("get_weather", TRICKY)] and msg.content is None


def test_arguments_first_object_without_a_name_stays_content():
    text = 'Try this: <tool_call>\n{"arguments": {"a": 1}, "nam": "x"}\n</tool_call> ok'
    msg = assert_same_in_every_mode(text, "hermes")
    assert msg.tool_calls == [] and msg.content == text


def test_arguments_first_call_streams_whole_once_its_object_closes():
    text = 'Hi <tool_call>{"arguments": {"days": 2}, "name": "get_weather"}</tool_call>'
    _, final, deltas = stream(text, [1], "hermes")
    started = [i for i, d in enumerate(deltas) if any(p.name for p in d.tool_calls)]
    assert started == [text.index('"}<') + 1]  # the object's closing brace
    assert calls_of(final) == [("get_weather", {"days": 2})] and final.content == "Hi"


def _argument_pieces(text, name):
    """(position in the text, arguments piece) for every tool-call delta of a 1-char stream."""
    _, final, deltas = stream(text, [1], name)
    return final, [(i, p.arguments) for i, d in enumerate(deltas) for p in d.tool_calls]


@pytest.mark.parametrize(
    ("name", "text", "comma", "close"),
    [
        ("pythonic", '[get_weather(city="Paris, TX", days=2)]', ", days", ")]"),
        (
            "gemma4",
            '<|tool_call>call:get_weather{city:<|"|>Paris, TX<|"|>,days:2}<tool_call|>',
            ",days",
            "}<tool_call|>",
        ),
    ],
)
def test_literal_arguments_stream_member_by_member(name, text, comma, close):
    final, pieces = _argument_pieces(text, name)
    assert pieces == [
        (text.index(comma), '{"city": "Paris, TX"'),
        (text.index(close), ', "days": 2}'),
    ]
    assert calls_of(final) == [("get_weather", {"city": "Paris, TX", "days": 2})]


@pytest.mark.parametrize(
    ("name", "text", "rest"),
    [
        ("pythonic", '[get_weather(city="Paris", days=oops)] after', " days=oops)] after"),
        (
            "gemma4",
            "<|tool_call>call:noop{a:1,b:oops}<tool_call|> after",
            "b:oops}<tool_call|> after",
        ),
    ],
)
def test_literal_call_failing_after_its_first_member_is_cut_off_there(name, text, rest):
    msg = assert_same_in_every_mode(text, name)
    assert len(msg.tool_calls) == 1 and msg.content == rest  # nothing dropped


@pytest.mark.parametrize(
    ("text", "content"),
    [
        # the model stopped inside the next message's header: nothing of it is content
        ("<|channel|>final<|message|>Done.<|end|><|start|>assistant<|channel|>", "Done."),
        ("<|channel|>final<|message|>Done.<|end|><|start|>assistant to=functions.f", "Done."),
        # whitespace between messages is layout
        ("<|channel|>final<|message|>Done.<|end|>\n\n", "Done."),
        # an opening marker followed by prose is not a header: the prose stays
        (
            "<|channel|>final<|message|>Done.<|end|>See <|channel|> docs for more",
            "Done.See <|channel|> docs for more",
        ),
        # hostile: a header-like run that is not one, read in linear time (a regex with
        # nested repeats took 2^n steps here)
        (
            "<|channel|>final<|message|>Done.<|end|><|start|>" + "to=" * 64 + " x",
            "Done." + "to=" * 64 + " x",
        ),
    ],
)
def test_harmony_unfinished_headers_and_layout(text, content):
    msg = assert_same_in_every_mode(text, "harmony", "harmony")
    assert msg.content == content


def test_prompt_opened_reasoning():
    apriel = assert_same_in_every_mode(
        "Think.\n[BEGIN FINAL RESPONSE]\nHi.[END FINAL RESPONSE]",
        "apriel",
        "apriel",
        prompt_tail="<|begin_assistant|>\nHere are my reasoning steps:\n",
    )
    assert shape(apriel)[:2] == ("Think.\n", "Hi.")
    poolside = assert_same_in_every_mode(
        "plan</think>\nDone.", None, "poolside_v1", prompt_tail="<think>\n"
    )
    assert shape(poolside)[:2] == ("plan", "Done.")


def test_model_ids_are_kept():
    msg = assert_same_in_every_mode(
        '<|START_ACTION|>{"tool_call_id": "7", "tool_name": "noop", "parameters": {}}'
        "<|END_ACTION|>",
        "command_r",
    )
    assert [c.id for c in msg.tool_calls] == ["7"]
