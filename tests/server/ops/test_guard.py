"""The HTTP-level refusals: Host (DNS rebinding), cross-site Origin, non-JSON
bodies, 405 with Allow, refused preflights, ambiguous framing, slow and idle connections,
stream admission — through the real CLI server over real sockets."""

from __future__ import annotations

import select
import socket
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from servers import replay_server

from vllm_mlx.server.launch import launched_server
from vllm_mlx.server.ops.guard import HostPolicy, host_name, is_json_media_type
from vllm_mlx.server.ops.middleware import log_safe

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A replay server with tight connection limits; yields (base URL, log path)."""
    folder = tmp_path_factory.mktemp("guard")
    (folder / "out.txt").write_text("Hello there.")
    log = folder / "server.log"
    args = ["--replay", str(folder / "out.txt"), "--read-timeout", "1", "--max-connections", "16"]
    args += ["--allowed-hosts", "api.example.test", "--allowed-origins", "http://app.example"]
    with launched_server(None, args, log, timeout=120) as server:
        yield server.base_url, log


def _raw(base: str, payload: bytes, wait: float = 5.0) -> tuple[bytes, bool]:
    """Send raw bytes; return what the server sent and whether it closed the connection
    (False: it was still open, silent, when ``wait`` ran out)."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait) as sock:
        sock.sendall(payload)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            return received, False
    return received, True


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1:8000", True),
        ("localhost", True),
        ("[::1]:8000", True),
        ("10.1.2.3", True),  # an IP literal cannot be a rebinding name
        ("api.example.test:443", True),  # --allowed-hosts
        ("attacker.example", False),
        ("localhost.attacker.example", False),
        ("", False),
    ],
)
def test_host_header_must_name_this_server(served, host, allowed):
    base, _ = served
    reply = httpx.post(f"{base}/v1/chat/completions", json=CHAT, headers={"Host": host})
    if allowed:
        assert reply.status_code == 200
    else:
        assert reply.status_code == 400
        assert reply.json()["error"]["code"] == "invalid_host"


def test_host_refusal_speaks_anthropic_on_messages(served):
    base, _ = served
    reply = httpx.post(f"{base}/v1/messages", json=CHAT, headers={"Host": "evil.example"})
    assert reply.status_code == 400
    assert reply.json()["type"] == "error"
    assert reply.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None],
)
def test_json_routes_refuse_other_bodies(served, content_type):
    """The simple requests a web page can send without a preflight are refused."""
    base, _ = served
    headers = {"Content-Type": content_type} if content_type else {}
    body = b'{"name": "echo", "arguments": {}}'
    for path in ("/v1/mcp/execute", "/v1/chat/completions", "/v1/messages"):
        reply = httpx.post(f"{base}{path}", content=body, headers=headers)
        assert reply.status_code == 415, (path, reply.text)


def test_json_with_parameters_is_json(served):
    base, _ = served
    reply = httpx.post(
        f"{base}/v1/chat/completions",
        content=httpx.Request("POST", "/", json=CHAT).content,
        headers={"Content-Type": "application/json; charset=utf-8"},
    )
    assert reply.status_code == 200


@pytest.mark.parametrize(
    ("origin", "status"),
    [
        ("http://attacker.example", 403),
        ("null", 403),
        ("http://203.0.113.9", 403),  # an arbitrary IP is any web server
        ("http://localhost:3000", 200),  # a local page (the playground, a dev server)
        ("http://127.0.0.1:8000", 200),
        ("http://app.example", 200),  # --allowed-origins
    ],
)
def test_state_changing_routes_check_origin(served, origin, status):
    base, _ = served
    reply = httpx.post(f"{base}/v1/chat/completions", json=CHAT, headers={"Origin": origin})
    assert reply.status_code == status, reply.text


def test_405_names_the_allowed_methods_in_the_api_shape(served):
    base, _ = served
    reply = httpx.get(f"{base}/v1/chat/completions")
    assert reply.status_code == 405
    assert reply.headers["allow"] == "POST"
    assert reply.json()["error"]["type"] == "invalid_request_error"
    reply = httpx.get(f"{base}/v1/messages")
    assert reply.status_code == 405 and reply.json()["type"] == "error"


