"""Shared by the kernel tests: run each on every instruction set this CPU has; compare
with MLX's float ops on the exact activations unless a test is marked
``default_activations``, and on float32 KV caches (MLX's own) unless it takes ``kv``."""

from __future__ import annotations

import pytest

from vllm_mlx import native
from vllm_mlx.native.layers import KV_ENV

ISAS = [isa for isa in ("avx2", "generic") if native.available() and native.set_isa(isa)]
if ISAS:  # probing selected each in turn: tests without the fixture run on the best
    native.set_isa(ISAS[0])


@pytest.fixture(params=ISAS)
def isa(request: pytest.FixtureRequest):
    assert native.set_isa(request.param)
    yield request.param
    native.set_isa(ISAS[0])  # back to the best one


@pytest.fixture(autouse=True)
def exact_activations(request: pytest.FixtureRequest):
    """The exact float body for tests that compare with MLX to float rounding; tests of
    the default (int16 decode products, a documented bound) are marked
    ``default_activations``."""
    if not native.available() or request.node.get_closest_marker("default_activations"):
        yield
        return
    assert native.set_activations("float")
    yield
    native.set_activations("int16")


@pytest.fixture(autouse=True)
def _float32_kv_unless_asked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    if "kv" not in request.fixturenames:
        monkeypatch.setenv(KV_ENV, "f32")


@pytest.fixture(params=["f32", "f16"])
def kv(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """The native path's KV cache dtype for this test (``VLLM_MLX_NATIVE_KV``); True: float16
    (then MLX's reference runs on caches given float16 keys and values too)."""
    monkeypatch.setenv(KV_ENV, request.param)
    return request.param == "f16"
