"""`serve --distributed`: joining the rank group, the followers' loop and rank 0's runtime.

An entry-point module like `server/serve_command.py` (its imports wait until sharded serving
is asked for, so `--help` and single-process serving never load mlx.distributed's helpers).
"""

from __future__ import annotations

import os
import sys

import click


def join_ranks(options):
    """Start the local ranks (``--ranks``, rank 0 only) and join the group
    (``options``: the ``DistributedOptions``)."""
    from ..distributed.group import GroupFailed, Sharding, backend_in_use, join_group
    from ..distributed.ranks import LocalRanks

    local = None
    backend = options.distributed_backend
    if options.ranks and "MLX_RANK" not in os.environ:
        local = LocalRanks(options.ranks, sys.argv[1:])
        backend = "ring"
    try:
        group = join_group(backend)
    except (RuntimeError, ValueError, GroupFailed) as exc:
        if local is not None:
            local.stop()
        raise click.ClickException(
            f"--distributed: no rank group ({exc}); start under mlx.launch, or use "
            "--ranks N / --hosts"
        ) from None
    sharding = Sharding(
        mode=options.distributed,
        group=group,
        backend=backend_in_use(backend),
        timeout=options.collective_timeout,
        check=local.check if local is not None else lambda: None,
    )
    return sharding, local


def follow(model: str | None, sharding, options) -> None:
    """Ranks 1…N-1: load this rank's share and follow rank 0 until it says exit."""
    from ..distributed.group import GroupFailed
    from ..distributed.ranks import exit_with_parent
    from ..models.errors import ModelLoadError
    from ..runtime import build_follower

    exit_with_parent()
    try:
        follower = build_follower(model, sharding, options)
    except (ModelLoadError, ValueError) as exc:
        raise click.ClickException(f"rank {sharding.rank}: {exc}") from None
    click.echo(f"rank {sharding.rank}/{sharding.world_size} following rank 0", err=True)
    try:
        follower.run()
    except GroupFailed as exc:
        raise click.ClickException(str(exc)) from None


def sharded_runtime(model: str | None, sharding, local_ranks, options):
    """Rank 0's runtime over the group; on a load error the local ranks stop too."""
    from ..models.errors import ModelLoadError
    from ..runtime import build_runtime

    try:
        return build_runtime(model, options, sharding=sharding)
    except (ModelLoadError, ValueError) as exc:
        if local_ranks is not None:
            local_ranks.stop()
        raise click.ClickException(str(exc)) from None
