"""The bounded in-memory store behind ``store: true``, ``previous_response_id`` and
``GET /v1/responses/{id}``.

A local server must not grow without bound, so the least recently used responses are
forgotten past ``max_entries``; a forgotten id then answers 404 like an unknown one.
Each entry keeps its whole conversation so a follow-up needs one lookup; the message
dicts are shared with the entries before it, not copied.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

DEFAULT_MAX_ENTRIES = 512


@dataclass(frozen=True)
class StoredResponse:
    body: dict  # the response object, as GET returns it
    conversation: list[dict]  # chat messages: every input so far and this response's output


class ResponseStore:
    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES):
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()

    def put(self, response_id: str, entry: StoredResponse) -> None:
        self._entries[response_id] = entry
        self._entries.move_to_end(response_id)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def get(self, response_id: str) -> StoredResponse | None:
        entry = self._entries.get(response_id)
        if entry is not None:
            self._entries.move_to_end(response_id)
        return entry

    def __len__(self) -> int:
        return len(self._entries)
