"""The n-gram proposer and the per-request throttle of prompt lookup."""

from __future__ import annotations

import itertools

import numpy as np

from vllm_mlx.engine.lookup import NgramIndex, RowLookup, Throttle, row_lookup


def index_of(tokens: list[int]) -> NgramIndex:
    index = NgramIndex(min_n=2, max_n=4)
    index.extend(tokens)
    return index


def test_the_continuation_of_the_latest_earlier_occurrence_is_proposed():
    index = index_of([1, 2, 3, 10, 11, 1, 2, 3, 20, 21, 22, 7, 1, 2, 3])
    assert index.propose(3) == [20, 21, 22]  # the latest earlier "1 2 3", not the first
    assert index.propose(10) == [20, 21, 22, 7, 1, 2, 3]  # up to the end of the sequence


def test_the_longest_matching_suffix_wins():
    # "5 2 3" occurred before "9" and "2 3" before "8": the longer match decides
    index = index_of([5, 2, 3, 9, 0, 2, 3, 8, 0, 5, 2, 3])
    assert index.propose(1) == [9]


def test_no_proposal_without_an_earlier_occurrence_or_below_the_shortest_size():
    assert index_of([1, 2, 3, 4, 5]).propose(4) == []
    assert index_of([1, 9, 1]).propose(4) == []  # only a 1-gram repeats; the minimum is 2
    assert index_of([1, 2, 1, 2]).propose(0) == []


def test_sync_catches_up_and_the_pending_token_is_part_of_the_suffix():
    row = RowLookup(NgramIndex(), throttle=None)
    tokens = [4, 5, 6, 7, 4, 5]
    assert row.proposal(tokens, 6, 2) == [7, 4]
    tokens += [6, 7]  # the pending token and one more entered the cache
    assert row.proposal(tokens, 4, 3) == [5, 6, 7]
    assert row.index.tokens == [*tokens, 4]


def rejected(throttle: Throttle, emitted: int, k_max: int = 5) -> None:
    throttle.record(max(throttle.tokens(emitted, k_max), 1), 0, emitted)


def test_the_throttle_pauses_a_request_whose_proposals_are_rejected_and_doubles_the_pause():
    throttle = Throttle(first_pause=16, max_pause=64)
    assert throttle.tokens(0, 5) == 2  # the prior (alpha 2/3) pays best at two tokens
    rejected(throttle, 1)
    assert throttle.tokens(2, 5) == 1  # alpha fell: one token still pays
    rejected(throttle, 2)  # no k pays now: paused for 16 tokens
    assert throttle.tokens(17, 5) == 0 and throttle.tokens(18, 5) > 0
    rejected(throttle, 19)
    rejected(throttle, 20)  # paused again, twice as long
    assert throttle.tokens(51, 5) == 0 and throttle.tokens(52, 5) > 0
    for emitted in (60, 61, 200, 201):
        rejected(throttle, emitted)
    assert throttle.pause == 64  # capped
    assert throttle.tokens(264, 5) == 0 and throttle.tokens(265, 5) > 0


def test_a_verify_that_pays_again_restores_the_first_pause():
    throttle = Throttle(first_pause=8, max_pause=64)
    for emitted in (1, 2, 11, 12):
        rejected(throttle, emitted)  # paused twice: the next pause would be 32
    assert throttle.pause == 32
    throttle.record(2, 2, emitted=30)
    assert throttle.pause == 0 and throttle.tokens(31, 5) > 0
    emitted = 31
    while throttle.resume_at <= emitted:  # rejected until paused
        rejected(throttle, emitted)
        emitted += 1
    assert throttle.resume_at == emitted - 1 + 8  # the first pause again


def test_accepted_proposals_raise_the_proposal_length_to_the_limit():
    throttle = Throttle()
    asked = []
    for emitted in range(0, 60, 6):
        k = throttle.tokens(emitted, 8)
        asked.append(k)
        throttle.record(k, k, emitted)
    assert asked[0] == 2 and asked[-1] == 8 and asked == sorted(asked)


