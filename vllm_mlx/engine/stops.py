"""Stop strings over streamed text: a stop string never reaches the client, even when it
spans several tokens, and text that might begin one is held back until it is decided."""

from __future__ import annotations


class StopMatcher:
    def __init__(self, stops: list[str]):
        self._stops = [s for s in stops if s]
        self._longest = max((len(s) for s in self._stops), default=0)
        self._pending = ""

    def feed(self, text: str) -> tuple[str, str | None]:
        """Add text; return (text safe to emit, the stop string matched or None)."""
        if not self._stops:
            return text, None
        buf = self._pending + text
        # Search only where a new match could start: the held-back tail plus the new text.
        first = None
        for stop in self._stops:
            at = buf.find(stop)
            if at != -1 and (first is None or at < first[0]):
                first = (at, stop)
        if first is not None:
            self._pending = ""
            return buf[: first[0]], first[1]
        hold = self._held_suffix(buf)
        self._pending = buf[len(buf) - hold :]
        return buf[: len(buf) - hold], None

    def flush(self) -> str:
        """Release held text at the end of generation: it never became a stop string."""
        out, self._pending = self._pending, ""
        return out

    def _held_suffix(self, buf: str) -> int:
        """Length of the longest suffix of buf that is a proper prefix of some stop string."""
        for n in range(min(len(buf), self._longest - 1), 0, -1):
            tail = buf[-n:]
            if any(s.startswith(tail) for s in self._stops):
                return n
        return 0
