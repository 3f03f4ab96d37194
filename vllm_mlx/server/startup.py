"""What `vllm-mlx serve` does once its flags are read (serve_command.py): the options,
the runtime or model pool, the app and uvicorn. Imported by the command after it raises the
open-file limit, since these imports load mlx_lm (which lowers it)."""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from pathlib import Path
from typing import Any

import click
import uvicorn

from ..distributed.ranks import launch_command, run_launcher
from ..embeddings.kinds import model_facts
from ..engine.cpu import reexec_with_openblas
from ..fleet.adapters import AdapterEntry, checked_folder, parse_flag
from ..fleet.catalog import Catalog, CatalogError, Entry, build_catalog
from ..fleet.pool import ModelPool, PoolLimits
from ..mcp.config import ConfigError, load_config
from ..mcp.manager import MCPManager
from ..mcp.security import SecurityError
from ..models.errors import ModelLoadError
from ..models.loader import served_name
from ..models.resolve import resolve_model
from ..options import ServeOptions
from ..runtime import build_replay_runtime, build_runtime, estimate_for
from .app import create_app
from .cli_ranks import follow, join_ranks, sharded_runtime
from .ops.connections import ConnectionLimits, guarded_protocol
from .ops.guard import HostPolicy
from .ops.middleware import install_request_id_logging
from .state import ServerState


def run(model: str | None, flags: dict[str, Any], fd_limit: int) -> None:
    """Serve ``model`` with the command's ``flags``; ``fd_limit``: the open-file limit the
    command raised, which caps the connections."""
    options = ServeOptions.of(**flags)
    if options.serving.estimate:
        _print_estimate(model, options.runtime)
        return
    serving, fleet, sharded = options.serving, options.fleet, options.distributed
    if (sharded.ranks or sharded.hosts) and not sharded.distributed:
        raise click.ClickException("--ranks and --hosts need --distributed tensor|pipeline")
    if sharded.distributed and serving.replay is not None:
        raise click.ClickException("--replay runs no model: it cannot be --distributed")
    if sharded.hosts:
        command = launch_command(sharded.hosts, sharded.distributed_backend, sys.argv[1:])
        sys.exit(run_launcher(command))
    if options.runtime.model.cpu_weights != "quantized" and serving.replay is None:
        reexec_with_openblas(sys.argv[1:])
    logging.basicConfig(
        level=serving.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s",
    )
    install_request_id_logging()
    sharding, local_ranks = join_ranks(sharded) if sharded.distributed else (None, None)
    if sharding is not None and sharding.rank != 0:
        follow(model, sharding, options.runtime)
        return

    # validated before any model loads: nothing starts if it is unsafe
    mcp = (
        _mcp_manager(serving.mcp_config, serving.mcp_allow_any_command)
        if serving.mcp_config
        else None
    )
    if serving.replay is not None and fleet.several:
        raise click.ClickException("--replay serves one model; leave out --models-dir")
    if sharding is not None and fleet.several:
        raise click.ClickException("--distributed serves one model: leave out --models-dir")
    if (fleet.adapter or fleet.adapter_fuse) and (sharding is not None or serving.replay):
        raise click.ClickException(
            "--adapter runs on a local model: not with --distributed or --replay"
        )
    runtime = None
    if serving.replay is not None:
        runtime = _replay_runtime(model, serving.replay, options)
    elif sharding is not None:
        runtime = sharded_runtime(model, sharding, local_ranks, options.runtime)
    if runtime is not None:  # one model, served under every id
        name = serving.served_model_name or runtime.loaded.name
        pool = _single_pool(runtime, name, fleet.strict_model_ids)
    else:
        pool = _model_pool(model, options)
    state = ServerState(
        runtime.pipeline if runtime is not None else None,
        pool.catalog.default or "",
        models=pool,
        distributed=runtime.distributed if runtime is not None else None,
        max_body_bytes=serving.max_body_mb * 1024 * 1024,
        api_key=serving.api_key or None,
        allowed_origins=list(serving.allowed_origins),
        timeout=serving.timeout,
        sse_keepalive=serving.sse_keepalive or None,
        responses_store_bytes=serving.responses_store_mb * 1024 * 1024,
        mcp=mcp,
        hosts=HostPolicy.for_binding(serving.host, list(serving.allowed_hosts)),
    )
    # each connection holds a descriptor: the cap and the accept pace stay below the limit
    connections = ConnectionLimits.within(fd_limit, serving.read_timeout, serving.max_connections)
    served = ", ".join(sorted(state.models.catalog.entries))
    click.echo(f"serving {served} on http://{serving.host}:{serving.port}/v1", err=True)
    # the request-context middleware writes the access log (with request ids)
    try:
        uvicorn.run(
            create_app(state),
            host=serving.host,
            port=serving.port,
            http=guarded_protocol(connections),
            backlog=connections.backlog,
            log_level=serving.log_level,
            access_log=False,
        )
    finally:
        if sharding is not None and runtime is not None:
            runtime.close()  # tells the other ranks to exit
        if local_ranks is not None:
            local_ranks.stop()


