"""On the embedded model, through the engine: a short chat submitted while another
client's long prompt is prefilling finishes its prefill and all its tokens before the long
prompt's prefill ends, and answers exactly as it does alone (order of events, no clocks)."""

from __future__ import annotations

import threading
import time

import pytest

from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.generation import GenerationRequest
from vllm_mlx.engine.sampling import SamplingParams
from vllm_mlx.engine.sources import ModelBatchSource

pytestmark = pytest.mark.slow


def chat(loaded, text: str) -> list[int]:
    return loaded.tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True
    )


def test_a_short_chat_during_a_long_prefill_is_answered_first(loaded) -> None:
    source = ModelBatchSource(loaded.model, prefill_step_size=128)
    engine = Engine(source, loaded.tokenizer)
    events: list[tuple[str, int]] = []  # ("prefilled" | "token", generator uid)
    long_chunk, short_sent = threading.Event(), threading.Event()
    generator_next = source._gen.next

    def recorded_next():
        prompts, tokens = generator_next()
        for r in prompts:
            if r.end_of_prompt:
                events.append(("prefilled", r.uid))
            elif not long_chunk.is_set():  # the long prompt's first chunk: hold the engine
                events.append(("chunk", r.uid))  # until the short chat waits in its queue
                long_chunk.set()
                assert short_sent.wait(120)
        events.extend(("token", t.uid) for t in tokens)
        return prompts, tokens

    short = GenerationRequest(chat(loaded, "Say hi."), SamplingParams(temperature=0, max_tokens=5))
    long_prompt = chat(loaded, "Summarise this code.\n" + "def add(a, b):\n    return a + b\n" * 50)
    assert len(long_prompt) > 600
    try:
        alone = [t for c in engine.generate_sync(short) for t in c.token_ids]
        source._gen.next = recorded_next  # type: ignore[method-assign]
        results: dict[str, list[int]] = {}

        def run(name: str, request: GenerationRequest) -> None:
            results[name] = [t for c in engine.generate_sync(request) for t in c.token_ids]

        params = SamplingParams(temperature=0, max_tokens=3)
        long_thread = threading.Thread(
            target=run, args=("long", GenerationRequest(long_prompt, params))
        )
        long_thread.start()
        assert long_chunk.wait(120)
        short_thread = threading.Thread(target=run, args=("short", short))
        short_thread.start()
        while engine.queue_depth == 0 and short_thread.is_alive():
            time.sleep(0.005)
        short_sent.set()
        short_thread.join(300)
        long_thread.join(300)
    finally:
        short_sent.set()
        engine.close()
    assert results["short"] == alone  # its neighbour changed when it ran, not what it says
    assert events[0][0] == "chunk"
    long_uid = events[0][1]
    ended = [uid for kind, uid in events if kind == "prefilled"]
    assert len(ended) == 2 and ended[1] == long_uid  # the short chat's prefill ended first
    short_uid = ended[0]
    first_long = events.index(("token", long_uid))
    assert events.index(("prefilled", long_uid)) < first_long
    short_tokens = [i for i, e in enumerate(events) if e == ("token", short_uid)]
    assert len(short_tokens) == len(alone)
    assert max(short_tokens) < events.index(("prefilled", long_uid))  # all before the long
