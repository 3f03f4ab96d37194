"""The bounded in-memory store behind ``store: true``, ``previous_response_id`` and
``GET /v1/responses/{id}``.

A local server must not grow without bound, so the least recently used responses are
forgotten past ``max_entries`` or once the entries' text passes ``max_bytes`` (counted as
the characters of every string they hold, which is what their size is made of); a response
larger than the whole budget is not kept. A forgotten id then answers 404 like an unknown
one. Each entry keeps its whole conversation so a follow-up needs one lookup; the message
dicts are shared with the entries before it, not copied (and counted for each entry, so the
bound errs towards forgetting early).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from ...request import text_chars

DEFAULT_MAX_ENTRIES = 512
DEFAULT_MAX_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True)
class StoredResponse:
    body: dict  # the response object, as GET returns it
    conversation: list[dict]  # chat messages: every input so far and this response's output

    def size(self) -> int:
        return text_chars(self.body) + text_chars(self.conversation)


class ResponseStore:
    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES):
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("max_entries and max_bytes must be at least 1")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, tuple[StoredResponse, int]] = OrderedDict()

    def put(self, response_id: str, entry: StoredResponse) -> bool:
        """Keep ``entry`` (evicting the oldest as needed); False if it alone is too big."""
        size = entry.size()
        self._drop(response_id)
        if size > self.max_bytes:
            return False
        self._entries[response_id] = (entry, size)
        self.bytes += size
        while len(self._entries) > self.max_entries or self.bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))
        return True

    def _drop(self, response_id: str) -> None:
        old = self._entries.pop(response_id, None)
        if old is not None:
            self.bytes -= old[1]

    def get(self, response_id: str) -> StoredResponse | None:
        found = self._entries.get(response_id)
        if found is None:
            return None
        self._entries.move_to_end(response_id)
        return found[0]

    def __len__(self) -> int:
        return len(self._entries)
