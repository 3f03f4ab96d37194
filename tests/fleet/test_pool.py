"""The pool on real tiny models (real runtimes, built in threads): one load for concurrent
requests, LRU and memory eviction that never takes a model in use, idle unloading, and
what it refuses."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from types import SimpleNamespace

import mlx.core as mx
import mlx.nn as nn
import pytest
from models_dir import write_models_dir
from tiny_models import build_tiny_model, build_tiny_tokenizer
from tiny_mtp import write_mtp_folder

from vllm_mlx import native
from vllm_mlx.fleet.catalog import build_catalog
from vllm_mlx.fleet.pool import (
    ModelBusy,
    ModelPool,
    ModelTooLarge,
    PoolEvents,
    PoolFull,
    PoolLimits,
    UnknownModel,
    weights_in_memory,
)
from vllm_mlx.models.fit import estimate
from vllm_mlx.native import patch
from vllm_mlx.options import RuntimeOptions
from vllm_mlx.runtime import build_runtime


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    return build_catalog([str(write_models_dir(tmp_path_factory.mktemp("pool")))])


class Recorder:
    """Builds real runtimes, counting the builds; hears the pool's events."""

    def __init__(self):
        self.built: list[str] = []
        self.evicted: list[tuple[str, str]] = []
        self.events = PoolEvents(evicted=lambda name, why: self.evicted.append((name, why)))

    def build(self, entry):
        self.built.append(entry.name)
        return build_runtime(
            entry.spec,
            entry.options(RuntimeOptions()),
            chat_template=entry.chat_template,
            progress=False,
        )


def pool_of(catalog, recorder, **limits) -> ModelPool:
    return ModelPool(catalog, recorder.build, PoolLimits(**limits), events=recorder.events)


def test_concurrent_requests_share_one_load_and_get_the_model(catalog):
    recorder = Recorder()
    pool = pool_of(catalog, recorder)

    async def scenario():
        leases = await asyncio.gather(*(pool.acquire(pool.resolve("small")) for _ in range(3)))
        assert {lease.name for lease in leases} == {"small"}
        assert len({id(lease.pipeline) for lease in leases}) == 1
        assert pool.loaded()[0].leases == 3
        for lease in leases:
            lease.release()
            lease.release()  # idempotent
        assert pool.loaded()[0].leases == 0
        await pool.close()

    asyncio.run(scenario())
    assert recorder.built == ["small"]


def test_least_recently_used_idle_model_goes_first_never_one_in_use(catalog):
    recorder = Recorder()
    pool = pool_of(catalog, recorder, max_loaded=1)

    async def scenario():
        coder = await pool.acquire(pool.resolve("coder"))
        with pytest.raises(PoolFull, match="in use"):
            await pool.acquire(pool.resolve("small"))
        assert [s.entry.name for s in pool.loaded()] == ["coder"]
        coder.release()
        small = await pool.acquire(pool.resolve("small"))
        assert [s.entry.name for s in pool.loaded()] == ["small"]
        small.release()
        await pool.close()

    asyncio.run(scenario())
    assert recorder.evicted == [("coder", "lru")]


