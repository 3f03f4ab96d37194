"""The hostile cases, one row each: (id, path, raw body, expected param or None).

Every row must answer a 4xx in its API's shape (``check_answer``); a param, when given, is
the field the OpenAI-shaped error must name. Bodies are bytes so that lone surrogates,
raw surrogate bytes, NaN and deep nesting arrive exactly as an attacker would send them.
"""

from __future__ import annotations

from .hostile import raw

CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"
MESSAGES = "/v1/messages"
COUNT = "/v1/messages/count_tokens"
RESPONSES = "/v1/responses"
EXECUTE = "/v1/mcp/execute"

HI = [{"role": "user", "content": "hi"}]
VOCAB = 49152  # the embedded SmolLM2's vocabulary (the replay server's tokenizer)


def chat(**fields) -> bytes:
    return raw({"model": "m", "messages": HI, "max_tokens": 4, **fields})


def text(**fields) -> bytes:
    return raw({"model": "m", "prompt": "hi", "max_tokens": 4, **fields})


def messages(**fields) -> bytes:
    return raw({"model": "m", "max_tokens": 4, "messages": HI, **fields})


def responses(**fields) -> bytes:
    return raw({"model": "m", "input": "hi", "max_output_tokens": 4, **fields})


def nested(depth: int) -> bytes:
    """A chat body whose content is ``depth`` nested arrays."""
    inner = b"[" * depth + b"]" * depth
    return b'{"model":"m","messages":[{"role":"user","content":' + inner + b"}]}"


