"""`vllm-mlx serve`: its flags (serve_flags.py), then startup.py's run. That module's imports
load MLX, so they wait inside the command: `--help` loads none, and the open-file limit is
raised before mlx_lm lowers it."""

from __future__ import annotations

import click

from .ops.connections import raise_open_file_limit
from .serve_flags import serve_flags


@click.command()
@click.argument("model", required=False)
@serve_flags
def serve(model: str | None, **flags) -> None:
    """Serve MODEL (a model folder, a .gguf file, a short name, a hub id
    ORG/NAME[@REVISION][:QUANT] or a model Ollama pulled; default: the embedded
    SmolLM2-135M-Instruct) over the OpenAI and Anthropic APIs."""
    fd_limit = raise_open_file_limit()  # before anything imports mlx_lm (it lowers the limit)
    from .startup import run

    run(model, flags, fd_limit)
