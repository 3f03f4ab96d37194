"""The `vllm-mlx` command line. Subcommands import their heavy modules lazily so that
`vllm-mlx --help` never loads MLX."""

from __future__ import annotations

import importlib
import os

import click

# subcommand name -> ("module:attribute" of a click command, imported on first use, help line)
_SUBCOMMANDS = {
    "serve": (
        "vllm_mlx.server.serve_command:serve",
        "Serve a model over the OpenAI and Anthropic APIs.",
    ),
    "parse": ("vllm_mlx.chat.parse_cli:parse", "Run the real parsers on a recorded output."),
    "bench": ("vllm_mlx.bench:bench", "Measure a server's throughput and latency under load."),
    "template": (
        "vllm_mlx.cli:template",
        "Show what the server does with a model's chat template.",
    ),
    "models": (
        "vllm_mlx.cli:models",
        "List the models servable by name (or a --models-dir folder's), with sizes.",
    ),
    "pull": ("vllm_mlx.cli:pull", "Download a model from the hub without serving it."),
    "rm": ("vllm_mlx.cli:rm", "Delete a downloaded hub model (and what was converted from it)."),
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
    # transformers warns at import that PyTorch is missing: irrelevant here, and alarming
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


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

    from vllm_mlx.chat.template_report import Choice, TemplateOverride, report
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


@click.command()
@click.argument(
    "models_dir", nargs=-1, required=False, type=click.Path(exists=True, file_okay=False)
)
@click.option(
    "--model-config",
    type=click.Path(exists=True, dir_okay=False),
    help="A models.toml besides the folders' own (as `serve --model-config`).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per model.")
def models(models_dir: tuple[str, ...], model_config: str | None, as_json: bool) -> None:
    """What `vllm-mlx serve --models-dir MODELS_DIR` would serve: each model's id, aliases,
    settings and files, and whether it loads (its files checked, no weights read). Exit
    status 1 when one does not load; a bad models.toml is an error, as at start-up.

    Without MODELS_DIR: every model `vllm-mlx serve NAME` takes from disk (the Hugging Face
    cache, LM Studio's folder, Ollama's store), with its size and where it lives."""
    import json

    if not models_dir and not model_config:
        from vllm_mlx.models.stores import servable

        found = servable()
        for item in found:
            row = {"id": item.name, "size_mb": round(item.size / 1e6, 1)}
            row |= {"source": item.source, "path": str(item.path)}
            line = f"{item.name}  {item.size / 1e9:.2f} GB  {item.source}  {item.path}"
            click.echo(json.dumps(row) if as_json else line)
        if not found and not as_json:
            click.echo("no downloaded models found (Hugging Face cache, LM Studio, Ollama)")
        return
    from vllm_mlx.fleet.catalog import CatalogError, build_catalog

    try:
        catalog = build_catalog(list(models_dir), model_config)
    except CatalogError as exc:
        raise click.ClickException(str(exc)) from None
    failed = False
    for name in sorted(catalog.entries):
        entry = catalog.entries[name]
        problem = entry.check()
        failed |= problem is not None
        settings = entry.settings.model_dump(
            exclude_unset=True, exclude={"path", "served_name", "aliases"}
        )
        row = {
            "id": name,
            "default": name == catalog.default,
            "aliases": list(entry.aliases),
            "path": entry.spec,
            "size_mb": round(entry.weight_bytes() / 1e6, 1) if problem is None else None,
            "downloaded": not entry.by_name or entry.local_path() is not None,
            "context": entry.context_length(),
            "settings": settings,
            "loads": problem is None,
            "problem": problem,
        }
        if as_json:
            click.echo(json.dumps(row))
            continue
        mark = " (default)" if row["default"] else ""
        click.echo(f"{name}{mark}  {entry.spec}")
        if entry.aliases:
            click.echo(f"  aliases: {', '.join(entry.aliases)}")
        if settings:
            click.echo("  settings: " + ", ".join(f"{k}={v!r}" for k, v in settings.items()))
        size = f"{row['size_mb']} MB of weights" if row["size_mb"] is not None else ""
        if not row["downloaded"]:
            download = entry.settings.download or "first_use"
            size = f"(from the hub, not downloaded yet: at {download.replace('_', ' ')})"
        click.echo(f"  loads: yes  {size}" if problem is None else f"  loads: no: {problem}")
    if not catalog.entries:
        click.echo("no models found (model folders with a config.json, or .gguf files)")
    if failed:
        raise SystemExit(1)


@click.command()
@click.argument("name")
def pull(name: str) -> None:
    """Download NAME (ORG/NAME[@REVISION][:QUANT]) into the Hugging Face cache (resuming
    a partial download; a GGUF is converted too), so `serve NAME` starts offline."""
    from vllm_mlx.models.errors import ModelLoadError
    from vllm_mlx.models.manage import pull as pull_model

    try:
        folder = pull_model(name)
    except ModelLoadError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{name}: ready in {folder}")


@click.command()
@click.argument("name")
def rm(name: str) -> None:
    """Delete NAME from the Hugging Face cache: ORG/NAME (every revision), ORG/NAME@REVISION
    or ORG/NAME:QUANT (that GGUF), with the folders converted from it."""
    from vllm_mlx.models.errors import ModelLoadError
    from vllm_mlx.models.manage import remove

    try:
        removed = remove(name)
    except ModelLoadError as exc:
        raise click.ClickException(str(exc)) from None
    for path in removed:
        click.echo(f"removed {path}")
