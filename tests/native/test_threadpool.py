"""The kernels' pool: where its workers run (each on a CPU of its own, off the caller's,
or the kernel's choice) changes when work runs, never what it computes."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import mlx.core as mx
import pytest

from vllm_mlx import native

pytestmark = pytest.mark.skipif(
    not native.available() or native.status()["threads"] < 2, reason="needs a pool worker"
)


def workers() -> list[int]:
    """Thread ids of the pool's workers in this process."""
    found = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as comm:
            if comm.read().strip() == "vmlx-pool":
                found.append(int(tid))
    return found


def product() -> mx.array:
    """A product of many pool tasks (its weight rows split over the pool)."""
    w, scales, biases = mx.quantize(
        mx.random.normal((4096, 512), key=mx.random.key(1)), group_size=64, bits=4
    )
    x = mx.random.normal((3, 512), key=mx.random.key(2))
    out = native.quantized_matmul(x, w, scales, biases, 64, 4)
    mx.eval(out)
    return out


@pytest.fixture
def placement() -> Iterator[None]:
    before = native.placement()
    assert before is not None
    yield
    native.set_placement(before[0])


def test_placement_names(placement) -> None:
    for name in ("kernel", "apart", "auto"):
        assert native.set_placement(name)
        assert native.placement() == (name, name != "kernel")
    assert not native.set_placement("anywhere")


def placed(check: Callable[[set[int]], bool]) -> bool:
    """Whether every worker's CPUs pass ``check`` once it has joined a job: a worker
    places itself when it joins one, and on a busy machine the caller may run a few
    products alone before it does."""
    for _ in range(200):
        product()
        if workers() and all(check(os.sched_getaffinity(t)) for t in workers()):
            return True
    return False


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to keep apart")
def test_apart_puts_each_worker_on_one_cpu_and_kernel_frees_it(placement) -> None:
    allowed = os.sched_getaffinity(0)
    native.set_placement("apart")
    assert placed(lambda cpus: len(cpus) == 1)
    native.set_placement("kernel")
    assert placed(lambda cpus: cpus == allowed)


def test_placement_does_not_change_the_numbers(placement) -> None:
    outputs = []
    for name in ("kernel", "apart", "auto", "kernel"):
        native.set_placement(name)
        outputs.append(product())
    assert all(mx.array_equal(out, outputs[0]).item() for out in outputs)
