"""Drafts verified in a mixed batch: a row that drafts verifies while its neighbours take
their ordinary one-token step in the same decode step, and every row's tokens and
log-probabilities are plain decoding's, the neighbours' bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from same_numbers import together as run
from test_prefix_agents import build_hybrid
from tiny_models import build_tiny_model

from vllm_mlx import native
from vllm_mlx.engine.drafting import Drafting
from vllm_mlx.engine.lookup import LookupMode
from vllm_mlx.engine.lookup_verify import LookupDecoder, NgramDrafter
from vllm_mlx.engine.sampling import SamplingParams, make_sampler
from vllm_mlx.engine.sources import ModelBatchSource

CODE = "def f(x):\n    return x + 1\n" * 6


class ChosenRows(NgramDrafter):
    """Prompt lookup's drafts for the rows in ``drafting`` only; the others never draft."""

    def __init__(self, drafting: set[int], mode: LookupMode = "on"):
        super().__init__(mode)
        self.drafting = drafting

    def propose(self, uid: int, cached: list[int], pending: int, k: int) -> list[int]:
        return super().propose(uid, cached, pending, k) if uid in self.drafting else []


class MixedSpy(LookupDecoder):
    """Records, for each verify, the rows verified and the rows decoding beside them."""

    def __init__(self, drafter: NgramDrafter):
        super().__init__("on", 4, drafter)
        self.gen = None
        self.seen: list[tuple[list[int], list[int]]] = []

    def step(self, gen):
        self.gen = gen
        return super().step(gen)

    def _verify(self, batch, proposals):
        plain = self.gen._generation_batch
        beside = [] if batch is plain else list(plain.uids)
        self.seen.append((list(batch.uids), beside))
        return super()._verify(batch, proposals)


def mixed_source(
    model, drafting: set[int], mode: LookupMode = "on"
) -> tuple[ModelBatchSource, MixedSpy]:
    source = ModelBatchSource(model, drafting=Drafting(prompt_lookup=mode, prompt_lookup_tokens=4))
    spy = MixedSpy(ChosenRows(drafting, mode))
    source.lookup = spy
    return source, spy


def same_bits(got, want) -> bool:
    return all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_model(tokenizer, seed=5, arch="llama")


@pytest.mark.parametrize("params", [{"temperature": 0}, {"temperature": 0.8, "seed": 7}])
def test_a_drafting_row_verifies_beside_rows_that_decode(model, tokenizer, params):
    """Row 0 (repeated code) drafts, rows 1 and 2 (chats) never do: the verify runs in the
    same steps as their one-token decode, and nobody's tokens move (bits: on the native
    kernels, below; MLX's own products differ with the batch's size)."""
    prompts = [
        tokenizer.encode(CODE),
        tokenizer.encode("hello there, how are you?"),
        tokenizer.encode("tell me a story about a bicycle"),
    ]
    plain = run(ModelBatchSource(model), prompts, params, 40)
    source, spy = mixed_source(model, drafting={0})
    got = run(source, prompts, params, 40)
    assert [t for t, _ in got] == [t for t, _ in plain]
    mixed = [(v, beside) for v, beside in spy.seen if beside]
    if params["temperature"] == 0:  # a random model's sampled text seldom repeats
        assert mixed and all(v == [0] and set(beside) <= {1, 2} for v, beside in mixed)
        assert spy.accepted > 0


def test_auto_keeps_one_drafting_row_beside_three_chats_in_the_one_batch(model, tokenizer):
    """A second forward costs more than one row's drafts bring four rows: ``auto`` decodes
    them all together (no split), and the tokens are plain decoding's."""
    prompts = [tokenizer.encode(CODE), *(tokenizer.encode(f"chat number {i}") for i in range(3))]
    plain = run(ModelBatchSource(model), prompts, {"temperature": 0}, 30)
    source, spy = mixed_source(model, drafting={0}, mode="auto")
    got = run(source, prompts, {"temperature": 0}, 30)
    assert [t for t, _ in got] == [t for t, _ in plain]
    assert not any(beside for _, beside in spy.seen)
    assert spy.gen is not None and not len(spy.gen.drafting_batch)


def test_rows_that_stop_drafting_rejoin_the_batch(model, tokenizer):
    """Two drafting rows and a chat; every row's tokens equal plain decoding's, and once
    the drafts dry up every row decodes in the one batch again."""
    prompts = [
        tokenizer.encode(CODE),
        tokenizer.encode("hello there"),
        tokenizer.encode(CODE + "def g"),
    ]
    plain = run(ModelBatchSource(model), prompts, {"temperature": 0}, 30)
    source, spy = mixed_source(model, drafting={0, 2})
    got = run(source, prompts, {"temperature": 0}, 30)
    assert [t for t, _ in got] == [t for t, _ in plain]
    assert any(beside for _, beside in spy.seen)
    assert spy.gen is not None and not len(spy.gen.drafting_batch)  # all finished