def deep_schema(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


def json_schema(schema: object) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


RECURSIVE = {"type": "object", "properties": {"child": {"$ref": "#"}}}
CYCLE = {
    "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"type": "array", "items": {"$ref": "#/$defs/a"}}},
    "$ref": "#/$defs/a",
}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
LONE = "a\ud800b"  # raw() writes it as the escape \ud800

CASES: list[tuple[str, str, bytes, str | None]] = [
    # 1. token ids against the vocabulary (the crash cases run on the real model too)
    ("logit_bias-key-at-vocab", CHAT, chat(logit_bias={str(VOCAB): 5}), "logit_bias"),
    ("logit_bias-key-negative", CHAT, chat(logit_bias={"-1": 5}), "logit_bias"),
    ("logit_bias-key-40-digits", CHAT, chat(logit_bias={"9" * 40: 5}), "logit_bias"),
    ("logit_bias-key-not-a-number", CHAT, chat(logit_bias={"abc": 5}), "logit_bias"),
    ("logit_bias-value-out-of-range", CHAT, chat(logit_bias={"5": 1000}), "logit_bias"),
    ("completions-logit_bias-key", TEXT, text(logit_bias={"123456789": 1}), "logit_bias"),
    ("prompt-ids-far-outside", TEXT, text(prompt=[10**9, 5]), "prompt"),
    ("prompt-ids-at-vocab", TEXT, text(prompt=[1, VOCAB]), "prompt"),
    ("prompt-ids-negative", TEXT, text(prompt=[-2]), "prompt"),
    ("prompt-ids-huge", TEXT, text(prompt=[2**70]), "prompt"),
    ("stop_token_ids-outside", CHAT, chat(stop_token_ids=[10**12]), "stop_token_ids"),
    ("stop_token_ids-negative", TEXT, text(stop_token_ids=[-1]), "stop_token_ids"),
    # 2. client errors that were 5xx
    ("json-nested-5000", CHAT, nested(5000), None),
    ("json-nested-250", CHAT, nested(250), None),
    ("json-nested-count_tokens", COUNT, nested(3000).replace(b'"m",', b'"m",', 1), None),
    (
        "lone-surrogate-chat",
        CHAT,
        raw({"model": "m", "messages": [{"role": "user", "content": LONE}]}),
        None,
    ),
    (
        "lone-surrogate-messages",
        MESSAGES,
        messages(messages=[{"role": "user", "content": LONE}]),
        None,
    ),
    (
        "lone-surrogate-count_tokens",
        COUNT,
        raw({"model": "m", "messages": [{"role": "user", "content": LONE}]}),
        None,
    ),
    ("lone-surrogate-completions", TEXT, text(prompt=LONE), None),
    ("lone-surrogate-responses", RESPONSES, responses(input=LONE), None),
    ("lone-surrogate-in-key", CHAT, chat(**{LONE: 1}), None),
    (
        "lone-surrogate-execute",
        EXECUTE,
        raw({"server": "x", "tool": "t", "arguments": {"a": LONE}}),
        None,
    ),
    (
        "raw-surrogate-bytes",
        CHAT,
        b'{"model":"m","messages":[{"role":"user","content":"a\xed\xa0\x80"}]}',
        None,
    ),
    (
        "invalid-utf8",
        MESSAGES,
        b'{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"\xff\xfe"}]}',
        None,
    ),
    ("nan-temperature", CHAT, chat(temperature=float("nan")), None),
    ("infinity-in-extra", CHAT, chat(extra=float("inf")), None),
    (
        "tool_choice-function-is-string",
        CHAT,
        chat(tools=[TOOL], tool_choice={"type": "function", "function": "f"}),
        "tool_choice",
    ),
    (
        "tool_choice-name-is-list",
        CHAT,
        chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": ["f"]}}),
        "tool_choice",
    ),
    (
        "tool_choice-name-is-int",
        CHAT,
        chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": 5}}),
        "tool_choice",
    ),
    ("tool_choice-int", CHAT, chat(tools=[TOOL], tool_choice=5), "tool_choice"),
    (
        "anthropic-tool_choice-name-int",
        MESSAGES,
        messages(
            tools=[{"name": "f", "input_schema": {"type": "object"}}],
            tool_choice={"type": "tool", "name": 5},
        ),
        None,
    ),
    (
        "responses-tool_choice-name-list",
        RESPONSES,
        responses(
            tools=[{"type": "function", "name": "f"}],
            tool_choice={"type": "function", "name": ["f"]},
        ),
        "tool_choice",
    ),
    ("responses-tool_choice-int", RESPONSES, responses(tool_choice=5), "tool_choice"),
    (
        "schema-$schema-int",
        CHAT,
        chat(response_format=json_schema({"$schema": 5, "type": "object"})),
        "response_format",
    ),
    (
        "schema-$schema-list",
        CHAT,
        chat(response_format=json_schema({"$schema": ["x"], "type": "object"})),
        "response_format",
    ),
    ("schema-nested-150", CHAT, chat(response_format=json_schema(deep_schema(150))), None),
    (
        "schema-nested-90",
        CHAT,
        chat(response_format=json_schema(deep_schema(90))),
        "response_format",
    ),
    (
        "tool-schema-nested-90",
        CHAT,
        chat(
            tools=[{"type": "function", "function": {"name": "f", "parameters": deep_schema(90)}}],
            tool_choice="required",
        ),
        "tool_choice",
    ),
    (
        "tool_result-text-int",
        MESSAGES,
        messages(
            messages=[
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [{"type": "text", "text": 5}],
                        }
                    ],
                },
            ]
        ),
        None,
    ),
    (
        "responses-text-int",
        RESPONSES,
        responses(input=[{"role": "user", "content": [{"type": "input_text", "text": 5}]}]),
        "input.0.content.0.text",
    ),
    (
        "responses-part-type-list",
        RESPONSES,
        responses(input=[{"role": "user", "content": [{"type": ["input_text"], "text": "x"}]}]),
        "input.0.content.0.type",
    ),
    (
        "responses-item-type-list",
        RESPONSES,
        responses(input=[{"type": ["message"], "role": "user", "content": "x"}]),
        "input.0.type",
    ),
    (
        "responses-reasoning-text-int",
        RESPONSES,
        responses(
            input=[
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": 5}]},
                {"role": "user", "content": "x"},
            ]
        ),
        None,
    ),
    (
        "responses-tool-parameters-string",
        RESPONSES,
        responses(tools=[{"type": "function", "name": "f", "parameters": "x"}]),
        "tools.0.parameters",
    ),
    ("seed-negative", CHAT, chat(seed=-1), "seed"),
    ("seed-2**64", CHAT, chat(seed=2**64), "seed"),
    ("seed-string", CHAT, chat(seed="1"), "seed"),
    ("max_tokens-string", CHAT, chat(max_tokens="10"), "max_tokens"),
    ("stream-yes", CHAT, chat(stream="yes"), "stream"),
    ("completions-max_tokens-string", TEXT, text(max_tokens="10"), "max_tokens"),
    ("messages-max_tokens-string", MESSAGES, messages(max_tokens="10"), None),
    ("messages-stream-yes", MESSAGES, messages(stream="yes"), None),
    (
        "responses-max_output_tokens-string",
        RESPONSES,
        responses(max_output_tokens="10"),
        "max_output_tokens",
    ),
    ("responses-stream-1", RESPONSES, responses(stream=1), "stream"),
    ("temperature-string", CHAT, chat(temperature="0.5"), "temperature"),
    ("body-is-a-list", CHAT, b"[1,2]", None),
    ("body-truncated", CHAT, b'{"model":"m","messages":[', None),
    # 3. echoed fields that would hold a lone surrogate never reach a stream
    (
        "responses-stream-instructions-surrogate",
        RESPONSES,
        responses(stream=True, instructions=LONE),
        None,
    ),
    (
        "responses-stream-metadata-surrogate",
        RESPONSES,
        responses(stream=True, metadata={"k": LONE}),
        None,
    ),
    ("chat-stream-stop-surrogate", CHAT, chat(stream=True, stop=[LONE]), None),
    # 4. sizes checked before rendering (limits: 10,000 messages, 2,000,000 characters)
    ("messages-100k", CHAT, raw({"model": "m", "messages": HI * 100_000}), "messages"),
    ("anthropic-messages-100k", MESSAGES, messages(messages=HI * 100_000), None),
    ("count_tokens-100k", COUNT, raw({"model": "m", "messages": HI * 100_000}), None),
    (
        "responses-items-100k",
        RESPONSES,
        responses(input=[{"role": "user", "content": "x"}] * 100_000),
        "input",
    ),
    (
        "prompt-2.1M-chars",
        CHAT,
        raw({"model": "m", "messages": [{"role": "user", "content": "x" * 2_100_000}]}),
        "messages",
    ),
    ("completions-2.1M-chars", TEXT, text(prompt="x" * 2_100_000), "prompt"),
    (
        "count_tokens-12MB",
        COUNT,
        raw({"model": "m", "messages": [{"role": "user", "content": "word " * 2_400_000}]}),
        None,
    ),
    ("tools-600", CHAT, chat(tools=[TOOL] * 600), "tools"),
    # 5. recursive schemas cannot be enforced
    ("schema-ref-root", CHAT, chat(response_format=json_schema(RECURSIVE)), "response_format"),
    ("schema-ref-cycle", CHAT, chat(response_format=json_schema(CYCLE)), "response_format"),
    (
        "responses-schema-ref-root",
        RESPONSES,
        responses(text={"format": {"type": "json_schema", "name": "x", "schema": RECURSIVE}}),
        "text.format",
    ),
    (
        "tool-schema-ref-root",
        CHAT,
        chat(
            tools=[{"type": "function", "function": {"name": "f", "parameters": RECURSIVE}}],
            tool_choice="required",
        ),
        "tool_choice",
    ),
    (
        "anthropic-tool-schema-cycle",
        MESSAGES,
        messages(tools=[{"name": "f", "input_schema": CYCLE}], tool_choice={"type": "any"}),
        None,
    ),
    # 6. Responses metadata bounded like OpenAI's
    (
        "metadata-17-keys",
        RESPONSES,
        responses(metadata={f"k{i}": "v" for i in range(17)}),
        "metadata",
    ),
    ("metadata-key-65", RESPONSES, responses(metadata={"k" * 65: "v"}), "metadata"),
    ("metadata-value-513", RESPONSES, responses(metadata={"k": "v" * 513}), "metadata"),
    ("metadata-value-8MB", RESPONSES, responses(metadata={"k": "v" * 8_000_000}), "metadata"),
    ("metadata-value-int", RESPONSES, responses(metadata={"k": 5}), "metadata.k"),
]

