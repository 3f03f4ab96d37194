"""More idle half-sent connections than the server has file descriptors: /health answers
throughout, the longest-waiting ones are shed, and the server recovers."""

from __future__ import annotations

import resource
import socket

import httpx
import pytest
from servers import cli_server

OPEN_FILES = 512  # the server's soft and hard limit: below mlx_lm's own 4096
SOCKETS = 700  # more than OPEN_FILES, all held open by this one client
HEADERS = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le"
BODY = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model'
)

pytestmark = pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="POSIX rlimits")


@pytest.fixture
def client_descriptors():
    """Room for this test's own sockets (macOS starts processes at 256)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, 4 * SOCKETS) if hard != resource.RLIM_INFINITY else 4 * SOCKETS
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(2)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_half_sent_connections_past_the_fd_limit_leave_health_answering(
    tmp_path, client_descriptors
):
    log = tmp_path / "server.log"
    replay = tmp_path / "replay.txt"
    replay.write_text("word " * 20)
    sockets: list[socket.socket] = []
    with cli_server("--replay", str(replay), log_path=log, open_files=OPEN_FILES) as base:
        port = int(base.rsplit(":", 1)[1])
        health = []
        try:
            for i in range(SOCKETS):
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                sock.sendall(HEADERS if i % 2 else BODY)  # inside the head, inside the body
                sockets.append(sock)
                if i % 100 == 99:
                    health.append(httpx.get(f"{base}/health", timeout=10).status_code)
            health.append(httpx.get(f"{base}/health", timeout=10).status_code)
            # the first ones have waited longest: shed to make room, heads and bodies alike
            shed = [_closed_by_server(sock) for sock in sockets[:20]]
        finally:
            for sock in sockets:
                sock.close()
        after = httpx.get(f"{base}/health", timeout=10).status_code
    assert health == [200] * len(health)
    assert all(shed), shed
    assert after == 200
    text = log.read_text()
    assert "Too many open files" not in text
    assert "Traceback" not in text  # a shed body is no unhandled error


def test_a_half_sent_body_times_out_like_a_half_sent_head(tmp_path):
    replay = tmp_path / "replay.txt"
    replay.write_text("word " * 20)
    args = ("--replay", str(replay), "--read-timeout", "1")
    with cli_server(*args, log_path=tmp_path / "server.log") as base:
        port = int(base.rsplit(":", 1)[1])
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as head,
            socket.create_connection(("127.0.0.1", port), timeout=10) as body,
        ):
            head.sendall(HEADERS)
            body.sendall(BODY)  # the app already runs, waiting for bytes that never come
            head.settimeout(15)
            body.settimeout(15)
            assert head.recv(1) == b""
            assert body.recv(1) == b""
