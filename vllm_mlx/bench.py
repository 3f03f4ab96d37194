"""`vllm-mlx bench`: throughput and latency of a server under concurrent streaming load.

Each request is a streaming ``/v1/completions`` call whose prompt is a list of random token
ids, so its length is exact and no two prompts share a prefix (the prefix cache cannot flatter
the figures). Tokens are counted from the usage chunk, not from SSE chunks. Per concurrency
level it reports aggregate output tokens/s over the level's wall time, time to first token
(first text chunk) and inter-token latency (gaps between text chunks of one stream).

``--raw`` also times ``mlx_lm.stream_generate`` in this process on the same model, prompt
length and output length, for the server-vs-raw single-stream ratio.
"""

from __future__ import annotations

import asyncio
import json
import random
import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click
import httpx

from .bench_plot import PlotUnavailable, plot_figures, pyplot

if TYPE_CHECKING:
    from .models.loader import CpuWeights

# Token ids that are ordinary text in any vocabulary of 5k+ entries (low ids are often
# bytes and specials); used when the model's tokenizer is not at hand (``--url`` alone).
FALLBACK_ID_RANGE = (1000, 5000)


@dataclass
class RequestResult:
    ok: bool
    error: str | None = None
    ttft: float | None = None
    gaps: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    duration: float = 0.0


@dataclass
class LevelStats:
    concurrency: int
    requests: int
    errors: int
    wall_s: float
    output_tokens: int
    tokens_per_s: float
    requests_per_s: float
    mean_prompt_tokens: float
    mean_output_tokens: float
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    itl_p50_ms: float | None
    itl_p95_ms: float | None
    single_stream_tok_s: float | None  # median per-request tokens/s (incl. TTFT)


@dataclass
class Workload:
    base_url: str
    model: str
    prompt_tokens: int
    output_tokens: int
    id_range: tuple[int, int]
    ban_token_ids: list[int]
    api_key: str | None
    seed: int = 0

    def body(self, rng: random.Random) -> dict:
        low, high = self.id_range
        body = {
            "model": self.model,
            "prompt": [rng.randrange(low, high) for _ in range(self.prompt_tokens)],
            "max_tokens": self.output_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.ban_token_ids:  # so every request produces exactly output_tokens
            body["logit_bias"] = {str(t): -100 for t in self.ban_token_ids}
        return body

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


async def stream_request(client: httpx.AsyncClient, work: Workload, body: dict) -> RequestResult:
    """One streaming completion, timed chunk by chunk."""
    result = RequestResult(ok=False)
    start = time.perf_counter()
    last_text: float | None = None
    try:
        url = f"{work.base_url}/v1/completions"
        async with client.stream("POST", url, json=body, headers=work.headers) as response:
            if response.status_code != 200:
                await response.aread()
                result.error = f"HTTP {response.status_code}: {response.text[:200]}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                now = time.perf_counter()
                if "error" in chunk:
                    result.error = chunk["error"].get("message", "stream error")
                if chunk.get("usage"):
                    result.prompt_tokens = chunk["usage"]["prompt_tokens"]
                    result.completion_tokens = chunk["usage"]["completion_tokens"]
                if any(choice.get("text") for choice in chunk.get("choices", [])):
                    if last_text is None:
                        result.ttft = now - start
                    else:
                        result.gaps.append(now - last_text)
                    last_text = now
    except httpx.HTTPError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        return result
    result.duration = time.perf_counter() - start
    result.ok = result.error is None and result.completion_tokens > 0
    if not result.ok and result.error is None:
        result.error = "no usage chunk (does the server honour stream_options.include_usage?)"
    return result


async def run_level(work: Workload, concurrency: int, requests: int, progress: bool) -> tuple:
    """``requests`` requests, ``concurrency`` at a time; returns (results, wall seconds)."""
    from tqdm import tqdm

    rng = random.Random(f"{work.seed}-{concurrency}")
    bodies = [work.body(rng) for _ in range(requests)]
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency + 1)
    with tqdm(
        total=requests, desc=f"concurrency {concurrency}", unit="req", disable=not progress
    ) as bar:
        async with httpx.AsyncClient(timeout=None, limits=limits) as client:

            async def one(body: dict) -> RequestResult:
                async with gate:
                    result = await stream_request(client, work, body)
                bar.update()
                return result

            start = time.perf_counter()
            results = await asyncio.gather(*(one(b) for b in bodies))
            wall = time.perf_counter() - start
    return list(results), wall