# Near-misses that must succeed: the bounds are not off by one.
ACCEPTED: list[tuple[str, str, bytes]] = [
    ("logit_bias-last-id", CHAT, chat(logit_bias={str(VOCAB - 1): -5, "0": 2})),
    ("prompt-ids-edges", TEXT, text(prompt=[0, 1, VOCAB - 1])),
    ("seed-max", CHAT, chat(seed=2**64 - 1)),
    ("seed-zero", CHAT, chat(seed=0)),
    (
        "schema-shared-defs",
        CHAT,
        chat(
            response_format=json_schema(
                {
                    "$defs": {"s": {"type": "string"}},
                    "type": "object",
                    "properties": {"a": {"$ref": "#/$defs/s"}, "b": {"$ref": "#/$defs/s"}},
                }
            )
        ),
    ),
    ("schema-nested-40", CHAT, chat(response_format=json_schema(deep_schema(40)))),
    (
        "metadata-16-keys",
        RESPONSES,
        responses(metadata={"k" * 64: "v" * 512, **{f"k{i}": "v" for i in range(15)}}),
    ),
    (
        "json-nested-150-in-extra",
        CHAT,
        chat(extra=[[[]]] * 1).replace(b"[[[]]]", b"[" * 150 + b"]" * 150),
    ),
    ("unicode-astral", CHAT, chat(messages=[{"role": "user", "content": "\U0001f600 ok"}])),
    ("chat-stream", CHAT, chat(stream=True)),
    ("messages-stream", MESSAGES, messages(stream=True)),
    ("responses-stream", RESPONSES, responses(stream=True, metadata={"k": "\U0001f600"})),
]
