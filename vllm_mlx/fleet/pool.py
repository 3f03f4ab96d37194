"""The loaded models: loaded on a request's first use, shared by every request for them,
unloaded when idle (``--model-ttl``), least recently used first when a load needs the room
(``--max-loaded-models``, ``--max-memory-gb``), and never while a request uses them.

Everything runs on the event loop except the loads and unloads themselves, which block for
seconds and run in threads: requests for other loaded models keep being served meanwhile.
One load task per model, so concurrent requests for a model that is loading wait on the
same load. A ``Lease`` per request counts the requests in flight.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from mlx.utils import tree_flatten

from .. import native
from ..models.adapter_set import AdapterBusy, AdapterCapacity, AdapterSet
from ..models.adapters import AdapterError
from ..models.errors import ModelLoadError
from ..native import packing
from ..pipeline import Pipeline
from ..runtime import Runtime
from .adapters import AdapterEntry
from .catalog import Catalog, Entry

log = logging.getLogger(__name__)

Build = Callable[[Entry], Runtime]


class UnknownModel(LookupError):
    def __init__(self, model_id: str | None, known: list[str]):
        super().__init__(
            f"model {model_id!r} is not served here; models: {', '.join(known) or 'none'}"
        )


class PoolFull(RuntimeError):
    """No room for a load now: every loaded model is in use. Retry later."""


class ModelTooLarge(RuntimeError):
    """The model alone needs more than ``--max-memory-gb``."""


class ModelLoadFailed(RuntimeError):
    pass


class ModelBusy(RuntimeError):
    """An unload asked for while requests use the model."""


class AdapterRefused(ValueError):
    """An adapter that does not fit its base (or is not an adapter folder)."""


@dataclass(frozen=True)
class Resolved:
    """What a request's model id named, resolved once where the request enters the pool
    and carried with it to its lease: the catalog entry (an alias or unknown id already
    turned into its model; an adapter's id into its base's entry marked with the adapter).
    Whatever else a request selects per model belongs here, resolved in the same place."""

    entry: Entry
    requested: str | None  # the id as the client sent it

    @property
    def name(self) -> str:
        """The model's (or adapter's) id, which responses report."""
        return self.entry.name

    @property
    def adapter(self) -> AdapterEntry | None:
        return self.entry.adapter


@dataclass(frozen=True)
class PoolLimits:
    max_loaded: int | None = None  # models loaded at once
    ttl: float | None = None  # seconds idle before unloading
    max_memory_bytes: int | None = None  # weights of the loaded models


@dataclass
class PoolEvents:
    """What the server's metrics hear about."""

    loaded: Callable[[str, float], None] = lambda name, seconds: None
    evicted: Callable[[str, str], None] = lambda name, reason: None
    pipeline: Callable[[Pipeline], None] = lambda pipeline: None


@dataclass
class Loaded:
    entry: Entry
    pipeline: Pipeline
    close: Callable[[], None] | None  # None: given by the embedder, never unloaded
    memory_bytes: int
    load_seconds: float
    leases: int = 0
    last_used: float = field(default_factory=time.monotonic)
    adapters: AdapterSet | None = None  # the adapters loaded on this model
    # seconds idle before unloading, as the last request that asked set it (Ollama's
    # keep_alive): None keeps the pool's --model-ttl, math.inf never unloads, 0 unloads
    # as soon as no request uses it
    keep_alive: float | None = None

    @property
    def total_bytes(self) -> int:
        """The weights and the adapters loaded on them."""
        return self.memory_bytes + (self.adapters.nbytes if self.adapters is not None else 0)


class Lease:
    """One request's use of a loaded model: it is not unloaded until ``release``."""

    def __init__(self, slot: Loaded, resolved: Resolved):
        self.slot = slot
        self.resolved = resolved
        self.name = slot.entry.name
        self.pipeline = slot.pipeline
        self._released = False
        self._then: list[Callable[[], None]] = []  # an adapter's hold, released with it
        slot.leases += 1
        slot.last_used = time.monotonic()

    def keep_alive(self, seconds: float | None) -> None:
        """How long the model stays loaded once idle, from this request on (None: the
        pool's TTL)."""
        self.slot.keep_alive = seconds

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.slot.leases -= 1
            self.slot.last_used = time.monotonic()
            for then in self._then:
                then()


