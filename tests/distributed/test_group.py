"""The parts of sharded serving that need no ranks: layer splits, roles, the launcher's
command lines, and what a failed group looks like over HTTP (503 in each API's shape)."""

from __future__ import annotations

import anthropic
import openai
import pytest
from servers import thread_server
from shared import HELLO

from vllm_mlx.distributed.group import GroupHealth, pipeline_split, rank_roles
from vllm_mlx.distributed.ranks import launch_command, without_option
from vllm_mlx.distributed.shard import check_tensor_split
from vllm_mlx.runtime import build_replay_runtime
from vllm_mlx.server.app import create_app
from vllm_mlx.server.state import ServerState


def test_pipeline_split_matches_mlx_lm_order():
    """Rank 0 holds the last layers; extra layers go to the low ranks; no gaps."""
    assert pipeline_split(30, 2) == [(15, 30), (0, 15)]
    assert pipeline_split(6, 4) == [(4, 6), (2, 4), (1, 2), (0, 1)]
    for layers, ranks in ((30, 3), (7, 3), (4, 4)):
        spans = sorted(pipeline_split(layers, ranks))
        assert spans[0][0] == 0 and spans[-1][1] == layers
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))


def test_rank_roles_name_the_leader_and_each_share():
    roles = rank_roles(2, "pipeline", 30)
    assert roles[0].startswith("leader") and "layers 15-29" in roles[0]
    assert roles[1].startswith("follower") and "layers 0-14" in roles[1]
    assert all("1/3 of every layer" in r for r in rank_roles(3, "tensor", 30))


def test_tensor_split_needs_heads_that_divide():
    class Args:
        num_attention_heads = 9
        num_key_value_heads = 3

    check_tensor_split(Args(), 3)
    with pytest.raises(ValueError, match=r"attention heads \(9\).*fit: 3\)"):
        check_tensor_split(Args(), 2)


def test_the_launch_commands_drop_their_own_option():
    argv = ["serve", "m", "--distributed", "tensor", "--hosts", "10.0.0.1,10.0.0.2", "--port=9"]
    assert without_option(argv, "--hosts") == ["serve", "m", "--distributed", "tensor", "--port=9"]
    assert without_option(["serve", "--ranks=3", "--x"], "--ranks") == ["serve", "--x"]
    command = launch_command("10.0.0.1,10.0.0.2", "any", argv)
    assert command[command.index("--hosts") + 1] == "10.0.0.1,10.0.0.2"
    assert command[command.index("--backend") + 1] == "ring"
    tail = command[command.index("--") + 1 :]
    assert tail[1:3] == ["-m", "vllm_mlx"] and "--hosts" not in tail


def test_a_group_keeps_its_first_failure():
    health = GroupHealth(world_size=2, backend="ring", mode="tensor", rank_roles=["a", "b"])
    assert health.describe()["status"] == "ok"
    health.fail("rank 1 exited with code -9")
    health.fail("connection lost")  # what follows from the first failure
    assert health.describe() == {
        "world_size": 2,
        "backend": "ring",
        "mode": "tensor",
        "rank_roles": ["a", "b"],
        "status": "failed",
        "failure": "rank 1 exited with code -9",
    }


@pytest.fixture
def halted():
    """A real server whose engine was halted as a failed group halts it."""
    runtime = build_replay_runtime("Hello there, friend.")
    health = GroupHealth(world_size=2, backend="ring", mode="pipeline", rank_roles=["a", "b"])
    state = ServerState(runtime.pipeline, "m", distributed=health)
    with thread_server(create_app(state)) as base:
        reason = health.fail("rank 1 was killed by signal 9")
        runtime.engine.halt(reason)
        yield base
    runtime.close()


def test_a_failed_group_answers_503_in_each_api_shape(halted):
    import httpx

    health = httpx.get(f"{halted}/health")
    assert health.status_code == 503
    body = health.json()
    assert body["status"] == "unavailable" and "signal 9" in body["error"]
    assert body["distributed"]["failure"] == "rank 1 was killed by signal 9"
    client = openai.OpenAI(base_url=f"{halted}/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(model="m", messages=HELLO, max_tokens=4)
    assert failed.value.status_code == 503 and "signal 9" in failed.value.message
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(model="m", messages=HELLO, max_tokens=4, stream=True)
    assert failed.value.status_code == 503
    claude = anthropic.Anthropic(base_url=halted, api_key="k", max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as refused:
        claude.messages.create(model="m", messages=HELLO, max_tokens=4)
    assert refused.value.status_code == 503
    assert refused.value.body["error"]["type"] == "overloaded_error"
