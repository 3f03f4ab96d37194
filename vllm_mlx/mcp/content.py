"""Turn an MCP tool result into text a language model can read, within a byte budget.

A text model cannot look at an image or a binary blob, so those become short descriptions;
embedded text resources are inlined with their URI. The whole text is cut at
``max_output_bytes`` (on a UTF-8 character boundary) and the cut is stated in the text itself,
so the model knows it is not seeing everything.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import mcp_types as types


def _blob_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def block_text(block: Any) -> str:
    """One content block as text for the model."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent):
        return f"[image: {block.mime_type}, {_blob_size(block.data)} bytes]"
    if isinstance(block, types.AudioContent):
        return f"[audio: {block.mime_type}, {_blob_size(block.data)} bytes]"
    if isinstance(block, types.EmbeddedResource):
        res = block.resource
        if isinstance(res, types.TextResourceContents):
            return f"[resource {res.uri}]\n{res.text}"
        mime = getattr(res, "mime_type", None) or "application/octet-stream"
        return f"[resource {res.uri}: {mime}, {_blob_size(getattr(res, 'blob', ''))} bytes]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link {block.uri}: {block.name}]"
    return json.dumps(block.model_dump(mode="json", exclude_none=True), ensure_ascii=False)


def result_text(result: types.CallToolResult) -> str:
    """All of a result's content as one text; structured content when there is no content."""
    if result.content:
        return "\n".join(block_text(block) for block in result.content)
    if result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return ""


def cap_text(text: str, max_bytes: int) -> tuple[str, bool]:
    """Cut text to at most max_bytes of UTF-8 and append a note saying so."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text, False
    kept = data[:max_bytes].decode("utf-8", errors="ignore")
    note = f"\n[output truncated: {len(data)} bytes total, first {max_bytes} bytes shown]"
    return kept + note, True


def raw_content(result: types.CallToolResult, max_bytes: int) -> list[dict[str, Any]]:
    """The result's content blocks as JSON, dropped for a single note when over budget."""
    blocks = [block.model_dump(mode="json", exclude_none=True) for block in result.content]
    size = len(json.dumps(blocks, ensure_ascii=False).encode("utf-8"))
    if size <= max_bytes:
        return blocks
    return [{"type": "text", "text": f"[raw content omitted: {size} bytes over the output cap]"}]
