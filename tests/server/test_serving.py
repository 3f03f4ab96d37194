"""The seam between the handlers and the pool: a request's model id is looked up once,
whichever surface, streamed or not, loaded or waiting for its load, and the result rides
on the request's lease."""

from __future__ import annotations

import pytest
from fleet.models_dir import write_models_dir
from starlette.testclient import TestClient

from vllm_mlx.fleet.catalog import build_catalog
from vllm_mlx.fleet.pool import ModelPool
from vllm_mlx.options import RuntimeOptions
from vllm_mlx.runtime import build_runtime
from vllm_mlx.server.app import create_app
from vllm_mlx.server.state import ServerState

ASK = [{"role": "user", "content": "hi"}]
SURFACES = {
    "chat": ("/v1/chat/completions", {"messages": ASK, "max_tokens": 2}),
    "completions": ("/v1/completions", {"prompt": "hi", "max_tokens": 2}),
    "messages": ("/v1/messages", {"messages": ASK, "max_tokens": 2}),
    "count_tokens": ("/v1/messages/count_tokens", {"messages": ASK}),
    "responses": ("/v1/responses", {"input": "hi", "max_output_tokens": 2}),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = write_models_dir(tmp_path_factory.mktemp("seam"), '[models.small]\naliases = ["a"]\n')
    catalog = build_catalog([str(folder)])

    def build(entry):
        options = entry.options(RuntimeOptions.of(prefix_cache_mb=0))
        return build_runtime(entry.spec, options, progress=False)

    pool = ModelPool(catalog, build)
    with TestClient(
        create_app(ServerState(None, "", models=pool)), base_url="http://localhost"
    ) as c:
        yield c, pool


@pytest.fixture
def lookups(served, monkeypatch):
    """The ids the catalog was asked about during a test."""
    _, pool = served
    asked: list[str | None] = []
    lookup = pool.catalog.lookup

    def counted(model_id):
        asked.append(model_id)
        return lookup(model_id)

    monkeypatch.setattr(pool.catalog, "lookup", counted)
    return asked


async def _unload(pool: ModelPool, name: str) -> None:
    if name in {slot.entry.name for slot in pool.loaded()}:
        await pool.unload(name)


@pytest.mark.parametrize("loaded", [False, True], ids=["loading", "loaded"])
@pytest.mark.parametrize("stream", [False, True], ids=["direct", "streamed"])
@pytest.mark.parametrize("surface", SURFACES)
def test_the_model_id_is_resolved_once(served, lookups, surface, stream, loaded):
    client, pool = served
    if surface == "count_tokens" and stream:
        pytest.skip("count_tokens never streams")
    if not loaded:
        client.portal.call(_unload, pool, "small")  # type: ignore[union-attr]
    path, fields = SURFACES[surface]
    body = {"model": "a", **fields, **({"stream": True} if stream else {})}
    lookups.clear()
    with client.stream("POST", path, json=body) as response:
        text = response.read().decode()
    assert response.status_code == 200, text
    assert lookups == ["a"]  # the alias, looked up once
    if surface != "count_tokens":
        assert '"small"' in text  # the model the alias resolved to answered, by its name


def test_the_lease_carries_the_resolution(served):
    client, pool = served
    resolved = pool.resolve("a")

    async def leased():
        lease = await pool.acquire(resolved)
        lease.release()
        return lease

    lease = client.portal.call(leased)  # type: ignore[union-attr]
    assert lease.resolved is resolved and lease.name == "small"
    assert (resolved.requested, resolved.entry.name) == ("a", "small")
