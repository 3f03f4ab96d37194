"""`vllm-mlx serve ORG/NAME` end to end: downloaded from the hub stand-in, served under the
repo id to the official openai client; then started again with the stand-in gone and
HF_HUB_OFFLINE=1, from the cache, with the same answer."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from servers import cli_server

from .hub_standin import HubStandIn


def ask(base: str) -> tuple[str, str, list[str]]:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=120)
    reply = client.chat.completions.create(
        model="org/tiny",
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=6,
        temperature=0,
    )
    ids = [m.id for m in client.models.list().data]
    return reply.model, reply.choices[0].message.content or "", ids


def test_serve_a_hub_id_then_again_offline(
    hub: HubStandIn, stores: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cli_server("org/tiny", log_path=stores / "first.log") as base:
        model, first, ids = ask(base)
    assert model == "org/tiny" and ids == ["org/tiny"]
    assert hub.downloads("model.safetensors")
    hub.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with cli_server("org/tiny", log_path=stores / "second.log") as base:
        assert ask(base) == (model, first, ids)
