"""The `vllm-mlx` command line. Subcommands import their heavy modules lazily so that
`vllm-mlx --help` never loads MLX."""

from __future__ import annotations

import importlib

import click

# subcommand name -> ("module:attribute" of a click command, imported on first use, help line)
_SUBCOMMANDS = {
    "serve": ("vllm_mlx.server.cli:serve", "Serve a model over the OpenAI and Anthropic APIs."),
    "parse": ("vllm_mlx.chat.parse_cli:parse", "Run the real parsers on a recorded output."),
    "bench": ("vllm_mlx.bench:bench", "Measure a server's throughput and latency under load."),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in _SUBCOMMANDS:
            return None
        module, attr = _SUBCOMMANDS[name][0].split(":")
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List subcommands from their help lines, without importing them."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, line) for name, (_, line) in sorted(_SUBCOMMANDS.items())])


@click.group(cls=_LazyGroup)
@click.version_option(package_name="vllm-mlx")
def main() -> None:
    """A local OpenAI- and Anthropic-compatible LLM server on MLX."""
