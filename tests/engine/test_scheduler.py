"""The step policy on fake work: prompts are lengths left, streams a flag, and each test
replays the plans the way the batch generator applies them."""

from __future__ import annotations

import pytest

from vllm_mlx.engine.scheduler import PrefillSchedule, StepPlan, shortest_first


def test_shortest_first_fills_the_budget_from_the_fewest_remaining() -> None:
    assert shortest_first([900, 30, 120], 256) == [106, 30, 120]
    assert shortest_first([900, 30, 30], 40) == [0, 30, 10]  # ties: the earlier first
    assert shortest_first([5, 7], 256) == [5, 7]  # everything fits: all of it
    assert shortest_first([], 256) == []


class Replay:
    """Prompts in prefill (lengths left) and whether anything decodes, stepped through a
    schedule; a finished prompt starts decoding, as in the batch."""

    def __init__(self, schedule: PrefillSchedule, prompts: dict[str, int], streams: int = 0):
        self.schedule = schedule
        self.left = dict(prompts)
        self.streams = streams
        self.plans: list[tuple[StepPlan, dict[str, int]]] = []
        self.finished: list[str] = []

    def add(self, name: str, tokens: int) -> None:
        self.left[name] = tokens

    def step(self) -> tuple[StepPlan, dict[str, int]]:
        names = list(self.left)
        plan = self.schedule.plan([self.left[n] for n in names], decoding=self.streams > 0)
        given = dict(zip(names, plan.prefill, strict=True))
        done = []
        for name, n in given.items():
            assert 0 <= n <= self.left[name]
            self.left[name] -= n
            if self.left[name] == 0:
                done.append(name)
        for name in done:
            del self.left[name]
            self.finished.append(name)
            self.streams += 1
        self.schedule.ran(sum(given.values()), started=bool(done))
        self.plans.append((plan, given))
        return plan, given


def test_alone_a_prompt_prefills_a_whole_chunk_every_step() -> None:
    replay = Replay(PrefillSchedule(chunk=256, decode_steps=16), {"long": 1000})
    given = [replay.step()[1]["long"] for _ in range(4)]
    assert given == [256, 256, 256, 232]
    assert replay.finished == ["long"]


def test_a_short_prompt_beside_a_long_one_finishes_in_the_next_step() -> None:
    replay = Replay(PrefillSchedule(chunk=256, decode_steps=16), {"long": 2000})
    replay.step()
    replay.add("short", 40)
    plan, given = replay.step()
    assert given == {"long": 0, "short": 40}  # alone: its first token is the next step's
    assert replay.finished == ["short"]
    plan, given = replay.step()
    assert plan.decode and given == {"long": 0}  # that first token, before any chunk
    decodes = 1
    while replay.step()[0].decode:
        decodes += 1
    assert decodes == 3  # the short prompt's 40 tokens were the long one's credit: 40/16
    assert replay.plans[-1][1] == {"long": 256}


def test_prompts_that_fit_in_a_step_go_shortest_first_and_together() -> None:
    replay = Replay(PrefillSchedule(chunk=100, decode_steps=4), {"long": 2000, "a": 70})
    replay.add("b", 20)
    replay.add("c", 50)
    plan, given = replay.step()
    assert given == {"long": 0, "a": 0, "b": 20, "c": 50}  # 70 more would not fit
    plan, given = replay.step()
    assert plan.decode and given == {"long": 0, "a": 70}


@pytest.mark.parametrize("decode_steps", [4, 16])
def test_decodes_run_between_the_chunks_of_a_long_prompt(decode_steps: int) -> None:
    replay = Replay(PrefillSchedule(chunk=128, decode_steps=decode_steps), {"long": 5000}, 1)
    for _ in range(20 * (decode_steps + 1)):
        replay.step()
    kinds = ["decode" if plan.decode else "chunk" for plan, _ in replay.plans]
    chunks = [i for i, kind in enumerate(kinds) if kind == "chunk"]
    assert chunks[0] == 0  # the first chunk is owed at once
    # every chunk is followed by decode_steps decodes, and the long prompt never waits longer
    assert [b - a for a, b in zip(chunks, chunks[1:], strict=False)] == [decode_steps + 1] * (
        len(chunks) - 1
    )
    for plan, given in replay.plans:
        assert given["long"] == (0 if plan.decode else 128)  # a chunk is a whole chunk


def test_a_short_prompt_arriving_while_streams_decode_is_not_held_for_credit() -> None:
    replay = Replay(PrefillSchedule(chunk=128, decode_steps=8), {"long": 5000}, streams=1)
    replay.step()  # the long prompt's owed chunk; its credit is spent
    replay.add("short", 30)
    plan, given = replay.step()
    assert plan.decode and given == {"long": 0, "short": 30}  # beside the decode, at once
    plan, given = replay.step()
    assert plan.decode  # the short one's first token comes out before any chunk runs
    # the short prompt's tokens were charged to the long one's credit: it waits longer
    waits = 0
    while replay.step()[0].decode:
        waits += 1
    assert waits == 8  # 30 of 128 tokens of credit: eight more decode steps, not six


def test_the_long_prompt_progresses_however_many_short_ones_arrive() -> None:
    replay = Replay(PrefillSchedule(chunk=64, decode_steps=4), {"long": 10_000}, streams=1)
    progressed = []
    for i in range(200):
        replay.add(f"short{i}", 50)  # a new short prompt every step
        replay.step()
        progressed.append(10_000 - replay.left["long"])
    gaps = []
    last = 0
    for i, p in enumerate(progressed):
        if p > (progressed[i - 1] if i else 0):
            gaps.append(i - last)
            last = i
    # the short prompts run into a chunk's debt (a few steps), then the decode steps earn
    # back two chunks of credit (2 x 4 steps): the long prompt is never held longer
    assert len(gaps) > 10 and max(gaps) <= 14
    assert all(n.startswith("short") for n in replay.finished)


def test_short_prompts_beside_streams_all_start_with_no_long_prompt_waiting() -> None:
    prompts = {f"p{i}": 64 + 7 * i for i in range(8)}  # more than a chunk in all
    replay = Replay(PrefillSchedule(chunk=256, decode_steps=32), prompts)
    for _ in range(len(prompts) + 2):
        replay.step()
    assert sorted(replay.finished) == sorted(prompts)


def test_a_long_prompt_arriving_after_many_short_ones_is_not_held_by_their_debt() -> None:
    replay = Replay(PrefillSchedule(chunk=256, decode_steps=32), {"warm": 10})
    replay.step()
    for i in range(40):  # 4,000 prompt tokens beside the stream, no long prompt waiting
        replay.add(f"short{i}", 100)
        replay.step()
    replay.add("long", 1000)
    steps = 0
    while "long" in replay.left and steps < 200:
        replay.step()
        steps += 1
    assert "long" not in replay.left
    assert steps <= 4 * 32 + 4  # a chunk every decode_steps steps, as for a fresh schedule


def test_decode_steps_zero_prefills_a_chunk_beside_every_decode() -> None:
    replay = Replay(PrefillSchedule(chunk=64, decode_steps=0), {"long": 1000}, streams=1)
    for _ in range(5):
        plan, given = replay.step()
        assert plan.decode and given["long"] == 64


def test_a_schedule_needs_a_chunk() -> None:
    with pytest.raises(ValueError):
        PrefillSchedule(chunk=0, decode_steps=4)
