"""`vllm-mlx bench --plot FILE.png`: the benchmark's figures against concurrency in one PNG.

Three panels side by side, x = concurrent streams: aggregate output tokens/s, time to first
token (p50 and p95) and inter-token latency (p50 and p95). matplotlib is an optional extra
(``pip install 'vllm-mlx[plot]'``), imported only here and only when a plot is asked for.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

INSTALL_HINT = "--plot needs matplotlib: pip install 'vllm-mlx[plot]' (or pip install matplotlib)"


class PlotUnavailable(RuntimeError):
    pass


def pyplot() -> ModuleType:
    """matplotlib's pyplot on the file-only Agg backend; PlotUnavailable if not installed."""
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable(INSTALL_HINT) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series(levels: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(concurrency, value) for the levels that have the value (a level may have none)."""
    points = [(lv["concurrency"], lv[key]) for lv in levels if lv.get(key) is not None]
    return [c for c, _ in points], [v for _, v in points]


def plot_figures(figures: dict, path: Path) -> None:
    """Write the PNG for ``figures`` (the dict ``bench --json`` writes)."""
    plt = pyplot()
    levels = sorted(figures["levels"], key=lambda lv: lv["concurrency"])
    concurrency = [lv["concurrency"] for lv in levels]
    fig, (rate, ttft, itl) = plt.subplots(1, 3, figsize=(13, 4), dpi=100, layout="constrained")
    rate.plot(*_series(levels, "tokens_per_s"), marker="o", label="aggregate")
    rate.set_title("Throughput")
    rate.set_ylabel("output tokens/s")
    for axes, name, title in (
        (ttft, "ttft", "Time to first token"),
        (itl, "itl", "Inter-token latency"),
    ):
        axes.plot(*_series(levels, f"{name}_p50_ms"), marker="o", label="p50")
        axes.plot(*_series(levels, f"{name}_p95_ms"), marker="s", linestyle="--", label="p95")
        axes.set_title(title)
        axes.set_ylabel("milliseconds")
    for axes in (rate, ttft, itl):
        axes.set_xlabel("concurrent streams")
        axes.set_xticks(concurrency)
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        axes.legend()
    fig.suptitle(
        f"{figures.get('model', '')}: {figures.get('prompt_tokens')} prompt tokens, "
        f"{figures.get('output_tokens')} output tokens per request"
    )
    fig.savefig(path, format="png")
    plt.close(fig)
