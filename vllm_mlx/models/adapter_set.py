"""The adapters loaded on one base model: loaded, counted, bounded and unloaded.

Loading reads and checks the folder (``adapters.read_adapter``) and installs its updates in
a new slot on the model (``lora.ModelAdapters``); requests then pick it by name. Past
``max_loaded`` the least recently used adapter no request is using is unloaded; one in use
never is. Thread-safe: loads run in threads beside the event loop and the engine's thread.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import mlx.nn as nn

from vllm_mlx.engine.generation import AdapterChoice
from vllm_mlx.models.adapters import AdapterError, AdapterWeights, read_adapter
from vllm_mlx.models.lora import model_adapters


class AdapterBusy(RuntimeError):
    """An unload (or an eviction) of an adapter requests are using."""


class AdapterCapacity(RuntimeError):
    """No room for another adapter: every loaded one is in use."""


@dataclass
class ServedAdapter:
    name: str
    path: Path
    weights: AdapterWeights
    choice: AdapterChoice
    in_use: int = 0
    last_used: float = field(default_factory=time.monotonic)

    @property
    def nbytes(self) -> int:
        return self.weights.nbytes


class AdapterSet:
    def __init__(self, model: nn.Module, max_loaded: int | None = None):
        self.model = model
        self.max_loaded = max_loaded
        self.table = model_adapters(model)
        self._loaded: dict[str, ServedAdapter] = {}
        self._lock = threading.Lock()
        self.evictions = 0

    @property
    def rows(self):
        """What the batch source sets per model call (``lora.AdapterRows``)."""
        return self.table.rows

    def get(self, name: str) -> ServedAdapter | None:
        return self._loaded.get(name)

    def loaded(self) -> list[ServedAdapter]:
        return list(self._loaded.values())

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._loaded.values())

    def load(self, name: str, path: str | Path) -> ServedAdapter:
        """Read, check and install the adapter at ``path`` as ``name`` (blocking: run it
        off the event loop). The same name and path again is the adapter already loaded."""
        folder = Path(path).expanduser().resolve()
        current = self._loaded.get(name)
        if current is not None and current.path == folder:
            return current
        if current is not None:
            raise AdapterError(f"adapter {name!r} is already loaded from {current.path}")
        weights = read_adapter(folder, self.model, name)
        with self._lock:
            self._make_room()
            slot = self.table.install(weights)
            served = ServedAdapter(name, folder, weights, AdapterChoice(name, slot, weights.digest))
            self._loaded[name] = served
        return served

    def _make_room(self) -> None:
        if self.max_loaded is None:
            return
        while len(self._loaded) >= self.max_loaded:
            idle = [a for a in self._loaded.values() if a.in_use == 0]
            if not idle:
                raise AdapterCapacity(
                    f"{len(self._loaded)} adapters are loaded (--max-loaded-adapters "
                    f"{self.max_loaded}) and all are in use"
                )
            victim = min(idle, key=lambda a: a.last_used)
            self._drop(victim)
            self.evictions += 1

    def _drop(self, adapter: ServedAdapter) -> None:
        del self._loaded[adapter.name]
        self.table.uninstall(adapter.choice.slot)

    def unload(self, name: str) -> bool:
        """False when ``name`` is not loaded; AdapterBusy while requests use it."""
        with self._lock:
            adapter = self._loaded.get(name)
            if adapter is None:
                return False
            if adapter.in_use:
                raise AdapterBusy(f"adapter {name!r} has {adapter.in_use} request(s) in flight")
            self._drop(adapter)
            return True

    def use(self, name: str) -> ServedAdapter | None:
        """One request's hold on a loaded adapter (``release`` when it ends); None when
        it is not loaded."""
        with self._lock:
            adapter = self._loaded.get(name)
            if adapter is None:
                return None
            adapter.in_use += 1
            adapter.last_used = time.monotonic()
            return adapter

    def release(self, adapter: ServedAdapter) -> None:
        with self._lock:
            adapter.in_use -= 1
            adapter.last_used = time.monotonic()
