"""A replay server started with the real CLI (a subprocess, so a crash would show as a dead
process) with the toolbox MCP server attached, shared by the hardening tests."""

from __future__ import annotations

import pytest
from servers import mcp_cli_server

REPLAY_TEXT = "A replayed answer, short and plain. " * 4


@pytest.fixture(scope="package")
def replay_cli(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("hardening")
    replay = tmp / "replay.txt"
    replay.write_text(REPLAY_TEXT)
    with mcp_cli_server(tmp, "--replay", str(replay), "--served-model-name", "replay") as base:
        yield base
