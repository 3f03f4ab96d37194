"""The playground's MCP panel in a real browser against `serve --replay --mcp-config` with the
toolbox MCP server: the server's tools are listed, and with the opt-in the server runs the
calls the (replayed) model makes, shown as cards with their outputs."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from mcp_servers.harness import toolbox_stdio
from servers import cli_server

CALL = '<tool_call>\n{"name": "echo", "arguments": {"text": "ping"}}\n</tool_call>'


@pytest.fixture(scope="module")
def mcp_base(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui-mcp")
    config = tmp / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"toolbox": toolbox_stdio()}, "max_tool_calls": 2}))
    replay = tmp / "replay.txt"
    replay.write_text(CALL)
    args = ["--replay", str(replay), "--mcp-config", str(config), "--tool-call-parser", "hermes"]
    with cli_server(*args, log_path=tmp / "server.log") as base:
        for _ in range(100):  # the manager connects in the background of start-up
            if httpx.get(f"{base}/v1/mcp/tools").json()["data"]:
                break
            time.sleep(0.2)
        yield base


def test_mcp_tools_are_listed_and_run_by_the_server_on_opt_in(tab, mcp_base):
    with tab(mcp_base) as t:
        t.open()
        tools = t.page.locator('[data-part="mcp-tool"] code').all_inner_texts()
        assert {"echo", "sleep"} <= set(tools)
        assert "from toolbox" in t.page.inner_text("#mcp-note")
        t.page.check("#mcp")
        t.ask("Ping twice.")
        t.wait_done()
        body = t.bodies[-1]
        assert body["mcp"] is True and "stream" not in body
        cards = t.last_reply().locator('[data-part="tool-call"]')
        assert cards.count() == 2  # the config's max_tool_calls
        for i in range(2):
            card = cards.nth(i)
            assert card.get_attribute("data-ran-on") == "server"
            assert card.locator(".tool-name").inner_text() == "echo"
            assert "toolbox" in card.locator(".tool-where").inner_text()
            assert json.loads(card.locator(".tool-args").inner_text()) == {"text": "ping"}
            assert "ping" in card.locator(".tool-output").inner_text()
        stats = t.last_reply().locator('[data-part="stats"]').inner_text()
        assert "length" in stats and "tok/s (whole request)" in stats
        # the opt-in is remembered with the other settings
        t.open()
        assert t.page.is_checked("#mcp")
