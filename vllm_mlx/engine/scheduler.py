"""Which work each step of the batch runs: running decodes, and prompt chunks.

A step either decodes every running sequence one token (beside it, prompts that finish
within the step), or prefills a chunk of a long prompt. The policy (``PrefillSchedule``) is
a pure function of the prompt lengths left and what ran before, counted in tokens and steps
(never the clock), so every rank of a sharded server makes the same decisions and a test
can replay them:

- prompt tokens go shortest-remaining-first, at most ``chunk`` a step, and prompts that
  finish within the step go alone: a short prompt arriving beside a long one finishes its
  prefill in the next step, and the step after delivers its first token;
- while sequences decode, a prompt too long for one step prefills one chunk per
  ``decode_steps`` decode steps (a credit of ``chunk / decode_steps`` tokens a decode step,
  which prompts that finish at once spend too, down to a chunk's debt): running streams
  keep their pace between chunks, and the long prompt still gets most of the machine.

``FairBatchGenerator`` is mlx-lm's ``BatchGenerator`` run by that policy: each prompt in
prefill is its own one-row batch (no padding to a neighbour's chunk), moved into the shared
generation batch the step its prompt ends. Rows verifying drafts while others take one
token (prompt lookup in a mixed batch) run in a second generation batch beside it,
``drafting_batch``, with a cache of their own: each batch's rows stay aligned at its own
cache end. A chunk is several model calls; the engine's own
source stops it at the next call when a request waits for admission (``interrupt``), the
tokens left over staying owed. Scheduling changes when work runs, never what it computes: a
row's numbers depend neither on its neighbours nor on its chunk sizes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_lm.generate import BatchGenerator, GenerationBatch, PromptProcessingBatch

from ..protocols import LayerCache
from .row_prefill import (
    LeanGenerationBatch,
    held_rows,
    last_logits,
    plain,
    reserve,
    started_generation,
)
from .sampling import Sampler, log_normalize, process_rows, sample_rows

# A sequence's cache taken out of the batch, and the tokens it holds.
Extracted = tuple[list[LayerCache], list[int]]

# Prompt tokens one model call prefills: a step's chunk is several, so a request arriving
# meanwhile waits for one call, not the chunk (per token, 32 cost as 256 do on the CPU).
PREFILL_CALL = 32


def shortest_first(remaining: Sequence[int], budget: int) -> list[int]:
    """Tokens for each prompt out of ``budget``: the fewest remaining first (ties: the
    earlier), each taking all it has left or all that is left of the budget."""
    planned = [0] * len(remaining)
    for i in sorted(range(len(remaining)), key=lambda i: (remaining[i], i)):
        planned[i] = min(remaining[i], budget)
        budget -= planned[i]
        if budget <= 0:
            break
    return planned


@dataclass(frozen=True)
class StepPlan:
    decode: bool  # decode every running sequence one token
    prefill: list[int]  # prompt tokens for each waiting prompt, in the order given


class PrefillSchedule:
    """The policy: given the prompt tokens each waiting prompt has left, what one step runs.

    ``chunk``: the most prompt tokens a step prefills. ``decode_steps``: while sequences
    decode, decode steps per chunk of a prompt that cannot finish at once (0: a chunk every
    step, beside the decode)."""

    def __init__(self, chunk: int, decode_steps: int):
        if chunk < 1 or decode_steps < 0:
            raise ValueError("a prefill chunk is at least one token; decode steps are >= 0")
        self.chunk = chunk
        self.decode_steps = decode_steps
        # Prompt tokens owed to long prompts, at most a chunk (below 0: taken by prompts
        # that finished at once).
        self._credit = float(chunk)
        self._started = False  # the last step moved a sequence into decoding
        self._owed = False  # prompts that finished at once took a chunk: long ones go first

    def plan(self, remaining: Sequence[int], decoding: bool) -> StepPlan:
        planned = shortest_first(remaining, self.chunk)
        finishing = [n if n == r else 0 for n, r in zip(planned, remaining, strict=True)]
        if not decoding:  # nothing to keep pace with: prompts that end go alone, else a chunk
            self._credit, self._owed = float(self.chunk), False
            return StepPlan(decode=False, prefill=finishing if any(finishing) else planned)
        if self.decode_steps == 0:
            return StepPlan(decode=True, prefill=planned)
        # Prompts that end this step go beside the decode (their first token is the next
        # step's) unless they owe long prompts a whole chunk; those get a chunk when due.
        long = [r if r > self.chunk else 0 for r in remaining]
        if not any(long):  # nothing is owed to a long prompt that is not waiting
            self._credit, self._owed = float(self.chunk), False
        if any(finishing) and not self._owed:
            return self._decode_step(finishing)
        if self._credit >= self.chunk and not self._started and any(long):
            self._owed = False
            return StepPlan(decode=False, prefill=shortest_first(long, self.chunk))
        return self._decode_step([0] * len(remaining))

    def _decode_step(self, prefill: list[int]) -> StepPlan:
        self._credit = min(float(self.chunk), self._credit + self.chunk / self.decode_steps)
        return StepPlan(decode=True, prefill=prefill)

    def ran(self, tokens: int, started: bool) -> None:
        """What the planned step did: prompt tokens prefilled (fewer than planned when it
        stopped early for a new arrival) and whether a sequence started decoding."""
        self._credit -= tokens
        if self._credit <= -self.chunk:  # short prompts arriving in a row delay a long one
            self._owed = True  # by a chunk's worth of steps at most
        self._started = started


@dataclass
class _Prefill:
    """One prompt in prefill: its one-row batch and the segments it has left (the last
    holds only the final token, which the first decode step reads)."""

    batch: PromptProcessingBatch
    segments: list[list[int]]
    total: int
    done: int = 0
    plain: bool = False  # the batch's cache is the sequence's plain one (row_prefill)

    @property
    def uid(self) -> int:
        return self.batch.uids[0]

    @property
    def remaining(self) -> int:
        return sum(len(s) for s in self.segments) - 1


def _fewest_left(planned: tuple[_Prefill, int]) -> int:
    return planned[0].remaining


class BatchedRows(GenerationBatch):
    """mlx-lm's generation batch whose step treats the rows together after the model call:
    every row's logit bias in one scatter, one draw for the rows that sample alike
    (``sampling.process_rows`` / ``sample_rows``), instead of a slice, a copy and a sampler
    call per row. Each row's numbers are those of mlx-lm's row-by-row step."""

    def _step(self) -> tuple[list[int], list[mx.array]]:
        inputs: Any = self._next_tokens  # mlx-lm declares the token fields None at first
        self._current_tokens, self._current_logprobs = inputs, self._next_logprobs
        logits = self.model(inputs[:, None], cache=self.prompt_cache)[:, -1, :]
        rows = len(self.uids)
        logits, contexts = process_rows(
            logits, inputs, self.logits_processors or [[]] * rows, self._token_context
        )
        logprobs = log_normalize(logits)
        own: list[Sampler | None] = list(self.samplers) if self.samplers else [None] * rows
        samplers: list[Sampler] = [self.fallback_sampler if s is None else s for s in own]
        if all(s is samplers[0] for s in samplers):
            self._next_tokens = samplers[0](logprobs)
        else:
            self._next_tokens = sample_rows(samplers, logprobs)
        self._next_logprobs = list(logprobs)
        mx.async_eval(self._next_tokens, self._next_logprobs, contexts)
        # the tokens fed this step, now that the next step is under way
        mx.eval(inputs, self._current_logprobs)
        fed = inputs.tolist()
        for held, token in zip(self.tokens, fed, strict=True):
            held.append(token)
        return fed, self._current_logprobs


class DecodeBatch(LeanGenerationBatch, BatchedRows):
    """The batch the generator decodes in: ``LeanGenerationBatch``'s step (no forward after
    every row's last token, a one-row cache out without a copy), whose forward steps are
    ``BatchedRows``' (next in the method order, where the lean step defers to its base)."""


