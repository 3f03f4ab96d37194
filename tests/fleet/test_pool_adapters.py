"""Adapters in the pool, on a real tiny base: concurrent requests for an adapter share one
load and lease its base; its bytes count in the memory budget; a refused adapter is an
AdapterRefused naming the mismatch; a folder's own chat template renders its prompts."""

from __future__ import annotations

import asyncio
import shutil

import pytest
from tiny_adapters import write_adapter, write_base

from vllm_mlx.fleet.adapters import AdapterEntry
from vllm_mlx.fleet.catalog import Catalog, Entry
from vllm_mlx.fleet.pool import AdapterRefused, ModelPool, PoolLimits
from vllm_mlx.request import ChatRequest
from vllm_mlx.runtime import build_runtime

TEMPLATE = "ADAPTER-TEMPLATE {{ messages[-1].content }}"


@pytest.fixture()
def pool(fleet, tmp_path):
    templated = tmp_path / "templated"
    shutil.copytree(fleet.lora, templated)
    (templated / "chat_template.jinja").write_text(TEMPLATE)
    catalog = Catalog({"base": Entry("base", str(fleet.base), "test")}, default="base")
    catalog.add_adapter(AdapterEntry("lora", fleet.lora, "base", "test"))
    catalog.add_adapter(AdapterEntry("templated", templated, None, "test"))
    loads: list[str] = []

    def build(entry):
        runtime = build_runtime(entry.spec, progress=False)
        original = runtime.adapters.load

        def counted(name, path):
            loads.append(name)
            return original(name, path)

        runtime.adapters.load = counted
        return runtime

    pool = ModelPool(catalog, build, PoolLimits(max_memory_bytes=1 << 30))
    pool.loads = loads
    return pool


def test_concurrent_requests_share_one_adapter_load_on_one_base(pool):
    async def scenario():
        resolved = pool.resolve("base:lora")
        assert not pool.is_ready(resolved)
        leases = await asyncio.gather(*(pool.acquire(resolved) for _ in range(3)))
        assert pool.loads == ["lora"] and pool.is_ready(resolved)
        assert {lease.name for lease in leases} == {"lora"}
        slot = leases[0].slot
        assert slot.entry.name == "base" and slot.leases == 3
        assert slot.adapters.get("lora").in_use == 3
        assert slot.total_bytes == slot.memory_bytes + slot.adapters.nbytes > slot.memory_bytes
        for lease in leases:
            lease.release()
        assert slot.leases == 0 and slot.adapters.get("lora").in_use == 0
        await pool.close()

    asyncio.run(scenario())


def test_an_adapter_folder_s_own_template_renders_its_prompts(pool):
    async def scenario():
        lease = await pool.acquire(pool.resolve("templated"))
        request = ChatRequest(messages=[{"role": "user", "content": "hi"}])
        prompt, _ = lease.pipeline.render(request)
        base_prompt, _ = lease.slot.pipeline.render(request)
        assert prompt.text.startswith("ADAPTER-TEMPLATE hi")
        assert not base_prompt.text.startswith("ADAPTER-TEMPLATE")
        lease.release()
        await pool.close()

    asyncio.run(scenario())


def test_a_mismatched_adapter_is_refused_and_the_base_keeps_serving(pool, tmp_path):
    other = write_base(tmp_path / "other", hidden=32)
    pool.catalog.add_adapter(
        AdapterEntry("other", write_adapter(other, tmp_path / "o", seed=5), "base", "test")
    )

    async def scenario():
        with pytest.raises(AdapterRefused, match="trained on another base model"):
            await pool.acquire(pool.resolve("other"))
        lease = await pool.acquire(pool.resolve("base"))
        assert lease.slot.leases == 1  # the failed request's hold on the base was released
        lease.release()
        await pool.close()

    asyncio.run(scenario())
