"""`vllm-mlx parse`: run the real parsers on a recorded model output and print the message.

A debugging tool for users and a test surface: the printed message is what the server would
return. With ``--chunk-size`` the text goes through the streaming parser in pieces and the
message is assembled from the deltas, so any disagreement between the modes shows here.
"""

from __future__ import annotations

import json
import sys

import click

from vllm_mlx.chat.stream import make_output_stream, parse_output
from vllm_mlx.families.message import MessageDelta, ParsedMessage, ToolCall
from vllm_mlx.families.registry import UnknownParserError
from vllm_mlx.reasoning import ReasoningParserManager
from vllm_mlx.tool_parsers import ToolParserManager


def run_parsers(
    text: str,
    *,
    tool_call_parser: str | None,
    reasoning_parser: str | None,
    tools: list[dict] | None,
    prompt_tail: str,
    chunk_size: int | None,
) -> ParsedMessage:
    """Parse ``text`` in one piece, or in ``chunk_size`` pieces assembled from the deltas.
    Parser names may be aliases; unknown names raise `UnknownParserError`."""
    reasoning = ReasoningParserManager.format(reasoning_parser) if reasoning_parser else None
    tool = ToolParserManager.format(tool_call_parser) if tool_call_parser else None
    if not chunk_size:
        return parse_output(
            text, reasoning_format=reasoning, tool_format=tool, tools=tools, prompt_tail=prompt_tail
        )
    stream = make_output_stream(
        reasoning_format=reasoning, tool_format=tool, tools=tools, prompt_tail=prompt_tail
    )
    deltas = [stream.feed(text[i : i + chunk_size]) for i in range(0, len(text), chunk_size)]
    deltas.append(stream.finish())
    return join_deltas(deltas)


def join_deltas(deltas: list[MessageDelta]) -> ParsedMessage:
    """The message a client assembles from a stream's deltas."""
    reasoning = "".join(d.reasoning_content for d in deltas)
    content = "".join(d.content for d in deltas)
    calls: list[ToolCall] = []
    for d in deltas:
        for piece in d.tool_calls:
            if piece.name is not None:
                calls.append(ToolCall(id=piece.id or "", name=piece.name, arguments=""))
            calls[piece.index].arguments += piece.arguments
    return ParsedMessage(reasoning or None, content or None, calls)


def parse_case(case: dict, chunk_size: int | None) -> dict:
    """One ``--jsonl`` line (text, parser names, tools, prompt tail) as an OpenAI message."""
    if not isinstance(case, dict) or not isinstance(case.get("text"), str):
        raise ValueError('each line must be an object with a "text" string')
    message = run_parsers(
        case["text"],
        tool_call_parser=case.get("tool_call_parser"),
        reasoning_parser=case.get("reasoning_parser"),
        tools=case.get("tools"),
        prompt_tail=case.get("prompt_tail") or "",
        chunk_size=chunk_size,
    )
    return message.to_openai()


@click.command("parse")
@click.option("--tool-call-parser", default=None, help="Tool-call parser name or alias.")
@click.option("--reasoning-parser", default=None, help="Reasoning parser name or alias.")
@click.option(
    "--tools",
    "tools_file",
    type=click.File("r"),
    default=None,
    help="JSON file holding an OpenAI `tools` array (types XML-style arguments).",
)
@click.option("--prompt-tail", default="", help="End of the rendered prompt, e.g. '<think>\\n'.")
@click.option(
    "--chunk-size",
    type=click.IntRange(min=1),
    default=None,
    help="Feed the streaming parser N characters at a time.",
)
@click.option("--jsonl", is_flag=True, help="Read one JSON case per line from stdin.")
@click.argument("source", type=click.File("r"), default="-")
def parse(
    tool_call_parser: str | None,
    reasoning_parser: str | None,
    tools_file,
    prompt_tail: str,
    chunk_size: int | None,
    jsonl: bool,
    source,
) -> None:
    """Parse a recorded model output (FILE or stdin) and print the message as JSON."""
    if jsonl:
        for line in source:
            if not line.strip():
                continue
            try:
                result = parse_case(json.loads(line), chunk_size)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                result = {"error": str(exc)}
            click.echo(json.dumps(result, ensure_ascii=False))
        return
    try:
        tools = json.load(tools_file) if tools_file else None
        message = run_parsers(
            source.read(),
            tool_call_parser=tool_call_parser,
            reasoning_parser=reasoning_parser,
            tools=tools,
            prompt_tail=prompt_tail,
            chunk_size=chunk_size,
        )
    except UnknownParserError as exc:
        raise click.UsageError(str(exc)) from exc
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"--tools is not JSON: {exc}") from exc
    json.dump(message.to_openai(), sys.stdout, ensure_ascii=False, indent=2)
    click.echo()