def test_removing_a_drafting_row_mid_stream_leaves_the_others_unchanged(model, tokenizer):
    prompts = [tokenizer.encode(CODE), tokenizer.encode("hello there, how are you?")]
    plain = run(ModelBatchSource(model), prompts[1:], {"temperature": 0}, 20)
    source, spy = mixed_source(model, drafting={0})
    sampler = {"temperature": 0}
    uids = [
        source.insert(p, sampler=make_sampler(SamplingParams(**sampler)), processors=[],
                      max_tokens=20)[0]
        for p in prompts
    ]  # fmt: skip
    tokens: dict[int, list[int]] = {uid: [] for uid in uids}
    while not spy.seen:
        for step in source.step()[0]:
            tokens[step.uid].append(step.token)
    source.remove(uids[0])  # taken out of the drafting batch
    assert spy.gen is not None and not len(spy.gen.drafting_batch)
    while len(tokens[uids[1]]) < 20:
        for step in source.step()[0]:
            tokens[step.uid].append(step.token)
    assert tokens[uids[1]] == plain[0][0]


@pytest.mark.slow
@pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built")
def test_on_the_native_kernels_a_mixed_batch_keeps_every_rows_bits(loaded):
    """The default model (int16 products, float16 KV cache): one row copying code drafts
    while two chats decode; tokens and every log-probability equal plain decoding's."""
    chat = loaded.tokenizer.apply_chat_template
    code = "def area(w, h):\n    return w * h\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"
    prompts = [
        chat([{"role": "user", "content": f"Repeat this code exactly:\n{code}"}],
             add_generation_prompt=True),
        chat([{"role": "user", "content": "Name three rivers."}], add_generation_prompt=True),
        chat([{"role": "user", "content": "What is a bicycle?"}], add_generation_prompt=True),
    ]  # fmt: skip
    for params in ({"temperature": 0}, {"temperature": 0.7, "seed": 3}):
        plain = run(ModelBatchSource(loaded.model), prompts, params, 40)
        source, spy = mixed_source(loaded.model, drafting={0})
        got = run(source, prompts, params, 40)
        assert any(beside for _, beside in spy.seen) and spy.accepted > 0
        for (tokens, logprobs), (want, want_logprobs) in zip(got, plain, strict=True):
            assert tokens == want
            assert same_bits(logprobs, want_logprobs)


class CountingDrafter(NgramDrafter):
    """Prompt lookup's drafter under ``auto``, counting the rows asked for a draft."""

    def __init__(self):
        super().__init__("auto")
        self.asked = 0

    def propose(self, uid: int, cached: list[int], pending: int, k: int) -> list[int]:
        self.asked += 1
        return super().propose(uid, cached, pending, k)


def test_a_paused_row_is_not_asked_for_drafts(model, tokenizer):
    """A sampled chat that does not repeat itself: its throttle pauses proposing, and while
    paused the row is not asked for a draft (asking reads its pending token, which waits
    for the forward in flight), and its tokens are plain decoding's."""
    prompts = [tokenizer.encode("tell me a story about a bicycle")]
    params = {"temperature": 0.8, "seed": 3}
    plain = run(ModelBatchSource(model), prompts, params, 120)
    source = ModelBatchSource(
        model, drafting=Drafting(prompt_lookup="auto", prompt_lookup_tokens=4)
    )
    drafter = CountingDrafter()
    source.lookup = LookupDecoder("auto", 4, drafter)
    got = run(source, prompts, params, 120)
    assert [t for t, _ in got] == [t for t, _ in plain]
    assert 0 < drafter.asked < 120 // 2


class WrongLast(ChosenRows):
    """Prompt lookup's drafts for ``drafting`` rows; row ``wrong``'s last one wrong (its
    lowest bit flipped) every other time it proposes: some verifies keep every draft,
    others part of the batch's."""

    def __init__(self, drafting: set[int], wrong: int):
        super().__init__(drafting)
        self.wrong = wrong
        self.asked = 0

    def propose(self, uid: int, cached: list[int], pending: int, k: int) -> list[int]:
        proposal = super().propose(uid, cached, pending, k)
        if not proposal or uid != self.wrong:
            return proposal
        self.asked += 1
        return proposal if self.asked % 2 else [*proposal[:-1], proposal[-1] ^ 1]


@pytest.mark.parametrize("params", [{"temperature": 0}, {"temperature": 0.8, "seed": 7}])
def test_a_hybrid_models_rows_verify_in_the_batch(tokenizer, params):
    """LFM2's convolution layers keep states with no per-position history: after a verify
    that keeps part of a draft they are restored and the kept tokens run again, so every
    row, drafting or not, keeps plain decoding's tokens."""
    hybrid = build_hybrid(tokenizer)
    prompts = [
        tokenizer.encode(CODE),
        tokenizer.encode("hello there, how are you?"),
        tokenizer.encode(CODE + "def g"),
    ]
    plain = run(ModelBatchSource(hybrid), prompts, params, 40)
    source, spy = mixed_source(hybrid, drafting={0, 2})
    spy.drafter = WrongLast({0, 2}, wrong=0)
    got = run(source, prompts, params, 40)
    assert [t for t, _ in got] == [t for t, _ in plain]
    # and their log-probabilities (MLX's own products: not bit for bit across widths)
    for (_, got_lp), (_, want_lp) in zip(got, plain, strict=True):
        for a, b in zip(got_lp, want_lp, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-4)
    assert spy.seen  # verified in the batch
    if params["temperature"] == 0:
        assert 0 < spy.accepted < spy.drafted  # chains kept in part: the replay ran
