"""The real Claude Code CLI (`claude -p`) against the real server with a scripted model:
a Bash tool-use loop, and what it prints when the prompt does not fit the context.

Needs `scripts/install.sh --clients` (or `claude` on PATH); skipped otherwise."""

from __future__ import annotations

import json
import re
import struct
import zlib

import pytest
from agent_clients import client_binary, run_claude, scripted_server

pytestmark = pytest.mark.skipif(
    client_binary("claude") is None,
    reason="Claude Code is not installed (scripts/install.sh --clients)",
)

# the model's first answer: one hermes-format call of Claude Code's Bash tool; the output
# (marker-42) is computed by the shell, so it can only reach the server by the tool running
CALL = (
    '<tool_call>\n{"name": "Bash", "arguments": {"command": "echo marker-$((40+2))", '
    '"description": "Print the marker"}}\n</tool_call>'
)
FINAL = "The marker is marker-42."


def script(prompt: str) -> str:
    """Call the tool until its result is in the conversation, then answer."""
    return FINAL if "marker-42" in prompt else CALL


def result_of(run) -> dict:
    assert run.stdout.strip(), run.stderr
    return json.loads(run.stdout)


def test_bash_tool_loop_sends_the_result_back(tmp_path):
    with scripted_server(script, context_length=200_000) as (base, recorder):
        run = run_claude(base, tmp_path, "Print the marker.", "--allowedTools", "Bash")
    result = result_of(run)
    assert run.returncode == 0, run.stderr
    assert result["subtype"] == "success" and not result["is_error"]
    assert result["result"] == FINAL
    assert result["num_turns"] == 2

    answered = [s for s in recorder.generations("/v1/messages") if s.status == 200]
    assert len(answered) == 2
    first, second = (s.body for s in answered)
    assert first["stream"] is True and any(t["name"] == "Bash" for t in first["tools"])
    # the second request carries the assistant's tool_use and the tool's real output
    assistant, user = second["messages"][-2:]
    (use,) = [b for b in assistant["content"] if b["type"] == "tool_use"]
    assert use["name"] == "Bash" and use["input"]["command"] == "echo marker-$((40+2))"
    assert use["id"].startswith("toolu_")
    (tool_result,) = [b for b in user["content"] if b["type"] == "tool_result"]
    assert tool_result["tool_use_id"] == use["id"]
    assert tool_result["content"] == "marker-42" and tool_result["is_error"] is False


def test_every_request_is_accepted(tmp_path):
    """Claude Code 2.1's first request carries a `role: "system"` message (beta
    mid-conversation-tool-changes); on a 400 it retries without, one wasted request per
    session."""
    with scripted_server(lambda prompt: FINAL, context_length=200_000) as (base, recorder):
        run = run_claude(base, tmp_path, "Say it.")
    assert result_of(run)["result"] == FINAL
    statuses = [s.status for s in recorder.generations("/v1/messages")]
    assert statuses == [200], [s.response[:200] for s in recorder.generations("/v1/messages")]


def test_over_context_tells_the_user_what_to_cut(tmp_path):
    """With Anthropic's wording (`prompt is too long: N tokens > M maximum`) Claude Code
    works out how much is over and says what to cut; with any other wording it can only
    quote the server."""
    with scripted_server(script, context_length=4096) as (base, recorder):
        run = run_claude(base, tmp_path, "Print the marker.", "--allowedTools", "Bash")
    result = result_of(run)
    assert result["is_error"] and result["terminal_reason"] == "prompt_too_long"
    assert result["api_error_status"] == 400
    assert result["api_error_type"] == "invalid_request_error"
    # nothing was generated: every request was refused before a stream started
    assert all(s.status in (400,) for s in recorder.generations("/v1/messages"))
    assert re.search(r"the request is ~\d+ tokens \(limit 4096\)", result["result"]), result


def test_a_recovered_malformed_call_shows_no_markup(tmp_path):
    """Small models drop the outer brace of a Hermes call; the server recovers the call, but
    the leftover `</tool_call>` becomes a text block that Claude Code shows the user."""
    malformed = CALL.replace("}}\n</tool_call>", "}\n</tool_call>")

    def sloppy(prompt: str) -> str:
        return FINAL if "marker-42" in prompt else malformed

    with scripted_server(sloppy, context_length=200_000) as (base, _):
        run = run_claude(
            base, tmp_path, "Print the marker.", "--allowedTools", "Bash", output="stream-json"
        )
    messages = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    shown = [
        block for m in messages if m["type"] == "assistant" for block in m["message"]["content"]
    ]
    uses = [b for b in shown if b["type"] == "tool_use"]
    assert [u["input"]["command"] for u in uses] == ["echo marker-$((40+2))"]  # recovered
    assert messages[-1]["result"] == FINAL
    texts = [b["text"] for b in shown if b["type"] == "text"]
    assert not any("tool_call" in t for t in texts), texts


def tiny_png(side: int = 8) -> bytes:
    """A valid red PNG without an imaging library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * side for _ in range(side))
    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))


def test_a_screenshot_does_not_end_the_session(tmp_path):
    """Claude Code's Read of a PNG puts an image block inside the tool_result; on a text-only
    model that must become a placeholder, not a 400 that every later request repeats."""
    shot = tmp_path / "shot.png"
    shot.write_bytes(tiny_png())
    call = f'<tool_call>\n{{"name": "Read", "arguments": {{"file_path": "{shot}"}}}}\n</tool_call>'
    answer = "I looked at the screenshot."

    def look(prompt: str) -> str:
        # the user names the file once; the assistant's call names it again
        return answer if prompt.count("shot.png") >= 2 else call

    with scripted_server(look, context_length=200_000) as (base, recorder):
        run = run_claude(base, tmp_path, "Look at shot.png.", "--allowedTools", "Read")
    with_image = [
        s
        for s in recorder.generations("/v1/messages")
        if '"type": "image"' in json.dumps(s.body["messages"][-1:])
    ]
    assert with_image, "Claude Code did not send the image back"
    assert result_of(run)["result"] == answer
    assert all(s.status == 200 for s in with_image), with_image[0].response