def test_the_proposal_length_maximises_tokens_per_cost():
    throttle = Throttle(accepted=9.0, rejections=1.0)  # alpha 0.9
    k = throttle.tokens(0, 16)
    alpha, c = 0.9, throttle.cost_per_token
    gain = [sum(alpha**i for i in range(n + 1)) / (1 + c * n) for n in range(1, 17)]
    assert k == 1 + int(np.argmax(gain))


def test_a_replayed_verify_is_counted_in_what_a_proposal_costs():
    """On a hybrid model a verify kept in part runs a second forward: the proposal length
    maximises tokens per cost with that forward weighted by the chance of a rejection,
    and an acceptance that pays where verifies trim pauses the request there."""
    alpha, c = 0.9, Throttle.cost_per_token
    throttle = Throttle(accepted=9.0, rejections=1.0, replay=1.0)
    gain = [
        sum(alpha**i for i in range(n + 1)) / (1 + c * n + (1 - alpha**n)) for n in range(1, 17)
    ]
    assert throttle.tokens(0, 16) == 1 + int(np.argmax(gain))
    assert throttle.tokens(0, 16) < Throttle(accepted=9.0, rejections=1.0).tokens(0, 16)
    trimmed, replayed = Throttle(), Throttle(replay=1.0)
    for emitted in range(0, 40, 2):  # every verify of two keeps one: alpha near one half
        for throttle in (trimmed, replayed):
            if throttle.tokens(emitted, 2):
                throttle.record(2, 1, emitted)
    assert trimmed.tokens(40, 2) > 0
    assert replayed.paused(40)


def test_a_paused_request_proposes_again_once_its_sequence_has_grown_by_the_pause():
    """The pause counts the sequence's tokens, which plain steps keep adding."""
    throttle = Throttle(first_pause=8)
    row = RowLookup(NgramIndex(), throttle)
    tokens = [1, 2, 3, 4] * 8  # the cycle goes on: every position has a hit
    while throttle.resume_at == 0:
        assert row.proposal(tokens, 1, 4)
        row.record(2, 0)  # rejected
        tokens += [1, 2, 3, 4]  # (what the cache holds after the step does not matter)
    cycle = itertools.cycle([1, 2, 3, 4])
    while len(tokens) + 1 < throttle.resume_at:
        pending = next(cycle)
        assert row.proposal(tokens, pending, 4) == []
        tokens.append(pending)
    assert row.proposal(tokens, next(cycle), 4)


def test_modes():
    assert row_lookup("auto").throttle is not None
    assert row_lookup("on").throttle is None


def test_a_split_verify_pays_only_when_the_drafts_outweigh_a_second_forward():
    throttle = Throttle()
    sure = 6.0  # five proposals, all accepted, plus the bonus
    assert throttle.split_pays([sure], 5, plain_rows=1)  # 7 tokens for 3.25 steps' cost
    assert not throttle.split_pays([sure], 5, plain_rows=3)  # 9 for 3.25 against 4 for 1
    assert not throttle.split_pays([throttle.expected(5)], 5, plain_rows=1)  # the prior
    assert throttle.expected(0) == 1.0


def test_lookups_that_find_nothing_pause_the_request_and_a_hit_resets_the_count():
    """Ordinary chat: each lookup reads the step's pending token (waiting for the forward
    in flight), so ``first_pause`` misses in a row pause the request, a miss right after a
    pause pauses it again for twice as long, and a hit starts the count afresh."""
    throttle = Throttle(first_pause=4, max_pause=16)
    for emitted in range(3):
        throttle.looked_up(False, emitted)
    throttle.looked_up(True, 3)
    for emitted in range(4, 7):
        throttle.looked_up(False, emitted)
    assert throttle.tokens(7, 5) > 0  # three misses since the hit: not paused
    throttle.looked_up(False, 7)
    assert throttle.paused(10) and not throttle.paused(11)  # four in a row: 4 tokens
    throttle.looked_up(False, 11)
    assert throttle.paused(18) and not throttle.paused(19)  # the next miss: 8 tokens
    for emitted in (19, 35, 51):
        throttle.looked_up(False, emitted)
    assert throttle.resume_at == 51 + 16  # capped
