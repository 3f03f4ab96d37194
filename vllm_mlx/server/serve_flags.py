"""The flags of `vllm-mlx serve`: one per option field of ``options.ServeOptions``, under
the field's name (``tests/test_options.py`` checks the two correspond), and the callbacks
that turn a flag's text into its field's value. Nothing here imports MLX: ``--help`` loads none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

import click
from annotated_types import Interval

from ..chat.template_kwargs import ChatTemplateError, check_template_kwargs
from ..engine.sampling_bounds import MIN_P, REPETITION_PENALTY, TEMPERATURE, TOP_K, TOP_P, limits

F = TypeVar("F")


def within(bounds: Interval, kind: type = float) -> click.ParamType:
    """A click range from the bounds a request's field has (`engine.sampling_bounds`)."""
    low, high, low_open = limits(bounds)
    if kind is int:
        return click.IntRange(int(low), int(high))
    return click.FloatRange(low, high, min_open=low_open)


def count_flag(name: str, default: int, description: str):
    """A flag holding a positive count (a limit, a size), its default shown in ``--help``."""
    return click.option(
        name, default=default, show_default=True, type=click.IntRange(min=1), help=description
    )


def drafting_flag(name: str, description: str):
    """A drafter's switch: ``auto`` (the default: where it pays), ``on`` or ``off``."""
    return click.option(
        name,
        type=click.Choice(["auto", "on", "off"]),
        default="auto",
        show_default=True,
        help=description,
    )


def serve_flags(command: F) -> F:
    """``command`` with every flag of ``serve`` (a decorator, under ``@click.command``)."""
    params = getattr(command, "__click_params__", [])
    command.__click_params__ = [*params, *_flags.__click_params__]  # type: ignore[attr-defined]
    return command


