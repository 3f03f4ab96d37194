"""The `vllm-mlx` command line. Subcommands import their heavy modules lazily so that
`vllm-mlx --help` never loads MLX."""

from __future__ import annotations

import importlib

import click

# subcommand name -> "module:attribute" of a click command, imported on first use
_SUBCOMMANDS = {
    "serve": "vllm_mlx.server.cli:serve",
    "parse": "vllm_mlx.chat.parse_cli:parse",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = _SUBCOMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=_LazyGroup)
@click.version_option(package_name="vllm-mlx")
def main() -> None:
    """A local OpenAI- and Anthropic-compatible LLM server on MLX."""
