"""Shared by the kernel tests: run each on every instruction set this CPU has, and compare
with MLX's float ops on the exact activations unless a test says otherwise."""

from __future__ import annotations

import pytest

from vllm_mlx import native

ISAS = [isa for isa in ("avx2", "generic") if native.available() and native.set_isa(isa)]


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
