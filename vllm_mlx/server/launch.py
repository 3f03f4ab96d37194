"""Start `vllm-mlx serve` in a subprocess on a free loopback port and wait until it answers.

Used by `vllm-mlx bench`, the benchmarks and the tests, so every one of them drives the same
real CLI server the same way.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx


class ServerStartError(RuntimeError):
    pass


@dataclass
class Launched:
    base_url: str  # http://127.0.0.1:PORT (no /v1)
    pid: int


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(base_url: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServerStartError(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(f"{base_url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise ServerStartError(f"the server at {base_url} did not answer within {timeout:.0f} s")


@contextmanager
def launched_server(
    model: str | None,
    args: list[str],
    log_path: Path,
    timeout: float = 600,
    open_files: int | None = None,
) -> Iterator[Launched]:
    """`python -m vllm_mlx serve [MODEL] ARGS` until the block ends; output goes to log_path.
    ``open_files`` sets the server's soft and hard file-descriptor limits (POSIX only)."""
    port = free_port()
    cmd = [sys.executable, "-m", "vllm_mlx", "serve", *([model] if model else [])]
    cmd += ["--port", str(port), *args]
    with open(log_path, "w") as log:
        limited = None if open_files is None else _limiting_open_files(open_files)
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ), preexec_fn=limited
        )
        try:
            base = f"http://127.0.0.1:{port}"
            try:
                wait_healthy(base, timeout, proc)
            except ServerStartError as exc:
                raise ServerStartError(f"{exc}; see {log_path}") from None
            # the CLI may re-execute itself (OpenBLAS preload) but keeps its pid
            yield Launched(base, proc.pid)
        finally:
            stop_process(proc, timeout=15)


def stop_process(process: subprocess.Popen, timeout: float) -> None:
    """Ask ``process`` to stop (SIGTERM), kill it after ``timeout`` seconds, and reap it."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _limiting_open_files(count: int):
    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))

    return limit
