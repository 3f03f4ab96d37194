"""Servers for tests: the real CLI server in a subprocess, and the real app in a thread
around a replay engine whose output the test chooses."""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import mlx.core as mx
import uvicorn
from mcp_servers.harness import toolbox_stdio
from tiny_models import QWEN3_STYLE_CHAT_TEMPLATE, build_tiny_model, build_tiny_tokenizer

from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.sources import ModelBatchSource, SourceDefaults, Step
from vllm_mlx.options import RuntimeOptions
from vllm_mlx.pipeline import Pipeline
from vllm_mlx.reasoning import ReasoningParserManager
from vllm_mlx.runtime import Runtime, build_replay_runtime
from vllm_mlx.server.app import create_app
from vllm_mlx.server.launch import free_port, launched_server, wait_healthy
from vllm_mlx.server.state import ServerState
from vllm_mlx.tool_parsers import ToolParserManager


@contextmanager
def cli_server(*args: str, log_path: Path, timeout: float = 300, open_files: int | None = None):
    """`python -m vllm_mlx serve ARGS` on a free port; yields the base URL (no /v1);
    ``open_files`` caps the server's file descriptors."""
    with launched_server(None, list(args), log_path, timeout, open_files) as server:
        yield server.base_url


@contextmanager
def mcp_cli_server(tmp: Path, *args: str, max_tool_calls: int = 3):
    """`vllm-mlx serve ARGS --mcp-config` with the toolbox MCP server over stdio (Hermes
    tool calls); yields the base URL once the manager lists the toolbox tools."""
    config = tmp / "mcp.json"
    config.write_text(
        json.dumps({"mcpServers": {"toolbox": toolbox_stdio()}, "max_tool_calls": max_tool_calls})
    )
    cli = (*args, "--mcp-config", str(config), "--tool-call-parser", "hermes")
    with cli_server(*cli, log_path=tmp / "server.log") as base:
        for _ in range(100):  # the manager connects in the background of start-up
            if httpx.get(f"{base}/v1/mcp/tools").json()["data"]:
                break
            time.sleep(0.2)
        yield base