def _print_estimate(model: str | None, options) -> None:
    """`serve MODEL --estimate`: the fit check's numbers, without loading any weight."""
    try:
        found = estimate_for(model, options, download=False)
    except ModelLoadError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{model or 'default'}\n{found.describe()}")


def _download_at_start(catalog) -> None:
    """Fetch the hub models models.toml marks ``download = "start"`` before serving."""
    for entry in catalog.entries.values():
        if entry.settings.download == "start" and entry.by_name:
            try:
                resolve_model(entry.spec)
            except ModelLoadError as exc:
                raise click.ClickException(f"{entry.config}: model {entry.name!r}: {exc}") from None


def _replay_runtime(model: str | None, text: str, options):
    try:
        return build_replay_runtime(
            text, model, options.runtime, chat_template=options.serving.chat_template
        )
    except (ModelLoadError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None


def _single_pool(runtime, name: str, strict: bool):
    """The pool of one model built before the server started (replay, sharded)."""
    pool = ModelPool.single(runtime.pipeline, name)
    pool.strict = strict
    return pool


def _mcp_manager(path: str, allow_any_command: bool):
    """Validate the MCP config (nothing starts if it is unsafe) and build the manager."""
    try:
        return MCPManager(load_config(path, allow_any_command=allow_any_command))
    except (ConfigError, SecurityError) as exc:
        raise click.ClickException(f"--mcp-config {path}: {exc}") from None


def _model_pool(model: str | None, options):
    """The catalog (checked: a bad models.toml stops here), MODEL loaded as the default
    when given or when nothing else is served, and the pool that loads the others."""

    fleet, several = options.fleet, options.fleet.several
    try:
        catalog = (
            build_catalog(list(fleet.models_dir), fleet.model_config) if several else Catalog({})
        )
    except CatalogError as exc:  # SettingsError included
        raise click.ClickException(str(exc)) from None
    _download_at_start(catalog)

    def build(entry: Entry, first: bool = False):
        """``entry``'s runtime; only the model loaded at start-up is warmed up."""
        runtime_options = entry.options(options.runtime)
        cache_dir = runtime_options.cache.prefix_cache_dir
        if several and cache_dir:  # one model's KV is no other's
            runtime_options = runtime_options.updated(
                prefix_cache_dir=str(Path(cache_dir) / entry.name)
            )
        if not first:
            runtime_options = runtime_options.updated(warmup_prompt=None)
        return build_runtime(
            entry.spec,
            runtime_options,
            chat_template=entry.chat_template,
            fuse=entry.fuse,
            max_loaded_adapters=fleet.max_loaded_adapters,
        )

    limits = PoolLimits(
        max_loaded=fleet.max_loaded_models,
        ttl=fleet.model_ttl,
        max_memory_bytes=int(fleet.max_memory_gb * 2**30) if fleet.max_memory_gb else None,
    )
    pool = ModelPool(catalog, build, limits, strict=fleet.strict_model_ids)
    if model is None and catalog.entries:
        _add_adapters(catalog, fleet)
        return pool  # the default loads on its first request
    spec = model or "default"
    main = next((e for e in catalog.entries.values() if _same_path(e.spec, spec)), None)
    template = options.serving.chat_template
    if main is None:
        name = options.serving.served_model_name or served_name(model, Path(spec))
        main = Entry(name, spec, "MODEL", chat_template=template)
        try:
            catalog.add(main)
        except CatalogError as exc:
            raise click.ClickException(f"MODEL {spec}: {exc}") from None
    elif template is not None:
        main = catalog.entries[main.name] = dataclasses.replace(main, chat_template=template)
    catalog.default = main.name
    _add_adapters(catalog, fleet)
    if model_facts(Path(main.spec)) is not None:
        return pool  # an embedding model or reranker: loaded by its first request
    started = time.perf_counter()
    try:
        runtime = build(main, first=True)
    except (ModelLoadError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    pool.adopt(main.name, runtime, time.perf_counter() - started)
    return pool


def _add_adapters(catalog, fleet) -> None:
    """``--adapter NAME=PATH`` on the default model, then ``--adapter-fuse NAME``: that
    adapter (from either source) as a model of its own."""

    try:
        for value in fleet.adapter:
            name, path = parse_flag(value)
            folder = checked_folder(path, f"--adapter {value}")
            catalog.add_adapter(AdapterEntry(name, folder, None, "--adapter"))
        for name in fleet.adapter_fuse:
            adapter = catalog.adapters.pop(name, None)
            if adapter is None:
                raise CatalogError(f"--adapter-fuse {name}: no adapter of that name")
            base = catalog.with_adapter(adapter)
            if base is None:
                raise CatalogError(f"--adapter-fuse {name}: its base is not served")
            settings = base.settings.model_copy(update={"aliases": ()})
            fused = dataclasses.replace(
                base, settings=settings, adapter=None, fuse=str(adapter.path)
            )
            catalog.add(dataclasses.replace(fused, found_in=f"--adapter-fuse ({adapter.found_in})"))
    except (CatalogError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None


def _same_path(a: str, b: str) -> bool:
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