def weights_in_memory(runtime: Runtime) -> int:
    """Bytes of the parameters a load holds (float32 on a CPU can be 5x the file): the
    model's, its draft model's and its multi-token-prediction head's, each array once (the
    head uses the model's embedding and output head where the checkpoint's are copies),
    and the packed copies of their weights the native products keep beside them."""
    source = runtime.engine.source
    heads = getattr(source, "mtp_heads", None)
    modules = [runtime.loaded.model, getattr(source, "draft_model", None)]
    modules.append(heads.layer if heads is not None else None)
    held: dict[int, int] = {}
    for module in modules:
        if module is not None:
            leaves = cast("list[tuple[str, Any]]", tree_flatten(module.parameters()))
            held.update((id(value), int(value.nbytes)) for _, value in leaves)
    return sum(held.values()) + sum(packing.packed_bytes(module) for module in modules)


class ModelPool:
    def __init__(
        self,
        catalog: Catalog,
        build: Build | None,
        limits: PoolLimits | None = None,
        *,
        strict: bool = False,
        events: PoolEvents | None = None,
    ):
        self.catalog = catalog
        self.build = build
        self.limits = limits or PoolLimits()
        self.strict = strict
        self.events = events or PoolEvents()
        self._slots: dict[str, Loaded] = {}
        self._loading: dict[str, asyncio.Future[Loaded]] = {}
        self._waiting: Counter[str] = Counter()
        self._measured: dict[str, int] = {}  # bytes of earlier loads
        self._closing: set[asyncio.Future[None]] = set()
        self._adapter_loading: dict[tuple[str, str], asyncio.Future[None]] = {}

    @classmethod
    def single(cls, pipeline: Pipeline, name: str) -> ModelPool:
        """One model the embedder built, served under every id, never unloaded."""
        entry = Entry(name, name, "the server's model")
        pool = cls(Catalog({name: entry}, default=name), None)
        pool._slots[name] = Loaded(entry, pipeline, None, 0, 0.0)
        return pool

    def adopt(self, name: str, runtime: Runtime, seconds: float) -> None:
        """A runtime loaded before the server started (``serve MODEL``)."""
        slot = Loaded(
            self.catalog.entries[name],
            runtime.pipeline,
            runtime.close,
            weights_in_memory(runtime),
            seconds,
            adapters=runtime.adapters,
        )
        self._slots[name] = slot
        self._measured[name] = slot.memory_bytes
        self.events.loaded(name, seconds)
        self.events.pipeline(runtime.pipeline)

    # -- which model -----------------------------------------------------------------------

    def resolve(self, model_id: str | None) -> Resolved:
        """The model ``model_id`` names (or aliases); else the default model, unless ids
        are strict or there is no default."""
        entry = self.catalog.lookup(model_id)
        if entry is None:
            if self.strict or self.catalog.default is None:
                raise UnknownModel(model_id, sorted(self.catalog.entries))
            entry = self.catalog.entries[self.catalog.default]
        return Resolved(entry, model_id)

    def is_ready(self, resolved: Resolved) -> bool:
        adapter = resolved.adapter
        if adapter is not None:
            slot = self._slots.get(self.catalog.base_name(adapter) or "")
            adapters = slot.adapters if slot is not None else None
            return adapters is not None and adapters.get(adapter.name) is not None
        return resolved.name in self._slots

    def loaded(self) -> list[Loaded]:
        return list(self._slots.values())

    def is_loading(self, name: str) -> bool:
        return name in self._loading

    def default_pipeline(self) -> Pipeline | None:
        slot = self._slots.get(self.catalog.default or "")
        return slot.pipeline if slot is not None else None

    # -- using ----------------------------------------------------------------------------

    async def acquire(self, resolved: Resolved) -> Lease:
        """A lease on the resolved model, loading it first if needed (waiting on a load
        already running for it); an adapter's leases its base with the adapter."""
        if resolved.adapter is not None:
            return await self._acquire_adapter(resolved, resolved.adapter)
        name = resolved.name
        slot = self._slots.get(name)
        if slot is None:
            self._waiting[name] += 1  # a loaded model someone waits for stays
            try:
                slot = await self.load(name)
            finally:
                self._waiting[name] -= 1
        return Lease(slot, resolved)

    async def load(self, name: str) -> Loaded:
        slot = self._slots.get(name)
        if slot is not None:
            return slot
        task = self._loading.get(name)
        if task is None:
            entry = self.catalog.entries[name]
            if self.build is None:
                raise ModelLoadFailed(f"model {name!r} cannot be reloaded")
            problem = entry.check()  # what fails fast fails before a model is unloaded for it
            if problem is not None:
                raise ModelLoadFailed(f"model {name!r} failed to load: {problem}")
            self._make_room(entry)
            task = self._loading[name] = asyncio.ensure_future(self._build(entry))
        return await asyncio.shield(task)  # a waiter that leaves does not cancel the load

    # -- adapters -------------------------------------------------------------------------

    async def _acquire_adapter(self, resolved: Resolved, adapter: AdapterEntry) -> Lease:
        """A lease on the adapter's base whose pipeline runs the adapter (loaded first if
        it is not, waiting on a load already running for it)."""
        base = self.catalog.base_name(adapter)
        if base is None:
            raise UnknownModel(adapter.base, sorted(self.catalog.entries))
        lease = await self.acquire(Resolved(self.catalog.entries[base], resolved.requested))
        lease.resolved = resolved
        try:
            for _ in range(3):  # another load may evict it between its load and this use
                adapters = await self.load_adapter(lease.slot, adapter)
                held = adapters.use(adapter.name)
                if held is not None:
                    break
            else:
                raise PoolFull(f"adapter {adapter.name!r} was evicted as it loaded; retry")
        except BaseException:
            lease.release()
            raise
        lease.name = adapter.name
        lease.pipeline = lease.pipeline.with_adapter(held.choice, held.weights.chat_template)
        lease._then.append(lambda: adapters.release(held))
        return lease

    async def load_adapter(self, slot: Loaded, adapter: AdapterEntry) -> AdapterSet:
        """Load ``adapter`` on the model of ``slot`` (one load per adapter; the memory it
        needs is made room for like a model's)."""
        adapters = slot.adapters
        if adapters is None:
            raise AdapterRefused(f"model {slot.entry.name!r} does not serve adapters")
        if adapters.get(adapter.name) is not None:
            return adapters
        key = (slot.entry.name, adapter.name)
        task = self._adapter_loading.get(key)
        if task is None:
            need = sum(f.stat().st_size for f in adapter.path.glob("*.safetensors"))
            self._make_room(slot.entry, need=need, keep=slot)
            task = self._adapter_loading[key] = asyncio.ensure_future(
                self._load_adapter(adapters, adapter, key)
            )
        await asyncio.shield(task)
        return adapters

    async def _load_adapter(
        self, adapters: AdapterSet, adapter: AdapterEntry, key: tuple[str, str]
    ) -> None:
        try:
            await asyncio.to_thread(adapters.load, adapter.name, adapter.path)
            log.info("loaded adapter %s on %s from %s", adapter.name, key[0], adapter.path)
        except AdapterError as exc:
            raise AdapterRefused(str(exc)) from None
        except AdapterCapacity as exc:
            raise PoolFull(str(exc)) from None
        finally:
            del self._adapter_loading[key]

    async def unload_adapter(self, name: str) -> bool:
        """Unload ``name`` wherever it is loaded (ModelBusy while requests use it)."""
        unloaded = False
        for slot in self._slots.values():
            if slot.adapters is None:
                continue
            try:
                unloaded = slot.adapters.unload(name) or unloaded
            except AdapterBusy as exc:
                raise ModelBusy(str(exc)) from None
        return unloaded

    async def _build(self, entry: Entry) -> Loaded:
        assert self.build is not None
        started = time.perf_counter()
        log.info("loading model %s from %s", entry.name, entry.spec)
        try:
            runtime = await asyncio.to_thread(self.build, entry)
        except ModelLoadError as exc:  # its message says what to do: no traceback
            log.error("model %s failed to load: %s", entry.name, exc)
            raise ModelLoadFailed(f"model {entry.name!r} failed to load: {exc}") from exc
        except Exception as exc:
            log.exception("model %s failed to load", entry.name)
            raise ModelLoadFailed(f"model {entry.name!r} failed to load: {exc}") from exc
        finally:
            del self._loading[entry.name]
        seconds = time.perf_counter() - started
        slot = Loaded(
            entry,
            runtime.pipeline,
            runtime.close,
            weights_in_memory(runtime),
            seconds,
            adapters=runtime.adapters,
        )
        self._slots[entry.name] = slot
        self._measured[entry.name] = slot.memory_bytes
        log.info(
            "loaded model %s in %.2f s (%.0f MB)", entry.name, seconds, slot.memory_bytes / 1e6
        )
        self.events.loaded(entry.name, seconds)
        self.events.pipeline(runtime.pipeline)
        return slot

    def _estimate(self, entry: Entry) -> int:
        """The memory a load of ``entry`` takes: what it took last time, else its files."""
        return self._measured.get(entry.name) or entry.weight_bytes()

    def _make_room(self, entry: Entry, need: int | None = None, keep: Loaded | None = None) -> None:
        """Unload idle models, least recently used first, until ``entry`` (or ``need``
        more bytes beside the loaded ``keep``: an adapter on it) fits the limits;
        PoolFull when the models in the way are in use."""
        limits = self.limits
        need = self._estimate(entry) if need is None else need
        if limits.max_memory_bytes is not None and need > limits.max_memory_bytes:
            raise ModelTooLarge(
                f"model {entry.name!r} needs about {need / 2**30:.2f} GB, over "
                f"--max-memory-gb {limits.max_memory_bytes / 2**30:g}"
            )
        while True:
            count = len(self._slots) + len(self._loading)
            used = sum(s.total_bytes for s in self._slots.values()) + sum(
                self._estimate(self.catalog.entries[n]) for n in self._loading
            )
            too_many = keep is None and limits.max_loaded is not None and count >= limits.max_loaded
            too_big = limits.max_memory_bytes is not None and used + need > limits.max_memory_bytes
            if not (too_many or too_big):
                return
            idle = [s for s in self._slots.values() if self._evictable(s) and s is not keep]
            if not idle:
                busy = ", ".join(sorted([*self._slots, *self._loading]))
                raise PoolFull(
                    f"cannot load model {entry.name!r} now: the loaded models ({busy}) are "
                    f"in use and {'--max-loaded-models' if too_many else '--max-memory-gb'} "
                    "leaves no room"
                )
            victim = min(idle, key=lambda s: s.last_used)
            self._unload(victim, "lru" if too_many else "memory")

    def _evictable(self, slot: Loaded) -> bool:
        return slot.close is not None and slot.leases == 0 and not self._waiting[slot.entry.name]

    def _unload(self, slot: Loaded, reason: str) -> asyncio.Future[None]:
        """Forget ``slot`` now (a new request loads it afresh) and close it in a thread."""
        del self._slots[slot.entry.name]
        log.info("unloading model %s (%s)", slot.entry.name, reason)
        self.events.evicted(slot.entry.name, reason)
        close = slot.close
        assert close is not None

        def release() -> None:
            close()  # the engine stops and flushes its prefix cache
            gc.collect()
            native.packed_count()  # frees its packed weight copies now, not at a later lookup

        done = asyncio.ensure_future(asyncio.to_thread(release))
        self._closing.add(done)
        done.add_done_callback(self._closing.discard)
        return done

    async def unload(self, name: str) -> bool:
        """The operator's unload: False when the model is not loaded."""
        slot = self._slots.get(name)
        if slot is None:
            return False
        if slot.close is None:
            raise ModelBusy(f"model {name!r} was given by the embedder and stays loaded")
        if not self._evictable(slot):
            raise ModelBusy(f"model {name!r} has {slot.leases} request(s) in flight")
        await self._unload(slot, "operator")
        return True

    def idle_ttl(self, slot: Loaded) -> float | None:
        """Seconds ``slot`` may stay idle before it is unloaded (None: never)."""
        ttl = slot.keep_alive if slot.keep_alive is not None else self.limits.ttl
        return None if ttl is None or math.isinf(ttl) else ttl

    def expires_at(self, slot: Loaded) -> float | None:
        """When (``time.monotonic``) the idle model will be unloaded; None: not while in use,
        or never."""
        ttl = self.idle_ttl(slot)
        return None if ttl is None or slot.leases else slot.last_used + ttl

    def expire(self, name: str) -> None:
        """Unload ``name`` as soon as no request uses it (Ollama's ``keep_alive: 0``)."""
        slot = self._slots.get(name)
        if slot is not None:
            slot.keep_alive = 0.0

    async def watch_idle(self) -> None:
        """Unload models idle past their TTL (``--model-ttl``, or a request's keep-alive);
        runs while the server does."""
        while True:
            ttls = [t for s in self._slots.values() if (t := self.idle_ttl(s)) is not None]
            await asyncio.sleep(min([max(t / 4, 0.05) for t in ttls] + [5.0]))
            now = time.monotonic()
            for slot in list(self._slots.values()):
                ttl = self.idle_ttl(slot)
                if ttl is not None and self._evictable(slot) and now - slot.last_used >= ttl:
                    self._unload(slot, "ttl")

    async def close(self) -> None:
        """Stop every loaded model (server shutdown), after the unloads under way."""
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        for name, slot in list(self._slots.items()):
            if slot.close is not None:
                del self._slots[name]
                await asyncio.to_thread(slot.close)
            else:  # the embedder closes it; its prefix cache's disk writes finish here
                await asyncio.to_thread(slot.pipeline.engine.flush)

    # -- what the metrics and /health read ------------------------------------------------

    def queue_depth(self) -> int:
        return sum(s.pipeline.engine.queue_depth for s in self._slots.values())

    def running(self) -> int:
        return sum(s.pipeline.engine.running for s in self._slots.values())

    def spec_counts(self) -> tuple[int, int]:
        counts = [s.pipeline.engine.spec_counts for s in self._slots.values()]
        return sum(c[0] for c in counts), sum(c[1] for c in counts)