@contextmanager
def thread_server(app):
    """Run a starlette app with uvicorn in a background thread; yields the base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, 30)
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class FailingSource:
    """Failure injection: a token source whose step fails ``after`` steps into each request
    (a generation dying midway)."""

    def __init__(self, inner, after: int):
        self.inner, self.after, self.steps = inner, after, 0

    def insert(self, prompt, **kwargs):
        self.steps = 0
        return self.inner.insert(prompt, **kwargs)

    def remove(self, uid: int) -> None:
        self.inner.remove(uid)

    def reset(self) -> None:
        self.inner.reset()

    def flush(self) -> None:
        self.inner.flush()

    @property
    def spec_counts(self) -> tuple[int, int]:
        return self.inner.spec_counts

    def prefill_to_share(self, prompt) -> bool:
        return self.inner.prefill_to_share(prompt)

    def step(self):
        self.steps += 1
        if self.steps > self.after:
            raise RuntimeError("injected fault")
        return self.inner.step()


class ForcingSource(SourceDefaults):
    """A caller that forces its tokens: every step runs the row's logits processors (as a
    sampler would) and then emits the inner source's token whatever they masked, so a
    constraint sees tokens it rejected and gives up, as in production when state
    desynchronises."""

    def __init__(self, inner, vocab: int):
        self.inner, self.vocab = inner, vocab
        self.rows: dict[int, tuple[list[int], list]] = {}  # uid -> (tokens so far, processors)

    def insert(self, prompt, *, processors, **kwargs):
        uid, cached = self.inner.insert(prompt, processors=processors, **kwargs)
        self.rows[uid] = (list(prompt), list(processors))
        return uid, cached

    def remove(self, uid: int) -> None:
        self.rows.pop(uid, None)
        self.inner.remove(uid)

    def reset(self) -> None:
        self.rows.clear()
        self.inner.reset()

    def step(self):
        for tokens, processors in self.rows.values():
            logits = mx.zeros((1, self.vocab))
            for processor in processors:
                logits = processor(mx.array(tokens), logits)
            mx.eval(logits)
        steps, ended = self.inner.step()
        for step in steps:
            if step.uid in self.rows:
                self.rows[step.uid][0].append(step.token)
        return steps, ended


class EchoSource(SourceDefaults):
    """Every sequence answers with its own prompt, end-of-turn tokens left out (they would
    stop it), then ends: what the template really rendered, as text the client can read."""

    def __init__(self, eos_ids: set[int]):
        self.eos_ids = eos_ids
        self.eos_id = min(eos_ids)
        self._rows: dict[int, list[int]] = {}
        self._next = 0

    def insert(self, prompt, *, max_tokens, **kwargs):
        uid, self._next = self._next, self._next + 1
        echo = [t for t in prompt if t not in self.eos_ids]
        self._rows[uid] = [*echo[: max_tokens - 1], self.eos_id]
        return uid, 0

    def remove(self, uid: int) -> None:
        self._rows.pop(uid, None)

    def reset(self) -> None:
        self._rows.clear()

    def step(self):
        steps = []
        for uid, rest in list(self._rows.items()):
            steps.append(Step(uid, rest.pop(0), None, not rest))
            if not rest:
                del self._rows[uid]
        return steps, []


@contextmanager
def replay_server(text: str, fail_after: int | None = None, **options):
    """The real app in a thread, answering every request with ``text`` through the real
    tokenizer; yields (base URL, runtime). ``fail_after``: the generation dies after that
    many steps."""
    runtime: Runtime = build_replay_runtime(text, options=RuntimeOptions.of(**options))
    if fail_after is not None:
        runtime.engine.source = FailingSource(runtime.engine.source, after=fail_after)
    try:
        with thread_server(create_app(ServerState(runtime.pipeline, "replay"))) as base:
            yield base, runtime
    finally:
        runtime.close()


@contextmanager
def echo_server(**options):
    """The real app in a thread whose every answer is the rendered prompt (the default
    model's tokenizer and template); yields (base URL, runtime)."""
    runtime: Runtime = build_replay_runtime("", options=RuntimeOptions.of(**options))
    runtime.engine.source = EchoSource(set(runtime.loaded.tokenizer.eos_token_ids))
    try:
        with thread_server(create_app(ServerState(runtime.pipeline, "echo"))) as base:
            yield base, runtime
    finally:
        runtime.close()


@contextmanager
def pipeline_server(pipeline: Pipeline, name: str):
    """The real app in a thread serving ``pipeline`` as model ``name``; yields the base
    URL, and closes the pipeline's engine when done."""
    try:
        with thread_server(create_app(ServerState(pipeline, name))) as base:
            yield base
    finally:
        pipeline.engine.close()


@contextmanager
def tiny_echo_server():
    """The real app in a thread whose every answer is the prompt the tiny tokenizer's
    Qwen3-style template rendered (it writes tool calls and results); yields the base URL."""
    tokenizer = build_tiny_tokenizer()
    engine = Engine(EchoSource(set(tokenizer.eos_token_ids)), tokenizer)
    pipeline = Pipeline(engine, context_length=4096, options=RuntimeOptions.of(max_tokens=4096))
    with pipeline_server(pipeline, "echo") as base:
        yield base


@contextmanager
def tiny_model_server(
    reasoning_parser: str | None = "deepseek_r1",
    tool_parser="hermes",
    chat_template: str | None = None,
):
    """The real app in a thread on a tiny random-weight model with think/tool tokens (and
    the Qwen3-style template, or ``chat_template``); yields (base URL, tokenizer)."""
    tokenizer = build_tiny_tokenizer(chat_template=chat_template or QWEN3_STYLE_CHAT_TEMPLATE)
    engine = Engine(ModelBatchSource(build_tiny_model(tokenizer)), tokenizer)
    pipeline = Pipeline(
        engine,
        context_length=2048,
        options=RuntimeOptions.of(max_tokens=64),
        reasoning_format=ReasoningParserManager.format(reasoning_parser)
        if reasoning_parser
        else None,
        tool_format=ToolParserManager.format(tool_parser) if tool_parser else None,
    )
    with pipeline_server(pipeline, "tiny") as base:
        yield base, tokenizer


class PacedSource:
    """A replay source that takes ``delay`` seconds per step, so a reply streams for a while
    (long enough to watch it arrive and to stop it), and counts the tokens it produced."""

    def __init__(self, inner, delay: float):
        self.inner, self.delay = inner, delay
        self.produced = 0

    def __getattr__(self, name):  # the engine's other questions go to the wrapped source
        return getattr(self.inner, name)

    def insert(self, *args, **kwargs):
        return self.inner.insert(*args, **kwargs)

    def remove(self, uid):
        self.inner.remove(uid)

    def reset(self):
        self.inner.reset()

    def step(self):
        time.sleep(self.delay)
        steps, ended = self.inner.step()
        self.produced += len(steps)
        return steps, ended


@contextmanager
def paced_replay_server(text: str, delay: float = 0.0, **state_options):
    """The real app in a thread replaying ``text`` with the Qwen3 reasoning and Hermes
    tool-call parsers, ``delay`` seconds per token; yields (base URL, source, state)."""
    runtime = build_replay_runtime(
        text, options=RuntimeOptions.of(reasoning_parser="qwen3", tool_call_parser="hermes")
    )
    source = runtime.engine.source = PacedSource(runtime.engine.source, delay)
    state = ServerState(runtime.pipeline, "replay", **state_options)
    try:
        with thread_server(create_app(state)) as base:
            yield base, source, state
    finally:
        runtime.close()
