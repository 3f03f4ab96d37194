"""A memory-bounded LRU of KV caches keyed by token prefixes, optionally backed by disk.

An entry serves a prompt in one of two ways. A trimmable cache (plain or quantized KV)
serves any prompt it shares a prefix with: it is trimmed to the common prefix, so a client
that rewrote the previous assistant turn still reuses everything before the rewrite. A cache
that cannot be trimmed (sliding-window, state-space layers) serves only prompts it is a
strict prefix of; for those the source stores checkpoints at message boundaries, which the
next turn extends even when the turn after them changed.

Fetching copies nothing: the request gets new cache objects over views of the entry's arrays.
MLX arrays are values; a write into a view whose buffer the entry still holds produces a new
buffer, so the entry is never changed, and the only copy is the one the batch makes anyway
when it merges the request's cache into its own buffers. At least the last prompt token is
always recomputed, because generation needs its logits.

Entries live in lanes: the base model's (``lane=None``) and one per adapter (its files'
hash). A prefix computed under one adapter is never served to another or to the base, in
memory or on disk (each lane has its own disk namespace).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np
from mlx.utils import tree_map
from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

from ..protocols import LayerCache, Tokenizer
from .cache_files import DiskCache, cache_namespace


@dataclass(eq=False)  # entries are told apart by identity: their token arrays differ in length
class _Entry:
    tokens: np.ndarray
    cache: list[LayerCache]
    nbytes: int
    trimmable: bool
    used: int = 0
    lane: str | None = None


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


def usable(tokens: np.ndarray, trimmable: bool, prompt: np.ndarray) -> int:
    """Prompt tokens an entry can serve (never the last one)."""
    shared = common_prefix(tokens, prompt)
    if trimmable:
        return min(shared, len(prompt) - 1)
    return len(tokens) if shared == len(tokens) < len(prompt) else 0


def shared_copy(cache: list[LayerCache]) -> list[LayerCache]:
    """Per layer, a new cache object whose arrays are views of the given ones (no data is
    copied; see the module docstring for why writes cannot reach the original)."""
    shared = []
    for layer in cache:
        clone = copy.copy(layer)
        clone.state = tree_map(lambda x: x[...] if isinstance(x, mx.array) else x, layer.state)
        shared.append(clone)
    return shared


class PrefixCache:
    def __init__(
        self,
        max_bytes: int,
        max_entries: int = 64,
        disk: DiskCache | None = None,
        lane_disk: Callable[[str], DiskCache] | None = None,
    ):
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.disk = disk
        self._lane_disk = lane_disk  # an adapter lane's disk cache, made on first use
        self._lane_disks: dict[str, DiskCache] = {}
        self._entries: list[_Entry] = []
        self._clock = itertools.count(1)

    def _disk(self, lane: str | None) -> DiskCache | None:
        if lane is None or self.disk is None or self._lane_disk is None:
            return self.disk if lane is None else None
        if lane not in self._lane_disks:
            self._lane_disks[lane] = self._lane_disk(lane)
        return self._lane_disks[lane]

    def fetch(
        self, prompt: list[int], lane: str | None = None
    ) -> tuple[list[LayerCache] | None, int]:
        """(a private copy of the best entry's cache trimmed to what it serves, that length)."""
        if not prompt:
            return None, 0
        wanted = np.asarray(prompt, dtype=np.int32)
        best, served = self._best(wanted, lane)
        disk = self._disk(lane)
        if disk is not None:
            best, served = self._from_disk(disk, wanted, best, served, lane)
        if best is None:
            return None, 0
        best.used = next(self._clock)
        cache = shared_copy(best.cache)
        if len(best.tokens) > served:
            trim_prompt_cache(cache, len(best.tokens) - served)
        return cache, served

    def _best(self, wanted: np.ndarray, lane: str | None) -> tuple[_Entry | None, int]:
        best, served = None, 0
        for entry in self._entries:
            if entry.lane != lane:
                continue
            n = usable(entry.tokens, entry.trimmable, wanted)
            if n > served:
                best, served = entry, n
        return best, served

    def served(self, prompt: np.ndarray, lane: str | None = None) -> int:
        """Prompt tokens memory would serve now (nothing fetched, nothing copied)."""
        return self._best(prompt, lane)[1]

    def servable(self, prompt: np.ndarray, lane: str | None = None) -> int:
        """Prompt tokens memory or the disk would serve now (nothing read, nothing copied)."""
        served = self.served(prompt, lane)
        disk = self._disk(lane)
        if disk is None:
            return served
        return max([served, *(usable(e.tokens, e.trimmable, prompt) for e in disk.candidates())])

    def _from_disk(
        self,
        disk: DiskCache,
        wanted: np.ndarray,
        best: _Entry | None,
        served: int,
        lane: str | None,
    ):
        """A disk entry that serves more than memory can, loaded into memory."""
        ranked = sorted(
            ((usable(e.tokens, e.trimmable, wanted), e) for e in disk.candidates()),
            key=lambda pair: -pair[0],
        )
        for n, entry in ranked:
            if n <= served:
                break
            cache = disk.load(entry)
            if cache is not None:
                loaded = self._insert(entry.tokens, cache, lane)
                return (loaded, n) if loaded is not None else (best, served)
        return best, served

    def store(self, tokens: list[int], cache: list[LayerCache], lane: str | None = None) -> None:
        if not tokens or not cache:
            return
        # A row extracted from a batch is a lazy slice of the whole batch's KV buffers:
        # evaluate it now, or the entry would keep every row of that batch alive.
        mx.eval([c.state for c in cache])
        entry = self._insert(np.asarray(tokens, dtype=np.int32), cache, lane)
        disk = self._disk(lane)
        if entry is not None and disk is not None:
            disk.save(list(tokens), cache, entry.trimmable)

    def _insert(
        self, tokens: np.ndarray, cache: list[LayerCache], lane: str | None
    ) -> _Entry | None:
        nbytes = sum(c.nbytes for c in cache)
        if nbytes > self.max_bytes:
            return None
        entry = _Entry(tokens, cache, nbytes, can_trim_prompt_cache(cache), next(self._clock), lane)
        # Same tokens: replaced. A trimmable entry also serves every prefix of itself.
        self._entries = [
            e
            for e in self._entries
            if e.lane != lane
            or not (
                np.array_equal(e.tokens, tokens)
                or (
                    entry.trimmable
                    and e.trimmable
                    and common_prefix(e.tokens, tokens) == len(e.tokens)
                )
            )
        ]
        self._entries.append(entry)
        while len(self._entries) > self.max_entries or self.nbytes > self.max_bytes:
            self._entries.remove(min(self._entries, key=lambda e: e.used))
        return entry

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def flush(self) -> None:
        """Finish writing to disk."""
        for disk in (self.disk, *self._lane_disks.values()):
            if disk is not None:
                disk.flush()


def build_prefix_cache(
    model: Any,
    tokenizer: Tokenizer,
    *,
    memory_mb: int,
    disk_dir: str | None = None,
    disk_gb: float = 10.0,
    **kv_settings: Any,
) -> PrefixCache | None:
    """The server's prefix cache: ``memory_mb`` of entries (0: none), persisted under
    ``disk_dir`` in this model's namespace when given."""
    if memory_mb <= 0:
        return None
    if not disk_dir:
        return PrefixCache(memory_mb * 2**20)
    namespace = cache_namespace(model, tokenizer, **kv_settings)
    budget = int(disk_gb * 2**30)

    def lane_disk(lane: str) -> DiskCache:
        digest = hashlib.sha256(f"{namespace}+adapter:{lane}".encode()).hexdigest()[:24]
        return DiskCache(disk_dir, digest, budget)

    return PrefixCache(
        memory_mb * 2**20, disk=DiskCache(disk_dir, namespace, budget), lane_disk=lane_disk
    )