def test_memory_limit_evicts_or_refuses(catalog):
    recorder = Recorder()
    probe = pool_of(catalog, recorder)

    async def measure() -> list[int]:
        for name in ("coder", "small"):
            await probe.load(name)
        sizes = [slot.memory_bytes for slot in probe.loaded()]
        await probe.close()
        return sizes

    in_memory = asyncio.run(measure())
    on_disk = [catalog.entries[name].weight_bytes() for name in ("coder", "small")]
    limit = int(max(*in_memory, *on_disk) * 1.1)
    assert in_memory[0] + on_disk[1] > limit  # room for either, not both
    pool = pool_of(catalog, recorder, max_memory_bytes=limit)

    async def scenario():
        (await pool.acquire(pool.resolve("coder"))).release()
        (await pool.acquire(pool.resolve("small"))).release()
        assert [s.entry.name for s in pool.loaded()] == ["small"]
        await pool.close()

    asyncio.run(scenario())
    assert recorder.evicted == [("coder", "memory")]
    tiny = pool_of(catalog, recorder, max_memory_bytes=min(on_disk) // 4)
    with pytest.raises(ModelTooLarge, match="over --max-memory-gb"):
        asyncio.run(tiny.load("coder"))


@pytest.mark.parametrize("copies", [True, False], ids=["head copies", "head's own"])
def test_a_loads_measured_memory_counts_its_mtp_head_once(tmp_path, copies):
    """What the pool counts for a loaded model with an MTP head is what the fit estimate
    says the load holds: the head's own parameters beside the model's, the embedding and
    output head it shares with the model (the checkpoint's copies) once."""
    folder = str(write_mtp_folder(tmp_path / "m", "deepseek_v3", copies=copies))
    measured = {}
    for mtp in ("on", "off"):
        options = RuntimeOptions.of(cpu_weights="float32", mtp=mtp, prompt_lookup="off")
        runtime = build_runtime(folder, options, progress=False)
        measured[mtp] = weights_in_memory(runtime)
        runtime.close()
    for mtp, with_head in (("on", True), ("off", False)):
        fit = estimate(Path(folder), 1024, weights="float32", on_cpu=True, mtp=with_head)
        assert measured[mtp] == fit.weights
    assert measured["on"] > measured["off"]


@pytest.mark.skipif(
    not (native.available() and native.int16_body() == "vnni"), reason="no packed products here"
)
def test_a_loads_measured_memory_counts_its_packed_weight_copies():
    """The packed copies (VLLM_MLX_NATIVE_PACKED=auto, a small model) double the quantized
    weights' bytes beside MLX's arrays: the pool counts them."""
    held = {}
    before = native.packed_mode()
    for mode in ("0", "auto"):
        assert native.set_packed_mode(mode)
        model = build_tiny_model(build_tiny_tokenizer(), seed=0, arch="llama", num_layers=2)
        nn.quantize(model, group_size=32, bits=4)
        model.set_dtype(mx.float32)
        packed = patch.enable(model).packed_bytes
        runtime = SimpleNamespace(
            engine=SimpleNamespace(source=None), loaded=SimpleNamespace(model=model)
        )
        held[mode] = (weights_in_memory(runtime), packed)
    native.set_packed_mode(before)
    assert held["0"][1] == 0 < held["auto"][1]
    assert held["auto"][0] == held["0"][0] + held["auto"][1]


def test_idle_models_unload_after_the_ttl_busy_ones_stay(catalog):
    recorder = Recorder()
    pool = pool_of(catalog, recorder, ttl=0.2)

    async def scenario():
        watcher = asyncio.ensure_future(pool.watch_idle())
        (await pool.acquire(pool.resolve("small"))).release()
        busy = await pool.acquire(pool.resolve("coder"))
        for _ in range(100):
            await asyncio.sleep(0.05)
            if len(pool.loaded()) == 1:
                break
        assert [s.entry.name for s in pool.loaded()] == ["coder"]
        with pytest.raises(ModelBusy, match="1 request"):
            await pool.unload("coder")
        busy.release()
        watcher.cancel()
        assert await pool.unload("coder") is True
        assert await pool.unload("coder") is False
        await pool.close()

    asyncio.run(scenario())
    assert recorder.evicted == [("small", "ttl"), ("coder", "operator")]


def test_unknown_ids_get_the_default_unless_strict(catalog):
    pool = ModelPool(catalog, None)
    assert pool.resolve("claude-sonnet-4-5").name == catalog.default
    assert pool.resolve(None).name == catalog.default
    strict = ModelPool(catalog, None, strict=True)
    with pytest.raises(UnknownModel, match="'gpt-4o' is not served here; models: coder, small"):
        strict.resolve("gpt-4o")
    assert strict.resolve("small").name == "small"


def test_a_requests_keep_alive_overrides_the_ttl_zero_unloads_once_idle(catalog):
    recorder = Recorder()
    pool = pool_of(catalog, recorder, ttl=0.2)

    async def scenario():
        watcher = asyncio.ensure_future(pool.watch_idle())
        kept = await pool.acquire(pool.resolve("small"))
        kept.keep_alive(math.inf)  # Ollama's negative keep_alive: never
        kept.release()
        gone = await pool.acquire(pool.resolve("coder"))
        gone.keep_alive(0.0)
        await asyncio.sleep(0.3)
        assert sorted(s.entry.name for s in pool.loaded()) == ["coder", "small"]  # in use
        gone.release()
        for _ in range(100):
            await asyncio.sleep(0.05)
            if len(pool.loaded()) == 1:
                break
        await asyncio.sleep(0.3)  # past the pool's ttl: the kept model stays
        assert [s.entry.name for s in pool.loaded()] == ["small"]
        assert pool.expires_at(pool.loaded()[0]) is None
        watcher.cancel()
        await pool.close()

    asyncio.run(scenario())
    assert recorder.evicted == [("coder", "ttl")]
