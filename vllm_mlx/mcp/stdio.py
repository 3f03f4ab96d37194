"""The stdio transport to one MCP server, bounded so one call can never end the session.

The SDK's ``stdio_client`` joins the growing line with each 64 KB chunk (a 16 MB answer took
10 s and starved the keep-alive ping, so the session dropped), has no bound on a line, and its
writer dies on a message that is not UTF-8 encodable (a lone surrogate), which ends the session
for every call in flight. Here lines are split on bytes in linear time; a line over
``max_line_bytes`` is skipped as it streams in (only its head and tail are kept) and the call it
answered gets an error response instead; a message that cannot be encoded is answered with an
error for its request and never written. Process start and shutdown follow the SDK: own process
group, close stdin, wait, then terminate the tree.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import TextIO

import anyio
import anyio.to_thread
import mcp_types as types
from anyio.abc import ObjectReceiveStream, ObjectSendStream, Process, TaskGroup
from mcp.client.stdio import StdioServerParameters
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

logger = logging.getLogger(__name__)

EXIT_GRACE_SECONDS = 2.0
KILL_GRACE_SECONDS = 2.0
WRITER_FLUSH_SECONDS = 0.5
PARSE_IN_THREAD_BYTES = 1024 * 1024
# Bytes kept from each end of an oversized line, enough to find its JSON-RPC id.
_EDGE_BYTES = 4096
# A top-level-looking ``"id": 12`` or ``"id": "abc"`` (not an escaped one inside a string).
_ID = re.compile(rb'(?<!\\)"id"\s*:\s*(-?\d{1,18}|"[^"\\]{1,128}")')

Incoming = SessionMessage | Exception


def oversized_id(head: bytes, tail: bytes) -> int | str | None:
    """The JSON-RPC id of a message seen only by its two ends: servers put ``id`` before the
    result (Python SDK) or after it (TypeScript SDK)."""
    result_at = head.find(b'"result"')
    early = _ID.search(head, 0, result_at if result_at >= 0 else len(head))
    late = list(_ID.finditer(tail))
    match = early or (late[-1] if late else None)
    if match is None:
        return None
    raw = match.group(1)
    return raw[1:-1].decode("utf-8", "replace") if raw.startswith(b'"') else int(raw)


def error_reply(request_id: int | str, message: str, code: int) -> SessionMessage:
    error = types.ErrorData(code=code, message=message)
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


class LineSplitter:
    """Newline-delimited JSON-RPC from byte chunks, with a bound on one line."""

    def __init__(self, max_line_bytes: int):
        self.max_line_bytes = max_line_bytes
        self._line = bytearray()
        self._head: bytes | None = None  # set while skipping an oversized line
        self._tail = bytearray()
        self._size = 0

    def feed(self, chunk: bytes) -> list[bytes | Incoming]:
        """Complete lines (to parse) and replies standing in for oversized ones."""
        out: list[bytes | Incoming] = []
        start = 0
        while start <= len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            self._add(piece)
            if end < 0:
                break
            item = self._finish()
            if item is not None:
                out.append(item)
            start = end + 1
        return out

    def _add(self, piece: bytes) -> None:
        self._size += len(piece)
        if self._head is None:
            self._line += piece
            if len(self._line) > self.max_line_bytes:
                self._head = bytes(self._line[:_EDGE_BYTES])
                self._tail = self._line[-_EDGE_BYTES:]
                self._line = bytearray()
        else:
            self._tail = (self._tail + piece)[-_EDGE_BYTES:]

    def _finish(self) -> bytes | Incoming | None:
        size, head, tail = self._size, self._head, bytes(self._tail)
        line, self._line, self._head, self._tail, self._size = (
            self._line,
            bytearray(),
            None,
            bytearray(),
            0,
        )
        if head is not None:
            return self._oversized(size, head, tail)
        return bytes(line) if line.strip() else None

    def _oversized(self, size: int, head: bytes, tail: bytes) -> Incoming | None:
        request_id = oversized_id(head, tail)
        message = (
            f"the server's answer is {size} bytes, over the {self.max_line_bytes}-byte limit "
            "for one MCP message; it was discarded"
        )
        logger.warning("MCP server message for id %r discarded: %s", request_id, message)
        if request_id is None:
            return None  # nothing waits that we could name; the call runs into its timeout
        return error_reply(request_id, message, types.INTERNAL_ERROR)


def parse_line(line: bytes) -> Incoming:
    """One JSON-RPC message; a bad line becomes an exception the session logs."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        logger.warning("MCP server sent a line that is not JSON-RPC: %s", exc)
        return exc


