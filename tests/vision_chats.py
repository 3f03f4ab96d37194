"""Chat requests with images for the engine-level vision tests, built as the surfaces build
them, and the ways of running them: alone, or submitted together.

Public API:
    Img(color), request(*messages, max_tokens), user(*parts), run_alone(runtime, chat),
    together(runtime, chats) -> (answers, most run at once)
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

from tiny_vision import png_data_url

from vllm_mlx.request import ChatRequest, ImageSource, Sampling, collecting_media, media_placeholder


@dataclass(frozen=True)
class Img:
    color: tuple[int, int, int]


def request(*messages: tuple[str, list], max_tokens: int = 6) -> ChatRequest:
    """A chat of (role, parts) messages whose parts are text and ``Img`` images, converted
    as the surfaces convert them (each image a marker with its source)."""
    out = []
    with collecting_media() as media:
        for i, (role, parts) in enumerate(messages):
            text = ""
            for k, part in enumerate(parts):
                if isinstance(part, Img):
                    source = ImageSource(url=png_data_url(part.color))
                    text += media_placeholder("image", f"messages.{i}.content.{k}", source)
                else:
                    text += part
            out.append({"role": role, "content": text})
    return ChatRequest(
        messages=out, omitted_media=media, sampling=Sampling(temperature=0.0), max_tokens=max_tokens
    )


def user(*parts) -> tuple[str, list]:
    return ("user", list(parts))


def run_alone(runtime, chat: ChatRequest) -> str:
    return runtime.pipeline.complete_sync(runtime.pipeline.prepare_chat(chat)).message.content


def together(runtime, chats: list[ChatRequest]) -> tuple[list[str], int]:
    """The answers of ``chats`` submitted at once, and the most the engine ran together."""
    peak = 0
    done = threading.Event()

    def watch():
        nonlocal peak
        while not done.is_set():
            peak = max(peak, runtime.engine.running)
            time.sleep(0.001)

    async def submit():
        prepared = [runtime.pipeline.prepare_chat(chat) for chat in chats]
        results = await asyncio.gather(*(runtime.pipeline.complete(p) for p in prepared))
        return [r.message.content for r in results]

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        batched = asyncio.run(submit())
    finally:
        done.set()
        watcher.join()
    return batched, peak
