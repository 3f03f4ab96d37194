"""Comparing a streamed answer with the non-streamed one for the same request.

Ids and times differ between two runs, and so does prompt-cache accounting: the second of two
identical requests reads its prompt from the prefix cache. Everything else must be equal.
"""

from __future__ import annotations


def comparable_message(message) -> dict:
    """An Anthropic message without ids, its input counted as one total."""
    body = message.model_dump(exclude_none=True)
    body.pop("id")
    for block in body["content"]:
        block.pop("id", None)
        block.pop("parsed_output", None)
    usage = body["usage"]
    usage["input_tokens"] += usage.pop("cache_read_input_tokens", 0)
    return body


def comparable_response(response) -> dict:
    """A Responses object without ids, times and cache accounting."""
    body = response.model_dump(exclude_none=True)
    for key in ("id", "created_at"):
        body.pop(key)
    for item in body["output"]:
        item.pop("id")
        item.pop("call_id", None)
        item.pop("parsed_arguments", None)
        for part in item.get("content", []):
            part.pop("parsed", None)
    body.get("usage", {}).pop("input_tokens_details", None)
    return body


def comparable_usage(usage) -> dict:
    """OpenAI chat usage without cache accounting."""
    body = usage.model_dump(exclude_none=True)
    body.pop("prompt_tokens_details", None)
    return body
