"""Servers for tests: the real CLI server in a subprocess, and the real app in a thread
around a replay engine whose output the test chooses."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path

import uvicorn

from vllm_mlx.runtime import Runtime, build_replay_runtime
from vllm_mlx.server.app import create_app
from vllm_mlx.server.launch import free_port, launched_server, wait_healthy
from vllm_mlx.server.state import ServerState


@contextmanager
def cli_server(*args: str, log_path: Path, timeout: float = 300):
    """`python -m vllm_mlx serve ARGS` on a free port; yields the base URL (no /v1)."""
    with launched_server(None, list(args), log_path, timeout) as server:
        yield server.base_url


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


@contextmanager
def replay_server(text: str, fail_after: int | None = None, **parsers):
    """The real app in a thread, answering every request with ``text`` through the real
    tokenizer; yields (base URL, runtime). ``fail_after``: the generation dies after that
    many steps."""
    runtime: Runtime = build_replay_runtime(text, **parsers)
    if fail_after is not None:
        runtime.engine.source = FailingSource(runtime.engine.source, after=fail_after)
    try:
        with thread_server(create_app(ServerState(runtime.pipeline, "replay"))) as base:
            yield base, runtime
    finally:
        runtime.close()


@contextmanager
def tiny_model_server(reasoning_parser: str | None = "deepseek_r1", tool_parser="hermes"):
    """The real app in a thread on a tiny random-weight model with think/tool tokens;
    yields (base URL, tokenizer)."""
    from tiny_models import build_tiny_model, build_tiny_tokenizer

    from vllm_mlx.engine.engine import Engine
    from vllm_mlx.engine.sources import ModelBatchSource
    from vllm_mlx.pipeline import Pipeline

    tokenizer = build_tiny_tokenizer()
    engine = Engine(ModelBatchSource(build_tiny_model(tokenizer)), tokenizer)
    pipeline = Pipeline(
        engine,
        context_length=2048,
        default_max_tokens=64,
        reasoning_parser=reasoning_parser,
        tool_parser=tool_parser,
    )
    try:
        with thread_server(create_app(ServerState(pipeline, "tiny"))) as base:
            yield base, tokenizer
    finally:
        engine.close()
