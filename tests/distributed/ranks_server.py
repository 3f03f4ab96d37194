"""Sharded servers for the tests: `vllm-mlx serve --distributed MODE --ranks N` over loopback
(the real CLI, its ranks its own child processes) and the ranks' pids."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from vllm_mlx.server.launch import Launched, launched_server


@contextmanager
def sharded_server(
    model: str | None, mode: str | None, ranks: int, log_path: Path, *args: str
) -> Iterator[Launched]:
    """``mode`` None: the same server unsharded (the reference)."""
    sharding = ["--distributed", mode, "--ranks", str(ranks)] if mode else []
    with launched_server(model, [*sharding, *args], log_path, timeout=600) as server:
        yield server


def follower_pids(server_pid: int) -> list[int]:
    """Ranks 1…N-1: the server process's children (it re-executes itself in place)."""
    children = Path(f"/proc/{server_pid}/task/{server_pid}/children").read_text().split()
    return [int(pid) for pid in children]


def complete(base: str, prompt: str, max_tokens: int, **extra) -> dict:
    """A greedy raw completion (no chat template: the tokens are the model's alone)."""
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **extra}
    reply = httpx.post(f"{base}/v1/completions", json=body, timeout=600)
    reply.raise_for_status()
    return reply.json()
