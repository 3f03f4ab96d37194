"""Shared by the kernel tests: run each on every instruction set this CPU has; compare
with MLX's float ops on the exact activations unless a test is marked
``default_activations``, and on float32 KV caches (MLX's own) unless it takes ``kv``.
Tests run the default attention body (amx where the CPU grants it) unless they take
``float_attention``: those hold the float body to float rounding."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from vllm_mlx import native
from vllm_mlx.native.layers import KV_ENV

ISAS = [isa for isa in ("avx2", "generic") if native.available() and native.set_isa(isa)]
if ISAS:  # probing selected each in turn: tests without the fixture run on the best
    native.set_isa(ISAS[0])
DEFAULT_BODY = native.attention_body()  # chosen once per process, before any test


@pytest.fixture(params=ISAS)
def isa(request: pytest.FixtureRequest):
    assert native.set_isa(request.param)
    yield request.param
    native.set_isa(ISAS[0])  # back to the best one


@pytest.fixture
def float_attention() -> Iterator[None]:
    """The float attention body, for tests of its float32 arithmetic against MLX or a float64
    reference to float rounding (the bf16 bodies have their own bound,
    ``test_bf16_attention.py``); the process's default body again afterwards."""
    if not native.available():
        yield
        return
    assert native.set_attention_body("float")
    yield
    assert DEFAULT_BODY is not None and native.set_attention_body(DEFAULT_BODY)


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
