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
    "template": (
        "vllm_mlx.cli:template",
        "Show what the server does with a model's chat template.",
    ),
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


@click.command()
@click.argument("model_or_template")
@click.option(
    "--tokenizer",
    "tokenizer_spec",
    default=None,
    help="With a .jinja file: the model whose tokenizer carries it (default: the embedded model).",
)
@click.option("--tool-call-parser", default=None, help="Use this parser instead of detecting one.")
@click.option("--reasoning-parser", default=None, help="Use this parser instead of detecting one.")
def template(
    model_or_template: str,
    tokenizer_spec: str | None,
    tool_call_parser: str | None,
    reasoning_parser: str | None,
) -> None:
    """Inspect MODEL_OR_TEMPLATE (a model folder, a GGUF file or a .jinja template): the
    parsers picked and why, the thinking switch, how tools are shown, the rendered prompt of
    a tool call and its result, the prompt tail with thinking on and off, and a round-trip
    parse of the rendered call (exit status 1 when it fails)."""
    from pathlib import Path

    from vllm_mlx.chat.inspect import Choice, TemplateOverride, report
    from vllm_mlx.models.loader import load_tokenizer_only
    from vllm_mlx.reasoning import ReasoningParserManager
    from vllm_mlx.runtime import choose_parsers
    from vllm_mlx.tool_parsers import ToolParserManager

    path = Path(model_or_template)
    is_template = path.suffix == ".jinja"
    loaded = load_tokenizer_only(tokenizer_spec if is_template else model_or_template)
    tokenizer = loaded.tokenizer
    if is_template:
        tokenizer = TemplateOverride(tokenizer, path.read_text())
    try:
        picked = choose_parsers(loaded.name, tokenizer, reasoning_parser, tool_call_parser)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    choice = Choice(
        picked.reasoning,
        picked.tool,
        picked.reasoning_why,
        picked.tool_why,
        ReasoningParserManager.formats[picked.reasoning] if picked.reasoning else None,
        ToolParserManager.formats[picked.tool],
    )
    text, ok = report(tokenizer, choice)
    click.echo(text)
    if not ok:
        raise SystemExit(1)