class FairBatchGenerator(BatchGenerator):
    """mlx-lm's continuous batching with its steps chosen by a ``PrefillSchedule``."""

    def __init__(self, model: Any, *, schedule: PrefillSchedule, **kwargs: Any):
        super().__init__(model, prefill_step_size=schedule.chunk, **kwargs)
        self._generation_batch.__class__ = DecodeBatch
        self.schedule = schedule
        self._prefills: list[_Prefill] = []
        self._prefilled = 0  # prompt tokens the current step has prefilled
        # Whether a request waits to be admitted: a step's prefill stops at the next call.
        self.interrupt: Callable[[], bool] = lambda: False
        # A decode step of another kind (prompt lookup's verification): its responses, or
        # None for the plain one-token step.
        self.decode_with: Callable[[FairBatchGenerator], list[Any] | None] = lambda _: None
        # The rows that decode_with moved out of the generation batch to verify their drafts
        # (empty unless it does): decoding, they count as the generation batch's rows do.
        self.drafting_batch = GenerationBatch.empty(self.model, self.sampler)
        self.drafting_batch.__class__ = DecodeBatch  # the batches swap roles

    @property
    def decoding_rows(self) -> int:
        return len(self._generation_batch) + len(self.drafting_batch)

    @property
    def prompt_batches(self) -> list[PromptProcessingBatch]:
        """The batches of the prompts in prefill (one row each)."""
        return [p.batch for p in self._prefills]

    def _admit(self) -> None:
        room = self.completion_batch_size - self.decoding_rows - len(self._prefills)
        while room > 0 and self._unprocessed_sequences:
            uid, segments, max_tokens, cache, tokens, sampler, processors, stops = (
                self._unprocessed_sequences.popleft()
            )
            one_row = plain(cache)
            batch = PromptProcessingBatch(
                model=self.model,
                uids=[uid],
                caches=[] if one_row else [cache],
                tokens=[tokens],
                prefill_step_size=self.prefill_step_size,
                samplers=[sampler],
                fallback_sampler=self.sampler,
                logits_processors=[processors],
                stop_sequences=[stops],
                max_tokens=[max_tokens],
            )
            if one_row:
                batch.prompt_cache = cache
            total = sum(len(s) for s in segments)
            self._prefills.append(_Prefill(batch, [list(s) for s in segments], total, 0, one_row))
            room -= 1

    def _decode(self) -> list[Any]:
        tic = time.perf_counter()
        responses = self.decode_with(self)
        if responses is None:
            responses = self._generation_batch.next()
        self._counters.decode_time += time.perf_counter() - tic
        self._counters.generation_tokens += len(responses)
        self._counters.generation_steps += 1
        return responses

    def _prefill(self, prefill: _Prefill, n: int) -> list[Any]:
        """Up to ``n`` prompt tokens, in calls of at most ``PREFILL_CALL``, not past the
        current segment's end (a checkpoint's cache is read there), stopping early when
        ``interrupt()`` says a request waits to be admitted; the prompt moves into decoding
        when only its last token is left. On a plain cache the call that ends the prompt
        carries the last token too, and its logits give the first token; its cache holds
        the whole prompt's room from its second call on (``reserve``)."""
        head = prefill.segments[0]
        n = min(n, len(head) if len(prefill.segments) > 1 else len(head) - 1)
        ends = prefill.plain and len(prefill.segments) == 2  # the head is the last segment
        logits = None
        done = 0
        while done < n and not (done and self.interrupt()):
            call = min(n - done, PREFILL_CALL)
            tokens = head[done : done + call]
            tic = time.perf_counter()
            if prefill.plain:  # the whole prompt's room at once, not 256 positions a time
                reserve(prefill.batch.prompt_cache, prefill.remaining - done + 1)
            if ends and done + call == len(head):
                logits = last_logits(prefill.batch, tokens + prefill.segments[1])
            else:
                prefill.batch.prompt([tokens])
            self._counters.prompt_time += time.perf_counter() - tic
            done += call
        self._counters.prompt_tokens += done
        self._prefilled += done
        responses = []
        if done:
            prefill.segments[0] = head[done:]
            ended = not prefill.segments[0]
            if ended:
                prefill.segments.pop(0)
            prefill.done += done
            responses.append(
                PromptProcessingBatch.Response(
                    prefill.uid, (prefill.done, prefill.total), ended, False
                )
            )
        if prefill.remaining == 0:
            final = prefill.segments[0]
            if prefill.plain and logits is None:  # only the last token was left
                logits = last_logits(prefill.batch, final)
            self._prefills.remove(prefill)
            if prefill.plain:
                assert logits is not None
                generation = started_generation(prefill.batch, final[0], logits)
            else:
                generation = prefill.batch.generate([final])
            self._generation_batch.extend(generation)
            responses.append(
                PromptProcessingBatch.Response(
                    generation.uids[0], (prefill.total, prefill.total), True, True
                )
            )
        return responses

    def _next(self) -> tuple[list[Any], list[Any]]:
        self._admit()
        decoding = self.decoding_rows > 0
        prefills = list(self._prefills)
        plan = self.schedule.plan([p.remaining for p in prefills], decoding)
        generation_responses = self._decode() if decoding and plan.decode else []
        prompt_responses = []
        self._prefilled = 0
        for prefill, n in sorted(zip(prefills, plan.prefill, strict=True), key=_fewest_left):
            if n > 0 or prefill.remaining == 0:
                prompt_responses += self._prefill(prefill, n)
            if self._prefilled and self.interrupt():
                break
        self.schedule.ran(self._prefilled, started=len(self._prefills) < len(prefills))
        return prompt_responses, generation_responses

    def _find_uids(self, uids: Sequence[int]) -> dict[int, tuple[int, int]]:
        found = super()._find_uids(uids)
        wanted = set(uids)
        for i, prefill in enumerate(self._prefills):
            if prefill.uid in wanted:
                found[prefill.uid] = (1, i)
        for i, uid in enumerate(self.drafting_batch.uids):
            if uid in wanted:
                found[uid] = (3, i)
        return found

    def extract_cache(self, uids: Sequence[int]) -> dict[int, Extracted]:
        results: dict[int, Extracted] = {}
        for uid, (stage, idx) in self._find_uids(uids).items():
            if stage == 1:
                prefill = self._prefills[idx]
                batch = prefill.batch
                rows = held_rows(batch.prompt_cache) if prefill.plain else batch.extract_cache(0)
                results[uid] = (rows, batch.tokens[0])
            elif stage == 3:
                drafting = self.drafting_batch
                results[uid] = (drafting.extract_cache(idx), drafting.tokens[idx])
        rest = [uid for uid in uids if uid not in results]
        return {**super().extract_cache(rest), **results} if rest else results

    def remove(
        self, uids: Sequence[int], return_prompt_caches: bool = False
    ) -> dict[int, Extracted]:
        caches = self.extract_cache(uids) if return_prompt_caches else {}
        wanted = set(uids)
        self._prefills = [p for p in self._prefills if p.uid not in wanted]
        drafting = self.drafting_batch
        if wanted & set(drafting.uids):
            drafting.filter([i for i, uid in enumerate(drafting.uids) if uid not in wanted])
        super().remove(uids)
        return caches

    @property
    def prompt_cache_nbytes(self) -> int:
        held = sum(c.nbytes for p in self._prefills for c in p.batch.prompt_cache)
        held += sum(c.nbytes for c in self.drafting_batch.prompt_cache)
        return int(super().prompt_cache_nbytes) + held
