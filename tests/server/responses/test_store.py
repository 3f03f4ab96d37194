"""The Responses store is bounded by bytes as well as entries, so stored responses cannot
fill memory."""

from __future__ import annotations

from vllm_mlx.server.responses.store import ResponseStore, StoredResponse


def test_the_store_forgets_the_oldest_past_its_byte_budget():
    store = ResponseStore(max_entries=100, max_bytes=10_000)
    for i in range(5):
        store.put(f"r{i}", StoredResponse({"id": f"r{i}", "text": "x" * 3000}, []))
    assert store.bytes <= 10_000
    assert store.get("r0") is None and store.get("r4") is not None
    assert len(store) == 3
    # one response bigger than the whole budget is not kept, and evicts nothing
    assert not store.put("huge", StoredResponse({"text": "x" * 20_000}, []))
    assert store.get("huge") is None and len(store) == 3
    # replacing an id does not count it twice
    store.put("r4", StoredResponse({"id": "r4"}, []))
    assert store.bytes == sum(store.get(k).size() for k in ("r2", "r3", "r4"))