def summarize(concurrency: int, results: list[RequestResult], wall: float) -> LevelStats:
    ok = [r for r in results if r.ok]
    tokens = sum(r.completion_tokens for r in ok)

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 2)

    ttfts = [r.ttft for r in ok if r.ttft is not None]
    gaps = [g for r in ok for g in r.gaps]
    per_stream = [r.completion_tokens / r.duration for r in ok if r.duration > 0]
    return LevelStats(
        concurrency=concurrency,
        requests=len(results),
        errors=len(results) - len(ok),
        wall_s=round(wall, 3),
        output_tokens=tokens,
        tokens_per_s=round(tokens / wall, 2) if wall > 0 else 0.0,
        requests_per_s=round(len(ok) / wall, 3) if wall > 0 else 0.0,
        mean_prompt_tokens=round(sum(r.prompt_tokens for r in ok) / len(ok), 1) if ok else 0,
        mean_output_tokens=round(tokens / len(ok), 1) if ok else 0,
        ttft_p50_ms=ms(percentile(ttfts, 50)),
        ttft_p95_ms=ms(percentile(ttfts, 95)),
        itl_p50_ms=ms(percentile(gaps, 50)),
        itl_p95_ms=ms(percentile(gaps, 95)),
        single_stream_tok_s=_rounded(percentile(per_stream, 50)),
    )


COLUMNS = [
    ("conc", "concurrency", "{}"),
    ("reqs", "requests", "{}"),
    ("errors", "errors", "{}"),
    ("out tok/s", "tokens_per_s", "{:.2f}"),
    ("TTFT p50 ms", "ttft_p50_ms", "{:.1f}"),
    ("TTFT p95 ms", "ttft_p95_ms", "{:.1f}"),
    ("ITL p50 ms", "itl_p50_ms", "{:.1f}"),
    ("ITL p95 ms", "itl_p95_ms", "{:.1f}"),
]


def format_table(levels: list[LevelStats]) -> str:
    rows = [[title for title, _, _ in COLUMNS]]
    for level in levels:
        values = asdict(level)
        rows.append(
            ["-" if values[key] is None else fmt.format(values[key]) for _, key, fmt in COLUMNS]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows
    )


@contextmanager
def started_server(model: str | None, serve_args: list[str], log_path: Path) -> Iterator[str]:
    """`vllm-mlx serve` in a subprocess on a free port; yields its base URL."""
    from .server.launch import ServerStartError, launched_server

    try:
        with launched_server(model, ["--log-level", "warning", *serve_args], log_path) as s:
            yield s.base_url
    except ServerStartError as exc:
        raise click.ClickException(str(exc)) from None


