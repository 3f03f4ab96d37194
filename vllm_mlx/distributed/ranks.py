"""Starting the ranks: ``--ranks N`` on this machine (development, tests) and ``--hosts``
through ``mlx.launch``.

With ``--hosts`` this process runs ``mlx.launch`` and stops its ranks with it. With
``--ranks N`` this process becomes rank 0 and starts ranks 1…N-1 itself, over the ring
backend on loopback ports. Owning them is what lets rank 0 outlive one: it sees the exit,
fails the group and answers 503 (``mlx.launch`` instead stops every rank when one fails,
so behind it a dead rank takes the server down and a gateway's health check drops it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence

PARENT_ENV = "VLLM_MLX_RANK_PARENT"


def without_option(argv: Sequence[str], name: str) -> list[str]:
    """``argv`` with ``name VALUE`` / ``name=VALUE`` removed (the child must not repeat it)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == name:
            skip = True
        elif not arg.startswith(f"{name}="):
            out.append(arg)
    return out


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class LocalRanks:
    """Ranks 1…N-1 as child processes of rank 0 (this process), joined over loopback."""

    def __init__(self, count: int, argv: Sequence[str]):
        if count < 2:
            raise ValueError("--ranks needs at least 2 ranks")
        hosts = [[f"127.0.0.1:{port}"] for port in _free_ports(count)]
        handle, self.hostfile = tempfile.mkstemp(prefix="vllm-mlx-ranks-", suffix=".json")
        with os.fdopen(handle, "w") as f:
            json.dump(hosts, f)
        command = [sys.executable, "-m", "vllm_mlx", *without_option(argv, "--ranks")]
        self.processes: list[subprocess.Popen] = []
        for rank in range(1, count):
            env = {
                **os.environ,
                "MLX_RANK": str(rank),
                "MLX_HOSTFILE": self.hostfile,
                PARENT_ENV: str(os.getpid()),
            }
            self.processes.append(subprocess.Popen(command, env=env))
        os.environ.update(MLX_RANK="0", MLX_HOSTFILE=self.hostfile)

    def check(self) -> str | None:
        """Why the group cannot serve: a rank that exited (None while all run)."""
        for rank, process in enumerate(self.processes, start=1):
            code = process.poll()
            if code is not None:
                how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
                return f"rank {rank} {how}"
        return None

    def stop(self, grace: float = 10.0) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + grace
        for process in self.processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
        try:
            os.unlink(self.hostfile)
        except OSError:
            pass


def exit_with_parent() -> None:
    """A rank started by ``LocalRanks`` exits when rank 0 is gone (its collectives would
    fail too, but an idle follower waits in one forever)."""
    parent = os.environ.get(PARENT_ENV)
    if not parent:
        return

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != int(parent):
                os._exit(1)

    threading.Thread(target=watch, name="vllm-mlx-parent-watch", daemon=True).start()


def launch_command(hosts: str, backend: str, argv: Sequence[str]) -> list[str]:
    """``mlx.launch`` starting ``vllm-mlx ARGV`` (without ``--hosts``) on every host."""
    launcher = shutil.which("mlx.launch")
    run_main = "from mlx._distributed_utils.launch import main; main()"
    head = [launcher] if launcher else [sys.executable, "-c", run_main]
    backend = "ring" if backend == "any" else backend
    rest = without_option(argv, "--hosts")
    return [
        *head,
        "--hosts",
        hosts,
        "--backend",
        backend,
        "--",
        sys.executable,
        "-m",
        "vllm_mlx",
        *rest,
    ]


def run_launcher(command: Sequence[str]) -> int:
    """Run ``mlx.launch`` in its own process group and stop the whole group on SIGTERM or
    SIGINT: mlx.launch itself exits on a signal without stopping the ranks it started."""
    process = subprocess.Popen(list(command), start_new_session=True)

    def stop(signum: int, frame: object) -> None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return process.wait()
