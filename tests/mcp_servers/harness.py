"""Helpers the MCP tests share: configs for the toolbox server and HTTP servers on free ports."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from vllm_mlx.server.launch import stop_process

TOOLBOX = str(Path(__file__).with_name("toolbox_server.py"))


def toolbox_stdio(**overrides: Any) -> dict[str, Any]:
    """A config entry that runs the toolbox server over stdio."""
    return {"command": sys.executable, "args": [TOOLBOX], **overrides}


def time_server_stdio() -> dict[str, Any]:
    """The PyPI ``mcp-server-time`` package over stdio."""
    return {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone=UTC"]}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen[bytes], limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"toolbox server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"toolbox server did not listen on {port} within {limit}s")


@contextmanager
def toolbox_http(mode: str = "--http") -> Iterator[int]:
    """Run the toolbox server over HTTP (``--http`` or ``--sse``) on 127.0.0.1; yield its port."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, TOOLBOX, mode, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, process)
        yield port
    finally:
        stop_process(process, timeout=5)
