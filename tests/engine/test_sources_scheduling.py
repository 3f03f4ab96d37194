"""A long prefill shares the batch: while other sequences run, each step prefills a short
chunk, so a newcomer is admitted and answered before the long prompt's prefill ends."""

from __future__ import annotations

import pytest
from tiny_models import build_tiny_model

from vllm_mlx.engine.sampling import RequestSampler, SamplingParams
from vllm_mlx.engine.sources import ModelBatchSource


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_model(tokenizer, seed=3)


def test_a_short_request_is_answered_while_a_long_prompt_prefills(model, tokenizer) -> None:
    source = ModelBatchSource(model, prefill_step_size=128, shared_prefill_step=16)
    progress: dict[int, list[int]] = {}  # uid -> prompt tokens processed after each step
    generator_next = source._gen.next

    def recorded_next():
        prompts, tokens = generator_next()
        for r in prompts:
            progress.setdefault(r.uid, []).append(r.progress[0])
        return prompts, tokens

    source._gen.next = recorded_next  # type: ignore[method-assign]
    greedy = RequestSampler(SamplingParams(temperature=0))
    long_prompt = tokenizer.encode("def add(a, b):\n    return a + b\n" * 60)
    assert len(long_prompt) > 600
    long_uid, _ = source.insert(long_prompt, sampler=greedy, processors=[], max_tokens=2)
    source.step()
    source.step()  # alone: whole chunks
    short_uid, _ = source.insert(
        tokenizer.encode("hi"), sampler=greedy, processors=[], max_tokens=3
    )
    order: list[int] = []
    for _ in range(200):
        steps, _ = source.step()
        order += [s.uid for s in steps]
        if order.count(long_uid):
            break
    assert order[:3] == [short_uid] * 3  # all its tokens before the long prompt's first
    chunks = [b - a for a, b in zip([0, *progress[long_uid]], progress[long_uid], strict=False)]
    assert chunks[:2] == [128, 128]  # alone: whole chunks
    rest = chunks[2:]
    beside = rest[: rest.index(128)]  # while the short request ran
    assert beside and set(beside) == {16}
    after = rest[len(beside) :]  # alone again: whole chunks, then what is left
    assert all(c == 128 for c in after[:-2]) and max(after) == 128
    assert sum(chunks) == len(long_prompt)
