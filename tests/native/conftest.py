"""Shared by the kernel tests: run each on every instruction set this CPU has."""

from __future__ import annotations

import pytest

from vllm_mlx import native

ISAS = [isa for isa in ("avx2", "generic") if native.available() and native.set_isa(isa)]


@pytest.fixture(params=ISAS)
def isa(request: pytest.FixtureRequest):
    assert native.set_isa(request.param)
    yield request.param
    native.set_isa(ISAS[0])  # back to the best one
