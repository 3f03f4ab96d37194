"""The rank group a sharded server runs on, what /health reports about it, and its failure.

``mlx.distributed`` does the transport (ring over TCP, JACCL over Thunderbolt RDMA, MPI); this
module only joins the group the launcher described in the environment and keeps the one fact
every rank-0 surface needs: whether the group can still serve, and if not, why.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import mlx.core as mx

Mode = Literal["tensor", "pipeline"]
MODES: tuple[Mode, ...] = ("tensor", "pipeline")
BACKENDS = ("any", "ring", "jaccl", "mpi")


class GroupFailed(RuntimeError):
    """A collective failed or timed out, or a rank exited: the group cannot serve."""


def join_group(backend: str = "any") -> Any:
    """This process's group as the launcher described it (``MLX_RANK``, ``MLX_HOSTFILE``…);
    ``strict`` so a misconfigured launch fails here instead of serving as a group of one."""
    return mx.distributed.init(strict=True, backend=backend)


@dataclass
class GroupHealth:
    """What /health says about the group; ``fail`` is idempotent and keeps the first reason
    (the root cause, not the errors that follow from it)."""

    world_size: int
    backend: str
    mode: Mode
    rank_roles: list[str]
    failure: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def fail(self, reason: str) -> str:
        with self._lock:
            if self.failure is None:
                self.failure = reason
            return self.failure

    def describe(self) -> dict[str, Any]:
        return {
            "world_size": self.world_size,
            "backend": self.backend,
            "mode": self.mode,
            "rank_roles": self.rank_roles,
            "status": "failed" if self.failure else "ok",
            "failure": self.failure,
        }


def pipeline_split(num_layers: int, world_size: int) -> list[tuple[int, int]]:
    """Each rank's layers ``[start, end)`` in mlx-lm's order: an even split with the extra
    layers on the low ranks, rank 0 holding the last layers and the last rank the first."""
    base, extra = divmod(num_layers, world_size)
    sizes = [base + (1 if r < extra else 0) for r in range(world_size)]
    return [(sum(sizes[r + 1 :]), sum(sizes[r:])) for r in range(world_size)]


def rank_roles(world_size: int, mode: Mode, num_layers: int) -> list[str]:
    """One line per rank: rank 0 serves HTTP and decides every token, the others follow."""
    roles = []
    for rank in range(world_size):
        role = "leader: HTTP, templates, constraints, sampling" if rank == 0 else "follower"
        if mode == "tensor":
            part = f"1/{world_size} of every layer"
        else:
            start, end = pipeline_split(num_layers, world_size)[rank]
            part = f"layers {start}-{end - 1}"
        roles.append(f"{role}; {part}")
    return roles


@dataclass
class Sharding:
    """How this process takes part in a sharded server."""

    mode: Mode
    group: Any  # mx.distributed.Group
    backend: str = "any"
    timeout: float = 120.0  # seconds a collective call may take before the group is failed
    # a reason when a rank this process started has exited (``ranks.LocalRanks.check``)
    check: Callable[[], str | None] = lambda: None

    @property
    def rank(self) -> int:
        return self.group.rank()

    @property
    def world_size(self) -> int:
        return self.group.size()


def backend_in_use(requested: str) -> str:
    """The backend's name for /health: the requested one, or with ``any`` what the
    launcher's environment set up (mlx.launch writes these variables)."""
    if requested != "any":
        return requested
    if "MLX_JACCL_COORDINATOR" in os.environ or "MLX_IBV_DEVICES" in os.environ:
        return "jaccl"
    if "MLX_HOSTFILE" in os.environ:
        return "ring"
    if any(key.startswith(("OMPI_", "PMI_")) for key in os.environ):
        return "mpi"
    return "any"
