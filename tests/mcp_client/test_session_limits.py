"""One client's bad call fails alone: the stdio session to a real server survives a lone
surrogate in the arguments and a result over the message limit, and calls in flight finish."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_servers.harness import toolbox_stdio

from vllm_mlx.mcp.config import parse_config
from vllm_mlx.mcp.connection import MAX_TRANSPORT_MESSAGE_BYTES
from vllm_mlx.mcp.executor import MAX_ARGUMENT_BYTES, sending_error
from vllm_mlx.mcp.manager import MCPManager
from vllm_mlx.mcp.stdio import LineSplitter, encode_message, oversized_id, parse_line

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def manager() -> AsyncIterator[MCPManager]:
    config = parse_config(
        {"mcpServers": {"box": toolbox_stdio(timeout=60)}, "max_output_bytes": 4096}
    )
    async with MCPManager(config) as running:
        yield running


def _healthy(manager: MCPManager) -> None:
    status = manager.status()["box"]
    assert status["state"] == "connected", status
    assert status["restarts"] == 0, status


async def test_a_lone_surrogate_fails_only_its_own_call(manager):
    held = asyncio.create_task(manager.call_tool("hold", {"seconds": 1.0}))
    await asyncio.sleep(0.1)
    bad = await manager.call_tool("echo", {"text": "a\ud800b"})
    bad_text = await manager.call_tool("echo", '{"text": "\\udc00"}')
    assert bad.is_error and "surrogates not allowed" in bad.text
    assert bad_text.is_error and "surrogates not allowed" in bad_text.text
    assert (await held).text == "held"
    assert (await manager.call_tool("echo", {"text": "after"})).text == "after"
    _healthy(manager)


async def test_a_surrogate_that_reaches_the_transport_is_answered_not_fatal(manager):
    session = manager.connections["box"].session
    with pytest.raises(MCPError, match="cannot be sent"):
        await session.call_tool("echo", {"text": "\ud800"})
    assert (await manager.call_tool("echo", {"text": "still"})).text == "still"
    _healthy(manager)


async def test_a_20_mb_result_is_capped_while_others_run(manager):
    held = asyncio.create_task(manager.call_tool("hold", {"seconds": 1.0}))
    big = await manager.call_tool("big_output", {"megabytes": 20})
    assert not big.is_error
    assert big.truncated and len(big.text.encode()) < 4096 + 200
    assert f"{20 * 1024 * 1024} bytes total" in big.text
    assert (await held).text == "held"
    _healthy(manager)


async def test_a_result_over_the_message_limit_fails_alone(manager):
    megabytes = MAX_TRANSPORT_MESSAGE_BYTES // (1024 * 1024) // 2 + 8  # sent twice: text + JSON
    held = asyncio.create_task(manager.call_tool("hold", {"seconds": 1.0}))
    huge = await manager.call_tool("big_output", {"megabytes": megabytes})
    assert huge.is_error
    assert f"over the {MAX_TRANSPORT_MESSAGE_BYTES}-byte limit" in huge.text
    assert (await held).text == "held"
    assert (await manager.call_tool("echo", {"text": "after"})).text == "after"
    _healthy(manager)


# -- the pieces, without a server -----------------------------------------------------------


def _response(request_id: int, text: str, id_last: bool = False) -> bytes:
    result = {"content": [{"type": "text", "text": text}]}
    message = (
        {"result": result, "jsonrpc": "2.0", "id": request_id}
        if id_last
        else {"jsonrpc": "2.0", "id": request_id, "result": result}
    )
    return json.dumps(message).encode() + b"\n"


@pytest.mark.parametrize("id_last", [False, True])
def test_an_oversized_line_becomes_an_error_for_its_id(id_last):
    splitter = LineSplitter(max_line_bytes=10_000)
    # "id" inside the text must not be taken for the message's id
    data = _response(7, '"id": 99 ' + "y" * 50_000, id_last) + _response(8, "small")
    items = []
    for start in range(0, len(data), 4096):
        items += splitter.feed(data[start : start + 4096])
    first, second = items
    assert isinstance(first, SessionMessage)
    assert isinstance(first.message, types.JSONRPCError)
    assert first.message.id == 7 and "over the 10000-byte limit" in first.message.error.message
    parsed = parse_line(second)
    assert parsed.message.id == 8


def test_an_oversized_line_without_an_id_is_dropped():
    splitter = LineSplitter(max_line_bytes=100)
    assert splitter.feed(b"x" * 500 + b"\n" + b'{"jsonrpc":"2.0","id":1,"result":{}}\n') == [
        b'{"jsonrpc":"2.0","id":1,"result":{}}'
    ]


def test_ids_are_read_from_either_end():
    assert oversized_id(b'{"jsonrpc":"2.0","id":"a-1","result":{"x":', b"") == "a-1"
    assert oversized_id(b'{"result":{"text":"\\"id\\": 3', b'","jsonrpc":"2.0","id":12}') == 12
    assert oversized_id(b'{"result":', b"no id here") is None


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"text": "\ud800"}, "surrogates not allowed"),
        ({"x": float("nan")}, "not JSON compliant"),
        ({"x": "y" * (MAX_ARGUMENT_BYTES + 1)}, "over the"),
    ],
)
def test_arguments_that_cannot_be_sent_are_refused(arguments, reason):
    assert reason in (sending_error(arguments) or "")


def test_ordinary_arguments_can_be_sent():
    assert sending_error({"text": "héllo ✓", "n": [1, 2.5, None, True]}) is None


def test_an_unencodable_request_is_named_not_written():
    request = types.JSONRPCRequest(
        jsonrpc="2.0", id=1, method="tools/call", params={"arguments": {"t": "\ud800"}}
    )
    assert isinstance(encode_message(SessionMessage(request)), str)