def test_a_refused_preflight_is_an_api_error(served):
    base, _ = served
    headers = {"Origin": "http://other.example", "Access-Control-Request-Method": "POST"}
    reply = httpx.options(f"{base}/v1/chat/completions", headers=headers)
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "cors_refused"
    headers["Origin"] = "http://app.example"
    reply = httpx.options(f"{base}/v1/chat/completions", headers=headers)
    assert reply.status_code == 200
    assert reply.headers["access-control-allow-origin"] == "http://app.example"


def test_content_length_with_transfer_encoding_is_refused_and_closed(served):
    base, _ = served
    smuggled = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
        b"Content-Type: application/json\r\nContent-Length: 4\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"
    )
    answer, closed = _raw(base, smuggled)
    assert closed
    assert answer.startswith(b"HTTP/1.1 400")
    assert answer.count(b"HTTP/1.1") == 1  # the smuggled second request never ran


def test_a_half_sent_request_is_closed_at_the_read_timeout(served):
    base, _ = served
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
    answer, closed = _raw(base, head, wait=15)  # --read-timeout is 1 s
    assert closed, "the server kept a half-sent request open"
    assert answer == b""


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    """A replay server whose only way to close an idle connection is the connection cap
    (the read timeout is far longer than the test)."""
    folder = tmp_path_factory.mktemp("capped")
    (folder / "out.txt").write_text("Hello there.")
    args = ["--replay", str(folder / "out.txt"), "--read-timeout", "120", "--max-connections", "16"]
    with launched_server(None, args, folder / "server.log", timeout=120) as server:
        yield server.base_url


def _closed_by_server(sockets: list[socket.socket], at_least: int, wait: float) -> int:
    """How many of ``sockets`` the server has closed, watching up to ``wait`` seconds for at
    least ``at_least`` of them."""
    closed: set[socket.socket] = set()
    deadline = time.monotonic() + wait
    while len(closed) < at_least and (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([s for s in sockets if s not in closed], [], [], left)
        for sock in readable:
            try:
                ended = sock.recv(1) == b""
            except ConnectionError:
                ended = True
            if ended:
                closed.add(sock)
    return len(closed)


def test_idle_connections_past_the_cap_are_shed_and_health_answers(capped):
    """60 idle connections against --max-connections 16: the server closes the idle ones
    past the cap, and /health still answers."""
    host, port = capped.removeprefix("http://").split(":")
    idle = [socket.create_connection((host, int(port))) for _ in range(60)]
    try:
        for sock in idle:
            sock.sendall(b"GET /health HTTP/1.1\r\n")  # never finished
        assert httpx.get(f"{capped}/health", timeout=10).status_code == 200
        # at most 16 stay open (the /health request took one slot too)
        shed = _closed_by_server(idle, at_least=60 - 16, wait=10)
        assert shed >= 60 - 16, shed
    finally:
        for sock in idle:
            sock.close()


def test_control_characters_never_reach_the_access_log(served):
    base, log = served
    httpx.get(f"{base}/v1/forged%0A2026-01-01 INFO fake%1B[31mred")
    time.sleep(0.5)
    text = Path(log).read_text()
    line = next(line for line in text.splitlines() if "forged" in line)
    assert "\\n2026-01-01 INFO fake\\x1b[31mred" in line
    assert "\x1b" not in text


def test_a_stream_past_the_queue_is_a_429_before_it_starts():
    with replay_server("Hello there.") as (base, runtime):
        runtime.engine.max_queue = 0  # every admission is refused
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(**CHAT, stream=True)
        claude = anthropic.Anthropic(base_url=base, api_key="x", max_retries=0)
        with pytest.raises(anthropic.RateLimitError):
            with claude.messages.stream(
                model="m", max_tokens=2, messages=[{"role": "user", "content": "Hi"}]
            ) as stream:
                stream.until_done()


def test_units():
    policy = HostPolicy.for_binding("127.0.0.1", [".corp.example"])
    assert policy.allows("a.corp.example") and policy.allows("corp.example")
    assert not policy.allows("corp.example.attacker")
    assert policy.allows_origin("127.0.0.2") and not policy.allows_origin("8.8.8.8")
    assert host_name("[::1]:80") == "::1" and host_name("http://x.example:1/") == "x.example"
    assert is_json_media_type("application/vnd.api+json") and not is_json_media_type("text/json")
    assert log_safe("a\nb\x1b\\") == "a\\nb\\x1b\\\\"
