"""The batch source runs its steps by the prefill schedule: a short prompt arriving during
a long one's prefill is prefilled and answered first, running streams decode between the
long prompt's chunks, and each prompt's chunks are its own (no padding to a neighbour)."""

from __future__ import annotations

import pytest
from tiny_models import build_tiny_model

from vllm_mlx.engine.sampling import RequestSampler, SamplingParams
from vllm_mlx.engine.sources import ModelBatchSource

GREEDY = RequestSampler(SamplingParams(temperature=0))


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_model(tokenizer, seed=3)


class Recorded:
    """A source whose every step is kept: prompt tokens processed per uid, tokens out."""

    def __init__(self, source: ModelBatchSource):
        self.source = source
        self.steps: list[tuple[dict[int, int], list[int]]] = []
        self.prompt_ended: list[int] = []  # uids in the order their prefill ended
        generator_next = source._gen.next

        def recorded_next():
            prompts, tokens = generator_next()
            chunks = {}
            for r in prompts:
                if r.end_of_prompt:
                    self.prompt_ended.append(r.uid)
                else:
                    chunks[r.uid] = r.progress[0]
            self.steps.append((chunks, [t.uid for t in tokens]))
            return prompts, tokens

        source._gen.next = recorded_next  # type: ignore[method-assign]

    def insert(self, prompt: list[int], max_tokens: int) -> int:
        uid, _ = self.source.insert(prompt, sampler=GREEDY, processors=[], max_tokens=max_tokens)
        return uid

    def chunks(self, uid: int) -> list[int]:
        """The prompt tokens ``uid`` prefilled in each step (0: none that step)."""
        done, sizes = 0, []
        for chunks, _ in self.steps:
            progress = chunks.get(uid, done)
            sizes.append(progress - done)
            done = progress
        return sizes


def test_a_short_request_is_prefilled_and_answered_before_a_long_prompt(model, tokenizer):
    recorded = Recorded(ModelBatchSource(model, prefill_step_size=128, decode_steps_per_chunk=4))
    long_prompt = tokenizer.encode("def add(a, b):\n    return a + b\n" * 60)
    assert len(long_prompt) > 600
    long_uid = recorded.insert(long_prompt, max_tokens=2)
    recorded.source.step()
    recorded.source.step()  # alone: a whole chunk each step
    short_uid = recorded.insert(tokenizer.encode("hi there"), max_tokens=3)
    order: list[int] = []
    for _ in range(200):
        steps, _ = recorded.source.step()
        order += [s.uid for s in steps]
        if long_uid in order:
            break
    assert recorded.prompt_ended == [short_uid, long_uid]
    assert order[:3] == [short_uid] * 3  # all its tokens before the long prompt's first
    short = len(tokenizer.encode("hi there")) - 1
    assert recorded.chunks(short_uid)[2] == short  # all of it in the step after its arrival
    assert recorded.steps[3][1] == [short_uid]  # its first token: the step right after
    sizes = recorded.chunks(long_uid)
    assert sizes[:4] == [128, 128, 0, 0]  # the short one's prefill alone, then its first token
    assert set(sizes[4:]) <= {0, 128, sum(sizes) % 128}  # then whole chunks between decodes
    assert sum(sizes) == len(long_prompt) - 1  # the last token is the first decode's input


def test_a_running_stream_decodes_between_the_chunks_of_a_long_prompt(model, tokenizer):
    recorded = Recorded(ModelBatchSource(model, prefill_step_size=64, decode_steps_per_chunk=3))
    stream_uid = recorded.insert(tokenizer.encode("tell me a story"), max_tokens=60)
    for _ in range(3):
        recorded.source.step()
    long_uid = recorded.insert(tokenizer.encode("x = [1, 2, 3]\n" * 40), max_tokens=1)
    while long_uid not in recorded.prompt_ended:
        recorded.source.step()
    during = recorded.steps[3:-1]  # the last: the rest of the prompt, which fits, at once
    kinds = ["chunk" if long_uid in chunks else "decode" for chunks, _ in during]
    for (chunks, tokens), kind in zip(during, kinds, strict=True):
        assert tokens == ([] if kind == "chunk" else [stream_uid])  # a chunk is its own step
        assert chunks.get(long_uid, 64) % 64 == 0  # whole chunks
    assert kinds[0] == "chunk"  # owed at once
    starts = [i for i, kind in enumerate(kinds) if kind == "chunk"]
    assert len(starts) >= 3
    assert [b - a for a, b in zip(starts, starts[1:], strict=False)] == [4] * (len(starts) - 1)
    assert recorded.steps[-1][1] == [stream_uid]  # the stream decoded beside the last piece
