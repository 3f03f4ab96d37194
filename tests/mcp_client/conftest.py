"""The MCP client's tests run on asyncio (the anyio plugin drives their async tests and
module-scoped async fixtures, such as a module's running MCPManager)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"
