"""Two `vllm-mlx serve` replicas behind the SMG gateway (`smg launch --policy cache_aware`)
on loopback: what SMG probes on its workers is answered, and requests through it stream and
do not, on the OpenAI and Anthropic APIs."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from contextlib import ExitStack

import anthropic
import httpx
import openai
import pytest

from vllm_mlx.server.launch import free_port, launched_server, stop_process

from .tiny_folder import write_tiny_folder

SMG = shutil.which("smg")
pytestmark = pytest.mark.skipif(SMG is None, reason="smg (the SMG gateway) is not installed")
NAME = "tiny"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gateway")
    folder = str(write_tiny_folder(tmp / "model"))
    with ExitStack() as stack:
        replicas = [
            stack.enter_context(
                launched_server(folder, ["--served-model-name", NAME], tmp / f"replica{i}.log")
            )
            for i in range(2)
        ]
        port = free_port()
        urls = [r.base_url for r in replicas]
        log = open(tmp / "smg.log", "w")
        stack.callback(log.close)
        smg = subprocess.Popen(
            [SMG, "launch", "--worker-urls", *urls, "--policy", "cache_aware"]
            + ["--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        stack.callback(stop_process, smg, timeout=10)
        base = f"http://127.0.0.1:{port}"
        _wait_for_workers(base, smg, count=2)
        yield base, [tmp / f"replica{i}.log" for i in range(2)]


def _wait_for_workers(base: str, smg: subprocess.Popen, count: int, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert smg.poll() is None, "smg exited"
        try:
            ready = httpx.get(f"{base}/readiness", timeout=2)
            if ready.status_code == 200 and ready.json().get("healthy_workers", 0) >= count:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"smg did not register {count} healthy workers in {timeout:.0f} s")


def test_the_gateway_probes_are_answered(gateway):
    _, logs = gateway
    for log in logs:
        seen = dict(re.findall(r"method=GET path=(/\S+) status=(\d+)", log.read_text()))
        assert seen.get("/health") == "200"
        assert seen.get("/v1/models") == "200"
        assert seen.get("/version") == "200"  # vLLM's probe: OpenAI-compatible HTTP worker


def test_requests_through_the_gateway_stream_and_do_not(gateway):
    base, _ = gateway
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0, timeout=300)
    messages = [{"role": "user", "content": "Hello"}]
    whole = client.chat.completions.create(
        model=NAME, messages=messages, max_tokens=8, temperature=0
    )
    assert whole.choices[0].message.content and whole.usage.completion_tokens > 0
    chunks = list(
        client.chat.completions.create(
            model=NAME, messages=messages, max_tokens=8, temperature=0, stream=True
        )
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == whole.choices[0].message.content  # same model on either replica
    claude = anthropic.Anthropic(base_url=base, api_key="k", max_retries=0)
    request = dict(model=NAME, messages=messages, max_tokens=8, extra_body={"temperature": 0})
    reply = claude.messages.create(**request)
    assert reply.content[0].text
    with claude.messages.stream(**request) as stream:
        assert "".join(stream.text_stream) == reply.content[0].text
