"""The real Codex CLI (`codex exec`) against the real server's Responses API with a scripted
model: an exec_command tool-use loop, and what it prints when the prompt does not fit.

Needs `scripts/install.sh --clients` (or `codex` on PATH); skipped otherwise."""

from __future__ import annotations

import json

import pytest
from agent_clients import client_binary, jsonl, run_codex, scripted_server

pytestmark = pytest.mark.skipif(
    client_binary("codex") is None,
    reason="Codex is not installed (scripts/install.sh --clients)",
)

# the model's first answer: one hermes-format call of Codex's exec_command tool
CALL = (
    '<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "echo marker-$((40+2))"}}'
    "\n</tool_call>"
)
FINAL = "The marker is marker-42."


def script(prompt: str) -> str:
    return FINAL if "marker-42" in prompt else CALL


def test_exec_command_loop_sends_the_result_back(tmp_path):
    with scripted_server(script, context_length=200_000) as (base, recorder):
        run = run_codex(base, tmp_path, "Print the marker.")
    assert run.returncode == 0, run.stderr
    events = jsonl(run.stdout)
    items = [e["item"] for e in events if e["type"] == "item.completed"]
    (command,) = [i for i in items if i["type"] == "command_execution"]
    assert command["aggregated_output"] == "marker-42\n" and command["exit_code"] == 0
    assert [i["text"] for i in items if i["type"] == "agent_message"] == [FINAL]
    assert events[-1]["type"] == "turn.completed"

    answered = recorder.generations("/v1/responses")
    assert [s.status for s in answered] == [200, 200]
    first, second = (s.body for s in answered)
    assert first["stream"] is True and first["store"] is False
    assert any(t.get("name") == "exec_command" for t in first["tools"])
    # the second request replays the call and carries the command's real output
    call, output = second["input"][-2:]
    assert call["type"] == "function_call" and call["name"] == "exec_command"
    assert json.loads(call["arguments"]) == {"cmd": "echo marker-$((40+2))"}
    assert output["type"] == "function_call_output" and output["call_id"] == call["call_id"]
    assert "marker-42" in output["output"]


def test_over_context_says_the_context_window_is_full(tmp_path):
    """Codex explains an over-context turn only for `code: "context_length_exceeded"`;
    otherwise it prints the server's JSON body as the error."""
    with scripted_server(script, context_length=4096) as (base, recorder):
        run = run_codex(base, tmp_path, "Print the marker.")
    assert run.returncode != 0
    events = jsonl(run.stdout)
    (failed,) = [e for e in events if e["type"] == "turn.failed"]
    assert all(s.status == 400 for s in recorder.generations("/v1/responses"))
    assert "ran out of room in the model's context window" in failed["error"]["message"]


def test_reasoning_items_come_back(tmp_path):
    """Codex sends `store: false` with `include: ["reasoning.encrypted_content"]` and replays
    the reasoning items it was given in its next request; the server must take them back."""

    def thinking(prompt: str) -> str:
        if "marker-42" in prompt:
            return f"<think>It printed.</think>{FINAL}"
        return f"<think>I should run it.</think>{CALL}"

    with scripted_server(thinking, context_length=200_000, reasoning_parser="deepseek_r1") as (
        base,
        recorder,
    ):
        run = run_codex(base, tmp_path, "Print the marker.")
    assert run.returncode == 0, run.stderr
    items = [e["item"] for e in jsonl(run.stdout) if e["type"] == "item.completed"]
    assert [i["text"] for i in items if i["type"] == "agent_message"] == [FINAL]

    answered = recorder.generations("/v1/responses")
    assert [s.status for s in answered] == [200, 200]
    first, second = (s.body for s in answered)
    assert first["include"] == ["reasoning.encrypted_content"] and first["store"] is False
    (reasoning,) = [i for i in second["input"] if i["type"] == "reasoning"]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "I should run it."}]


def test_a_codex_catalog_model_id_is_served(tmp_path):
    """A user who names a model Codex knows (to get its metadata) gets Codex's newest request
    shape: the tools move into an `additional_tools` input item holding `namespace` tools,
    among them `custom` (grammar) tools. Today the server refuses the whole request."""
    with scripted_server(script, context_length=200_000) as (base, recorder):
        run = run_codex(base, tmp_path, "Print the marker.", "--model", "gpt-6.2-sol")
    first = recorder.generations("/v1/responses")[0]
    assert first.body["input"][0]["type"] == "additional_tools"
    assert [s.status for s in recorder.generations("/v1/responses")] == [200, 200], first.response
    assert run.returncode == 0


def test_a_long_answer_is_not_cut(tmp_path):
    """Codex sends no `max_output_tokens`; a server-side default cut (2048 tokens today) is
    reported as a failed turn ("Incomplete response returned, reason: max_output_tokens")."""
    long_answer = " ".join(f"w{i}" for i in range(1500))  # > 2048 tokens
    with scripted_server(lambda prompt: long_answer, context_length=200_000) as (base, recorder):
        run = run_codex(base, tmp_path, "Write a lot.")
    (request,) = recorder.generations("/v1/responses")
    assert request.body.get("max_output_tokens") is None
    events = jsonl(run.stdout)
    assert events[-1]["type"] == "turn.completed", events[-1]
    items = [e["item"] for e in events if e["type"] == "item.completed"]
    assert [i["text"] for i in items if i["type"] == "agent_message"] == [long_answer]
