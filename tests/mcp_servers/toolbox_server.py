"""A real MCP server for the tests: echo, slow, gated, huge output, crash, and a changing tool
list.

Run as ``python toolbox_server.py`` for stdio or ``python toolbox_server.py --http PORT`` for
streamable HTTP (bound to 127.0.0.1 only).
"""

from __future__ import annotations

import argparse
import asyncio
import os

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.utilities.types import Image

app = MCPServer("toolbox")
_in_flight = {"now": 0, "peak": 0}


@app.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@app.tool()
async def sleep(seconds: float) -> str:
    """Sleep, then report how long (used to overrun the call timeout)."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@app.tool()
def big_output(megabytes: int) -> str:
    """Return about this many megabytes of text (used to test the output cap)."""
    return "x" * (megabytes * 1024 * 1024)


@app.tool()
def crash() -> str:
    """Kill this server process mid-call."""
    os._exit(3)


@app.tool()
async def hold(seconds: float) -> str:
    """Stay busy for a while, counting how many calls are in flight at once."""
    _in_flight["now"] += 1
    _in_flight["peak"] = max(_in_flight["peak"], _in_flight["now"])
    try:
        await asyncio.sleep(seconds)
    finally:
        _in_flight["now"] -= 1
    return "held"


@app.tool()
def peak_concurrency() -> int:
    """The largest number of hold calls that ever ran at the same time."""
    return _in_flight["peak"]


_gate = asyncio.Event()


@app.tool()
async def wait_for_gate() -> str:
    """Return only once open_gate has been called (lets a test see what happens meanwhile)."""
    await _gate.wait()
    return "the gate is open"


@app.tool()
def open_gate() -> str:
    """Let every wait_for_gate call, waiting or to come, return."""
    _gate.set()
    return "opened"


@app.tool()
def picture() -> Image:
    """A tiny PNG (the model can only be told about it)."""
    return Image(data=b"\x89PNG\r\n\x1a\n" + bytes(24), format="png")


@app.tool()
def env_value(key: str) -> str:
    """Report one environment variable as the child process sees it."""
    return os.environ.get(key, "<unset>")


@app.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Register a new tool and announce that the tool list changed."""

    def added() -> str:
        return f"hello from {name}"

    app.add_tool(added, name=name, description=f"added at run time: {name}")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, help="serve streamable HTTP on 127.0.0.1:PORT")
    parser.add_argument("--sse", type=int, help="serve SSE on 127.0.0.1:PORT")
    args = parser.parse_args()
    app.settings.log_level = "WARNING"
    if args.http:
        app.run("streamable-http", host="127.0.0.1", port=args.http)
    elif args.sse:
        app.run("sse", host="127.0.0.1", port=args.sse)
    else:
        app.run()


if __name__ == "__main__":
    main()
