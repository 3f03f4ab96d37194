"""Vision requests in the continuous batch and from the prefix cache, side by side in one run.

    python benchmarks/bench_vision.py [--images 4] [--max-tokens 32] [--text-streams 3]

No vision checkpoint is reachable offline, so the model is mlx-vlm's own Qwen2.5-VL class at
a small but non-trivial size with random weights (text: hidden 512, 6 layers; vision tower:
hidden 384, depth 6; images of 448x448 are 256 image tokens), written by the builder the
tests use, with its real processor. Random weights cost what trained ones do. Everything runs
through the server's pipeline and engine (``build_runtime``), in-process.

Shapes, each measured in the same run:

- vision alone: image requests one after another (each a new image: no cache help);
- vision + text: the same image requests while ``--text-streams`` text requests decode in
  the batch; beside it, the text streams alone. Reported: image requests per second, the
  text streams' aggregate tok/s and their longest pause between two tokens. Run twice: with
  the image span prefilled while the request is prepared (the default: off the engine's
  thread) and with it prefilled at admission in the engine's thread (``AHEAD_REUSE_MIN``
  0), side by side;
- cached second turn: a conversation's second turn with the same image, TTFT from the
  prefix cache against the first turn (the image encoded) and against the same second turn
  with the cache off.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))  # the tests' model builder
from tiny_vision import write_tiny_vlm  # noqa: E402

from vllm_mlx.engine import sources  # noqa: E402
from vllm_mlx.options import RuntimeOptions  # noqa: E402
from vllm_mlx.request import (  # noqa: E402
    ChatRequest,
    ImageSource,
    Sampling,
    collecting_media,
    media_placeholder,
)
from vllm_mlx.runtime import build_runtime  # noqa: E402

SIZES = {
    "hidden_size": 512,
    "num_hidden_layers": 6,
    "intermediate_size": 1408,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "rope_scaling": {"type": "mrope", "mrope_section": [8, 12, 12]},
    "vision": {
        "hidden_size": 384,
        "depth": 6,
        "num_heads": 6,
        "intermediate_size": 1024,
        "out_hidden_size": 512,
        "window_size": 112,
        "fullatt_block_indexes": [1, 3, 5],
    },
    "max_pixels": 448 * 448,
}
SIDE = 448
TEXT = "Describe a terminal window with green text on a black background, line by line."


def noise_png(seed: int) -> str:
    rng = random.Random(seed)
    image = Image.frombytes("RGB", (SIDE, SIDE), rng.randbytes(SIDE * SIDE * 3))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def chat(messages: list[tuple[str, list]], max_tokens: int) -> ChatRequest:
    """(role, parts) messages; a part is text or ("image", data URL)."""
    out = []
    with collecting_media() as media:
        for i, (role, parts) in enumerate(messages):
            text = ""
            for part in parts:
                if isinstance(part, tuple):
                    text += media_placeholder("image", f"messages.{i}", ImageSource(url=part[1]))
                else:
                    text += part
            out.append({"role": role, "content": text})
    return ChatRequest(
        messages=out,
        omitted_media=media,
        sampling=Sampling(temperature=0.0),
        max_tokens=max_tokens,
    )


async def run(pipeline, request: ChatRequest) -> dict:
    """TTFT (from before the request is prepared: its images are decoded and encoded
    there), token times and the usage of one request through the pipeline."""
    started = time.perf_counter()
    prepared = await asyncio.to_thread(pipeline.prepare_chat, request)
    times: list[float] = []
    usage = None
    async for event in pipeline.stream(prepared):
        if event.usage is not None:
            usage = event.usage
        times.append(time.perf_counter())
    return {"started": started, "times": times, "usage": usage}


def image_request(seed: int, max_tokens: int) -> ChatRequest:
    return chat([("user", [("image", noise_png(seed)), "What is in this image?"])], max_tokens)


async def vision_alone(pipeline, seeds: list[int], max_tokens: int) -> float:
    t0 = time.perf_counter()
    for seed in seeds:
        await run(pipeline, image_request(seed, max_tokens))
    return len(seeds) / (time.perf_counter() - t0)


async def text_streams(pipeline, streams: int, max_tokens: int, during=None) -> dict:
    """``streams`` text requests decoding together (and ``during``, awaited alongside)."""
    texts = [
        asyncio.create_task(run(pipeline, chat([("user", [f"{TEXT} ({i})"])], max_tokens)))
        for i in range(streams)
    ]
    extra = await during if during is not None else None
    results = await asyncio.gather(*texts)
    first = min(t for r in results for t in r["times"][:1])
    last = max(r["times"][-1] for r in results)
    tokens = sum(r["usage"].completion_tokens for r in results)
    gaps = [b - a for r in results for a, b in zip(r["times"], r["times"][1:], strict=False)]
    return {
        "tok_s": tokens / (last - first),
        "max_gap_ms": 1000 * max(gaps),
        "median_gap_ms": 1000 * statistics.median(gaps),
        "extra": extra,
    }


async def vision_beside_text(pipeline, seeds, max_tokens, streams, text_tokens) -> dict:
    async def images():
        await asyncio.sleep(0.5)  # the text streams are decoding
        return await vision_alone(pipeline, seeds, max_tokens)

    return await text_streams(pipeline, streams, text_tokens, during=images())


async def second_turn(cached, cold, seed: int, max_tokens: int) -> dict:
    image = ("image", noise_png(seed))
    first_turn = [("user", [image, "What is in this image?"])]
    first = await run(cached.pipeline, chat(first_turn, max_tokens))
    answer = "It shows a screenshot of a terminal."
    turns = [*first_turn, ("assistant", [answer]), ("user", ["What colour is the text?"])]
    second = await run(cached.pipeline, chat(turns, max_tokens))
    no_cache = await run(cold.pipeline, chat(turns, max_tokens))
    ttft = {k: r["times"][0] - r["started"] for k, r in (("first", first), ("second", second))}
    ttft["second_no_cache"] = no_cache["times"][0] - no_cache["started"]
    ttft["cached_tokens"] = second["usage"].cached_tokens
    ttft["prompt_tokens"] = second["usage"].prompt_tokens
    return ttft


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--text-streams", type=int, default=3)
    parser.add_argument("--text-tokens", type=int, default=160)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    folder = write_tiny_vlm(Path(tempfile.mkdtemp(prefix="bench-vlm-")), "qwen2_5_vl", sizes=SIZES)
    cached = build_runtime(str(folder), RuntimeOptions.of(max_num_seqs=8), progress=False)
    cold = build_runtime(str(folder), RuntimeOptions.of(prefix_cache_mb=0), progress=False)
    cold_source = cold.engine.source
    assert cold_source.prefix_cache is None
    print(f"model: random-weight Qwen2.5-VL at {folder} ({SIDE}x{SIDE} images)")
    seed = 0
    rows: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        rows.setdefault(name, []).append(value)

    # warm-up: first calls compile and allocate
    asyncio.run(vision_alone(cold.pipeline, [10_000], 4))
    for _ in range(args.rounds):
        seeds = list(range(seed, seed + args.images))
        seed += args.images
        add(
            "vision alone: image req/s",
            asyncio.run(vision_alone(cold.pipeline, seeds, args.max_tokens)),
        )
        seeds = list(range(seed, seed + args.images))
        seed += args.images
        text = asyncio.run(text_streams(cold.pipeline, args.text_streams, args.text_tokens))
        mixed = asyncio.run(
            vision_beside_text(
                cold.pipeline, seeds, args.max_tokens, args.text_streams, args.text_tokens
            )
        )
        seeds = list(range(seed, seed + args.images))
        seed += args.images
        ahead, sources.AHEAD_REUSE_MIN = sources.AHEAD_REUSE_MIN, 0  # prefill at admission
        try:
            admitted = asyncio.run(
                vision_beside_text(
                    cold.pipeline, seeds, args.max_tokens, args.text_streams, args.text_tokens
                )
            )
        finally:
            sources.AHEAD_REUSE_MIN = ahead
        add("vision + text: image req/s", mixed["extra"])
        add("text alone: tok/s", text["tok_s"])
        add("text beside vision: tok/s", mixed["tok_s"])
        add("... image prefill at admission: tok/s", admitted["tok_s"])
        add("text alone: median gap ms", text["median_gap_ms"])
        add("text alone: max gap ms", text["max_gap_ms"])
        add("text beside vision: max gap ms", mixed["max_gap_ms"])
        add("... image prefill at admission: max gap", admitted["max_gap_ms"])
        turn = asyncio.run(second_turn(cached, cold, seed, args.max_tokens))
        seed += 1
        add("TTFT first turn (image encoded) s", turn["first"])
        add("TTFT second turn, no cache s", turn["second_no_cache"])
        add("TTFT second turn, cached s", turn["second"])
        add("second turn cached/prompt tokens", turn["cached_tokens"] / turn["prompt_tokens"])
    for name, values in rows.items():
        print(f"{name:40s} " + "  ".join(f"{v:8.3f}" for v in values))
    mean = {k: statistics.mean(v) for k, v in rows.items()}
    print(
        f"ratios: image req/s beside text / alone = "
        f"{mean['vision + text: image req/s'] / mean['vision alone: image req/s']:.2f}; "
        f"text tok/s beside vision / alone = "
        f"{mean['text beside vision: tok/s'] / mean['text alone: tok/s']:.2f} "
        f"(prefill at admission: "
        f"{mean['... image prefill at admission: tok/s'] / mean['text alone: tok/s']:.2f}); "
        f"cached second-turn TTFT / uncached = "
        f"{mean['TTFT second turn, cached s'] / mean['TTFT second turn, no cache s']:.3f}"
    )
    cached.close()
    cold.close()


if __name__ == "__main__":
    main()