def encode_message(message: SessionMessage) -> bytes | str:
    """The line to write, or the reason it cannot be written (not JSON/UTF-8 encodable)."""
    try:
        text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
        return (text + "\n").encode("utf-8")
    except (ValueError, UnicodeEncodeError) as exc:  # pydantic's error is a ValueError
        return f"the request cannot be sent to the MCP server: {exc}"


@asynccontextmanager
async def stdio_transport(
    params: StdioServerParameters, errlog: TextIO, max_line_bytes: int
) -> AsyncIterator[tuple[ObjectReceiveStream[Incoming], ObjectSendStream[SessionMessage]]]:
    """Spawn the server and yield the (read, write) streams a ``ClientSession`` takes."""
    process = await anyio.open_process(
        [params.command, *params.args],
        env=params.env,
        stderr=errlog,
        cwd=params.cwd,
        start_new_session=True,
    )
    to_session, read_stream = anyio.create_memory_object_stream[Incoming](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()

    async def read_stdout() -> None:
        assert process.stdout is not None
        splitter = LineSplitter(max_line_bytes)
        async with to_session:
            with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for chunk in process.stdout:
                    for item in splitter.feed(chunk):
                        if isinstance(item, bytes):
                            # Parsing megabytes would stall every other request on the loop.
                            big = len(item) > PARSE_IN_THREAD_BYTES
                            item = (
                                await anyio.to_thread.run_sync(parse_line, item)
                                if big
                                else parse_line(item)
                            )
                        await to_session.send(item)
            with anyio.CancelScope(shield=True), suppress(Exception):
                async for _ in process.stdout:  # drain so a flushing server can exit
                    pass

    async def deliver(item: Incoming) -> None:
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await to_session.send(item)

    async def write_stdin(tg: TaskGroup) -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for message in from_session:
                    data = encode_message(message)
                    if isinstance(data, bytes):
                        await process.stdin.send(data)
                        continue
                    logger.warning("%s", data)
                    if isinstance(message.message, types.JSONRPCRequest):
                        # From its own task: the session may itself be waiting on this writer.
                        reply = error_reply(message.message.id, data, types.INVALID_PARAMS)
                        tg.start_soon(deliver, reply)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await to_session.aclose()  # the session sees the connection end
        finally:
            writer_done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_stdout)
        tg.start_soon(write_stdin, tg)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await _shutdown(process, read_stream, write_stream, writer_done)
            tg.cancel_scope.cancel()


async def _shutdown(
    process: Process,
    read_stream: ObjectReceiveStream[Incoming],
    write_stream: ObjectSendStream[SessionMessage],
    writer_done: anyio.Event,
) -> None:
    await read_stream.aclose()
    await write_stream.aclose()
    with anyio.move_on_after(WRITER_FLUSH_SECONDS):
        await writer_done.wait()
    if process.stdin is not None:
        with suppress(Exception):
            await process.stdin.aclose()
    if not await _exited(process, EXIT_GRACE_SECONDS):
        await terminate_posix_process_tree(process, KILL_GRACE_SECONDS)
        if not await _exited(process, KILL_GRACE_SECONDS):
            logger.warning("MCP server process %d survived the kill; abandoning it", process.pid)
    if process.stdout is not None:
        with suppress(Exception):
            await process.stdout.aclose()


async def _exited(process: Process, timeout: float) -> bool:
    """Poll the return code (``wait()`` would also wait for pipe EOF held by grandchildren)."""
    with anyio.move_on_after(timeout):
        while process.returncode is None:
            await anyio.sleep(0.01)
    return process.returncode is not None