def model_vocabulary(model: str | None) -> tuple[tuple[int, int], list[int]]:
    """(prompt id range, EOS ids to ban) from the model's tokenizer, read locally."""
    from mlx_lm.utils import load_tokenizer

    from .models.resolve import resolve_model

    tokenizer = load_tokenizer(resolve_model(model, progress=False))
    specials = set(getattr(tokenizer, "all_special_ids", []) or [])
    high = min(len(tokenizer.get_vocab()), 30000)
    low = min(1000, high // 2)
    while low in specials:
        low += 1
    return (low, high), sorted(tokenizer.eos_token_ids)


def time_raw_mlx_lm(model: str | None, cpu_weights: CpuWeights, work: Workload, runs: int) -> dict:
    """Median single-stream tokens/s of ``mlx_lm.stream_generate`` (incl. prefill)."""
    from mlx_lm.generate import stream_generate
    from mlx_lm.sample_utils import make_logits_processors

    from .engine.cpu import openblas_preloaded
    from .models.loader import load_model

    if cpu_weights == "auto" and sys.platform.startswith("linux") and not openblas_preloaded():
        cpu_weights = "quantized"  # as the server decides (runtime.build_runtime)
    loaded = load_model(model, cpu_weights=cpu_weights, progress=False)
    bias = {t: -100.0 for t in work.ban_token_ids}
    rng = random.Random(f"{work.seed}-raw")
    rates = []
    for i in range(runs + 1):  # the first run warms up
        prompt = work.body(rng)["prompt"]
        start, tokens = time.perf_counter(), 0
        for response in stream_generate(
            loaded.model,
            loaded.tokenizer,
            prompt,
            max_tokens=work.output_tokens,
            logits_processors=make_logits_processors(logit_bias=bias),
        ):
            tokens = response.generation_tokens
        if i:
            rates.append(tokens / (time.perf_counter() - start))
    return {"weights": loaded.weights, "runs": runs, "tok_s": _rounded(percentile(rates, 50))}


def parse_levels(_ctx, _param, value: str) -> list[int]:
    try:
        levels = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter("a comma-separated list of integers, e.g. 1,2,4,8") from None
    if not levels or min(levels) < 1:
        raise click.BadParameter("concurrency levels must be positive integers")
    return levels


@click.command()
@click.option("--url", help="A running server's base URL (e.g. http://127.0.0.1:8000).")
@click.option(
    "--model",
    help="The model to serve (when no --url) and to read the tokenizer from "
    "(default: the embedded SmolLM2).",
)
@click.option(
    "--serve-args", default="", help="Extra `vllm-mlx serve` arguments for a started server."
)
@click.option("--concurrency", default="1,2,4,8", show_default=True, callback=parse_levels)
@click.option("--prompt-tokens", default=128, show_default=True, type=click.IntRange(min=1))
@click.option("--output-tokens", default=64, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--requests",
    type=click.IntRange(min=1),
    help="Requests per concurrency level (default: 2 x the level, at least 4).",
)
@click.option("--warmup/--no-warmup", default=True, show_default=True)
@click.option("--raw", is_flag=True, help="Also time raw mlx-lm in-process for the ratio.")
@click.option(
    "--cpu-weights",
    type=click.Choice(["auto", "quantized", "float32"]),
    default="auto",
    show_default=True,
    help="Weights for --raw (and a started server): match the server's.",
)
@click.option("--api-key", envvar="VLLM_MLX_API_KEY", help="Sent as a Bearer token.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also draw tok/s, TTFT and inter-token latency against concurrency into this PNG "
    "(needs matplotlib: the 'plot' extra).",
)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--progress/--no-progress", default=True, show_default=True)
def bench(**opts) -> None:
    """Measure a server under N concurrent streaming requests per concurrency level."""
    if opts["plot_path"]:
        try:
            pyplot()  # before the run, not after minutes of benchmarking
        except PlotUnavailable as exc:
            raise click.ClickException(str(exc)) from None
    if opts["raw"]:
        from .engine.cpu import reexec_with_openblas

        reexec_with_openblas(sys.argv[1:])  # time raw mlx-lm under the server's BLAS
    if opts["url"] and opts["model"] is None and not opts["raw"]:
        id_range, bans = FALLBACK_ID_RANGE, list[int]()
    else:
        id_range, bans = model_vocabulary(opts["model"])
    if opts["url"]:
        work, figures = run_bench(opts["url"].rstrip("/"), id_range, bans, opts)
    else:
        import tempfile

        log_path = Path(tempfile.mkdtemp(prefix="vllm-mlx-bench-")) / "server.log"
        serve_args = ["--cpu-weights", opts["cpu_weights"], *shlex.split(opts["serve_args"])]
        click.echo(f"starting vllm-mlx serve (log: {log_path})", err=True)
        with started_server(opts["model"], serve_args, log_path) as base:
            work, figures = run_bench(base, id_range, bans, opts)
    click.echo(format_table([LevelStats(**level) for level in figures["levels"]]))
    if opts["raw"]:
        runs = max(3, opts["requests"] or 3)
        figures["raw"] = time_raw_mlx_lm(opts["model"], opts["cpu_weights"], work, runs)
        level_one = next((lv for lv in figures["levels"] if lv["concurrency"] == 1), None)
        server = level_one["single_stream_tok_s"] if level_one else None
        figures["raw"]["server_tok_s"] = server
        figures["raw"]["ratio"] = round(server / figures["raw"]["tok_s"], 3) if server else None
        click.echo(
            f"raw mlx-lm {figures['raw']['tok_s']:.2f} tok/s; server (1 stream) "
            f"{server if server is not None else '-'} tok/s; ratio {figures['raw']['ratio']}"
        )
    if opts["json_path"]:
        opts["json_path"].write_text(json.dumps(figures, indent=2) + "\n")
    if opts["plot_path"]:
        plot_figures(figures, opts["plot_path"])
        click.echo(f"plot written to {opts['plot_path']}", err=True)


def run_bench(
    base: str, id_range: tuple[int, int], bans: list[int], opts: dict
) -> tuple[Workload, dict]:
    """Every concurrency level against ``base``; returns the workload and the figures."""
    headers = {"Authorization": f"Bearer {opts['api_key']}"} if opts["api_key"] else {}
    models = httpx.get(f"{base}/v1/models", headers=headers, timeout=30)
    if models.status_code != 200:
        raise click.ClickException(f"GET {base}/v1/models: HTTP {models.status_code}")
    work = Workload(
        base_url=base,
        model=models.json()["data"][0]["id"],
        prompt_tokens=opts["prompt_tokens"],
        output_tokens=opts["output_tokens"],
        id_range=id_range,
        ban_token_ids=bans,
        api_key=opts["api_key"],
        seed=opts["seed"],
    )
    if opts["warmup"]:
        results, _ = asyncio.run(run_level(work, 1, 1, progress=False))
        if not results[0].ok:
            raise click.ClickException(f"warm-up request failed: {results[0].error}")
    levels = []
    for concurrency in opts["concurrency"]:
        requests = opts["requests"] or max(4, 2 * concurrency)
        results, wall = asyncio.run(run_level(work, concurrency, requests, opts["progress"]))
        levels.append(asdict(summarize(concurrency, results, wall)))
        for r in results:
            if r.error:
                click.echo(f"request failed: {r.error}", err=True)
                break
    return work, {
        "url": base,
        "model": work.model,
        "prompt_tokens": work.prompt_tokens,
        "output_tokens": work.output_tokens,
        "levels": levels,
    }