@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--served-model-name", help="Name reported to clients (default: the model's).")
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    help="Completion length when a request sets none (default: until the model stops or "
    "the context is full).",
)
@click.option(
    "--max-tokens-cap",
    type=click.IntRange(min=1),
    help="Upper bound on every request's completion length, asked for or not.",
)
@click.option(
    "--temperature",
    type=within(TEMPERATURE),
    help="Override the model's default (generation_config.json, else its family's).",
)
@click.option("--top-p", type=within(TOP_P), help="Override the model's default.")
@click.option("--top-k", type=within(TOP_K, int), help="Override the model's default.")
@click.option("--min-p", type=within(MIN_P), help="Override the model's default.")
@click.option(
    "--repetition-penalty", type=within(REPETITION_PENALTY), help="Override the model's default."
)
@click.option(
    "--unsupported-media",
    type=click.Choice(["placeholder", "reject"]),
    default="placeholder",
    show_default=True,
    help="Images, documents and audio sent to a text-only model: a short text placeholder "
    "in their place, or a 400.",
)
@count_flag(
    "--max-image-bytes",
    10 * 2**20,
    "Encoded size of one image a vision model is sent.",
)
@count_flag(
    "--max-image-pixels",
    40_000_000,
    "Width x height of one image, checked from its header before decoding.",
)
@click.option("--max-images", default=16, show_default=True, type=click.IntRange(min=0))
@count_flag(
    "--max-image-tokens",
    16_384,
    "Image tokens in one prompt (after the processor's expansion).",
)
@click.option(
    "--allow-image-urls",
    is_flag=True,
    help="Fetch http(s) image URLs (off: images must be base64 or data: URLs).",
)
@click.option(
    "--allow-private-image-urls",
    is_flag=True,
    help="With --allow-image-urls, also fetch from loopback and private addresses.",
)
@click.option(
    "--image-url-timeout", default=10.0, show_default=True, type=click.FloatRange(min=0.1)
)
@click.option(
    "--cpu-weights",
    type=click.Choice(["auto", "quantized", "float32"]),
    default="auto",
    show_default=True,
    envvar="VLLM_MLX_CPU_WEIGHTS",  # models.loader.CPU_WEIGHTS_ENV, as a literal
    help="On a CPU, float32 weights with OpenBLAS are much faster but use ~5x memory.",
)
@click.option("--reasoning-parser", help="Reasoning parser name (default: auto-detect).")
@click.option("--tool-call-parser", help="Tool-call parser name (default: auto-detect).")
@count_flag(
    "--max-queue",
    256,
    "Requests allowed to wait; beyond it the server answers 429.",
)
@count_flag(
    "--max-num-seqs",
    8,
    "Requests generated together in one continuous batch.",
)
@count_flag(
    "--prefill-step-tokens",
    512,
    "The most prompt tokens one scheduling step prefills; waiting prompts share them "
    "shortest-remaining-first, so a short prompt beside a long one finishes in one step.",
)
@click.option(
    "--decode-steps-per-chunk",
    default=32,
    show_default=True,
    type=click.IntRange(min=0),
    help="While requests are decoding, the decode steps between two chunks of a long "
    "prompt's prefill: more keeps running streams' pace, fewer finishes long prompts "
    "sooner (0: a chunk beside every decode step).",
)
@click.option(
    "--prefix-cache-mb",
    default=512,
    show_default=True,
    type=click.IntRange(min=0),
    help="Memory for reusable KV caches of shared prompt prefixes (0 disables).",
)
@click.option(
    "--max-model-len",
    type=click.IntRange(min=1),
    help="Cap the context (prompt + completion tokens) below the model's own.",
)
@click.option(
    "--kv-bits",
    type=click.Choice(["4", "8"]),
    callback=lambda ctx, param, value: int(value) if value else None,
    help="Quantize the KV cache to this many bits (default: the model's dtype).",
)
@click.option(
    "--kv-group-size",
    type=click.Choice(["32", "64", "128"]),
    default="64",
    callback=lambda ctx, param, value: int(value),
    show_default=True,
    help="Values sharing one scale in the quantized KV cache.",
)
@click.option(
    "--prefix-cache-dir",
    type=click.Path(file_okay=False),
    help="Keep prefix-cache entries in this directory too, so they survive a restart.",
)
@click.option(
    "--prefix-cache-disk-gb",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Disk space --prefix-cache-dir may use (least recently used entries go first).",
)
@click.option(
    "--warmup-prompt",
    type=click.File("r"),
    callback=lambda ctx, param, file: file.read() if file is not None else None,
    help="Pre-fill the prefix cache at start-up with this file's text as a system prompt.",
)
@click.option(
    "--draft-model",
    help="Speculative decoding with this draft model (same vocabulary) while one request runs.",
)
@click.option(
    "--num-draft-tokens",
    default=4,
    show_default=True,
    type=click.IntRange(min=1, max=16),
    help="Tokens the draft model proposes per step.",
)
@drafting_flag(
    "--mtp",
    "Draft tokens with the checkpoint's multi-token-prediction head (DeepSeek-V3/R1, "
    "GLM-4.5, MiMo, Qwen3-Next), alone and in the batch; auto: when it carries one, paused "
    "while its drafts are rejected; on: always (an error if it carries none).",
)
@click.option(
    "--mtp-tokens",
    default=1,
    show_default=True,
    type=click.IntRange(min=1, max=8),
    help="Tokens the MTP head proposes per step (beyond 1 it reads its own output).",
)
@drafting_flag(
    "--prompt-lookup",
    "Draft tokens from the prompt and output (n-gram lookup), verified in the batch; "
    "auto: per request, paused while its drafts are rejected.",
)
@click.option(
    "--prompt-lookup-tokens",
    default=5,
    show_default=True,
    type=click.IntRange(min=1, max=16),
    help="Tokens prompt lookup proposes per step.",
)
@click.option(
    "--default-thinking-token-budget",
    type=click.IntRange(min=0),
    help="Cap on reasoning tokens when a request sets none (default: no cap).",
)
@click.option(
    "--structured-output-backend",
    type=click.Choice(["auto", "llguidance", "lm-format-enforcer"]),
    default="auto",
    show_default=True,
    help="Engine enforcing response_format schemas (auto: llguidance; see docs/constrained.md).",
)
@click.option(
    "--mcp-config",
    type=click.Path(exists=True, dir_okay=False),
    help="MCP servers to connect (Claude Desktop's JSON: mcpServers/servers); see docs/mcp.md.",
)
@click.option(
    "--mcp-allow-any-command",
    is_flag=True,
    help="Let --mcp-config start any program with any arguments and environment, not only the "
    "allowed launchers (npx, uvx, python SCRIPT…); see docs/security.md.",
)
@click.option(
    "--chat-template",
    metavar="FILE|TEMPLATE",
    callback=lambda ctx, param, value: template_text(value),
    help="MODEL's chat template instead of its own: a Jinja file, or the template itself. "
    "Parser detection, the thinking switch, the tool prompt and count_tokens follow it "
    "(models.toml entries take a chat_template field).",
)
@click.option(
    "--chat-template-kwargs",
    metavar="JSON",
    callback=lambda ctx, param, value: template_kwargs(value),
    help="Template variables every request starts from, a JSON object (e.g. "
    "'{\"enable_thinking\": false}'); a request's chat_template_kwargs and thinking "
    "fields win over them.",
)
@click.option(
    "--allow-request-chat-templates",
    is_flag=True,
    help="Let requests carry their own chat template (chat_template_kwargs.chat_template); "
    "off by default: a template is code the server runs (docs/security.md).",
)
@click.option(
    "--allowed-hosts",
    multiple=True,
    callback=lambda ctx, param, values: listed(values),
    help="Host names this server answers to besides loopback names and the bound address "
    "(comma-separated or repeated; '.example.com' includes subdomains; '*' any). Other Host "
    "headers get a 400: that is what stops DNS-rebinding pages (docs/security.md).",
)
@click.option(
    "--read-timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds a client has to send a whole request (head and body) before the "
    "connection is closed.",
)
@click.option(
    "--max-connections",
    default=1024,
    show_default=True,
    type=click.IntRange(min=8),
    help="Open connections at most; past it, connections waiting on their client are closed "
    "first (bounded by the process's file-descriptor limit).",
)
@click.option("--max-body-mb", default=16, show_default=True, type=click.IntRange(min=1))
@count_flag(
    "--max-prompt-chars",
    2_000_000,
    "Characters of text (messages and tools, or a raw prompt) a request may carry; "
    "checked before anything is rendered or tokenized.",
)
@count_flag(
    "--max-messages",
    10_000,
    "Messages a request may carry.",
)
@count_flag(
    "--max-tools",
    512,
    "Tools a request may carry.",
)
@count_flag(
    "--responses-store-mb",
    128,
    "Memory for stored Responses (store: true), counted as their text; the oldest are "
    "forgotten past it.",
)
@click.option(
    "--api-key",
    envvar="VLLM_MLX_API_KEY",
    help="Require this key on every route but /health and the UI pages (Bearer or x-api-key). "
    "Env: VLLM_MLX_API_KEY.",
)
@click.option(
    "--allowed-origins",
    multiple=True,
    callback=lambda ctx, param, values: listed(values),
    help="Origins allowed by CORS (comma-separated or repeated; '*' for any). Default: none.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a request may take; past it, generation stops with a 504 / error event.",
)
@click.option(
    "--sse-keepalive",
    default=15.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds of stream silence before a keep-alive comment (0: never).",
)
@click.option(
    "--models-dir",
    multiple=True,
    type=click.Path(exists=True, file_okay=False),
    help="Serve every model folder and .gguf in this folder under its name, loaded on first "
    "use (repeatable; a models.toml there names and configures them; docs/models.md).",
)
@click.option(
    "--model-config",
    type=click.Path(exists=True, dir_okay=False),
    help="A models.toml for the --models-dir models (or models it names by path).",
)
@click.option(
    "--max-loaded-models",
    type=click.IntRange(min=1),
    help="Models loaded at once; loading one more unloads the least recently used idle one.",
)
@click.option(
    "--adapter",
    multiple=True,
    help="NAME=PATH: serve the mlx_lm.lora adapter folder PATH on the default model, as "
    "model id NAME or MODEL:NAME (repeatable; docs/models.md).",
)
@click.option(
    "--adapter-fuse",
    multiple=True,
    help="Serve adapter NAME merged into its own copy of the base weights, as model NAME "
    "(repeatable).",
)
@click.option(
    "--max-loaded-adapters",
    type=click.IntRange(min=1),
    help="Adapters loaded on one model at once; one more unloads the least recently used idle one.",
)
@click.option(
    "--model-ttl",
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a model may stay idle before it is unloaded (default: never).",
)
@click.option(
    "--max-memory-gb",
    type=click.FloatRange(min=0, min_open=True),
    help="Memory the loaded models' weights may take; a load past it unloads idle models or "
    "is refused with a 503.",
)
@click.option(
    "--strict-model-ids",
    is_flag=True,
    help="Answer 404 to an id that names no model (default: the default model serves it).",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@click.option(
    "--replay",
    type=click.File("r"),
    callback=lambda ctx, param, file: file.read() if file is not None else None,
    help="Answer every request with this recorded model output instead of running the model "
    "(client and parser debugging; no model cost).",
)
@click.option(
    "--distributed",
    type=click.Choice(["tensor", "pipeline"]),
    help="Shard the model over mlx.distributed ranks (start under mlx.launch, or use "
    "--ranks/--hosts); rank 0 serves HTTP (docs/distributed.md).",
)
@click.option(
    "--ranks",
    type=click.IntRange(min=2),
    help="With --distributed: start this many ranks on this machine (ring over loopback).",
)
@click.option(
    "--hosts",
    help="With --distributed: start one rank per host (comma-separated IPs) via mlx.launch.",
)
@click.option(
    "--distributed-backend",
    type=click.Choice(["any", "ring", "jaccl", "mpi"]),
    default="any",
    show_default=True,
    help="mlx.distributed backend (any: whichever the launcher set up).",
)
@click.option(
    "--collective-timeout",
    default=120.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Seconds one step's collectives may take before the rank group counts as failed.",
)
@click.option(
    "--estimate",
    is_flag=True,
    help="Print the memory MODEL needs (weights + KV cache for the context) against what MLX "
    "can use, and exit.",
)
def _flags() -> None:
    """Carries the flags (click stores a decorated function's options on it)."""


def listed(values: tuple[str, ...]) -> tuple[str, ...]:
    """Repeated and comma-separated option values as one list."""
    return tuple(item.strip() for value in values for item in value.split(",") if item.strip())


def template_text(value: str | None) -> str | None:
    """``--chat-template``: a file's text, or the value itself when it is a template."""
    if value is None:
        return None
    path = Path(value).expanduser()
    if path.is_file():
        return path.read_text(encoding="utf-8")
    if "{{" in value or "{%" in value:
        return value
    raise click.BadParameter(f"{value!r} is neither a file nor a template (no {{{{ or {{%)")


def template_kwargs(value: str | None) -> dict:
    """``--chat-template-kwargs``: a JSON object of variables the renderer does not own."""
    if value is None:
        return {}
    try:
        kwargs = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}") from None
    if not isinstance(kwargs, dict):
        raise click.BadParameter("must be a JSON object of template variables")
    if "chat_template" in kwargs:
        raise click.BadParameter("a template is given with --chat-template")
    try:
        check_template_kwargs(kwargs)
    except ChatTemplateError as exc:
        raise click.BadParameter(str(exc)) from None
    return kwargs
