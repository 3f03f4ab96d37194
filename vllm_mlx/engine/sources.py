"""Token sources: where each running request's next token comes from.

The engine owns scheduling, decoding, stops and cancellation; a source runs a set of
sequences and returns one step of tokens for them. ``ModelBatchSource`` is mlx-lm's
continuous-batching generator with a prefix cache; ``ReplayBatchSource`` replays a fixed
sequence at no model cost, to measure the server's own per-token cost and to drive parsers
through the real server with a chosen output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import mlx.core as mx
import numpy as np
from mlx_lm.generate import StopSequences
from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache

from ..protocols import LayerCache, LogitsProcessor
from .adapter_rows import RowRoutedModel, RowTarget
from .drafting import PLAIN, Drafting
from .generation import AdapterChoice
from .kv_quant import quantized_prompt_cache
from .mtp_speculative import MtpSpeculator
from .prefix_cache import PrefixCache, common_prefix, shared_copy
from .sampling import Sampler, computing_with, numerics_of
from .scheduler import FairBatchGenerator, PrefillSchedule
from .speculative import SoloSpeculator
from .vision import LanguageModel, VisionInput, set_shift

# Prompt tokens a new request must share with one still prefilling to wait for it (its
# prefix then comes from the cache) rather than compute them a second time alongside.
SHARED_PREFILL_MIN = 256
# A vision prompt whose cached prefix is shorter than this is prefilled through its last
# image while it is prepared, from its start, off the engine's thread (encode_ahead).
AHEAD_REUSE_MIN = 64


@dataclass
class Step:
    uid: int
    token: int
    logprobs: mx.array | None
    at_limit: bool  # the last token max_tokens allows; the source has dropped the sequence


class TokenSource(Protocol):
    def insert(
        self,
        prompt: list[int],
        *,
        sampler: Sampler,
        processors: list[LogitsProcessor],
        max_tokens: int,
        checkpoints: Sequence[int] = (),
        adapter: AdapterChoice | None = None,
    ) -> tuple[int, int]:
        """Start a sequence; returns (uid, prompt tokens served from a cache).
        ``checkpoints``: prompt offsets (message ends) whose cache is worth keeping;
        ``adapter``: the adapter it runs under (the engine passes it only when set)."""

    def remove(self, uid: int) -> None: ...

    def step(self) -> tuple[list[Step], list[int]]:
        """One step for every running sequence: tokens produced, and uids that ended
        without a token (a replay that ran out)."""

    def reset(self) -> None:
        """Drop every sequence (after a failed step)."""

    def flush(self) -> None:
        """Finish what outlives the sequences: the prefix cache's pending disk writes."""

    @property
    def spec_counts(self) -> tuple[int, int]:
        """Speculative decoding so far: (draft tokens proposed, accepted)."""

    def prefill_to_share(self, prompt: list[int]) -> bool:
        """Whether a sequence still prefilling will put much more of ``prompt`` into the
        prefix cache than it holds now (cache-aware admission: worth waiting for)."""


class SourceDefaults:
    """What a source with no prefix cache and no draft model answers to the engine's
    optional questions (replays, test sources)."""

    def flush(self) -> None:
        """Nothing outlives the sequences."""

    @property
    def spec_counts(self) -> tuple[int, int]:
        return (0, 0)

    def prefill_to_share(self, prompt: list[int]) -> bool:
        return False


class ModelBatchSource:
    def __init__(
        self,
        model: Any,
        *,
        max_num_seqs: int = 8,
        prefill_step_size: int = 512,
        decode_steps_per_chunk: int = 32,
        prefix_cache: PrefixCache | None = None,
        kv_bits: int | None = None,
        kv_group_size: int = 64,
        adapter_rows: RowTarget | None = None,
        drafting: Drafting = PLAIN,
    ):
        self.model = model
        self.numerics = numerics_of(model)
        # Adapters: the generator's model first tells the layers each row's adapter slot.
        self.adapter_rows = adapter_rows
        self._slot_of: dict[int, int] = {}  # generator uid -> adapter slot (adapter rows only)
        self._lane_of: dict[int, str] = {}  # generator uid -> its adapter's prefix-cache lane
        self.max_num_seqs = max_num_seqs
        # Prompt tokens a step prefills at most, and the decode steps between two chunks of
        # a long prompt while other sequences decode (engine/scheduler.py).
        self.prefill_step_size = prefill_step_size
        self.decode_steps_per_chunk = decode_steps_per_chunk
        self.prefix_cache = prefix_cache
        self.kv_bits = kv_bits
        self.kv_group_size = kv_group_size
        if kv_bits is not None:
            self._probe_quantized_cache()
        # Trimmable caches serve any shared prefix already; others need message checkpoints.
        self.checkpointing = prefix_cache is not None and not can_trim_prompt_cache(
            make_prompt_cache(model)
        )
        self._checkpoints: dict[int, list[int]] = {}  # uid -> the prompt up to a checkpoint
        self._arrivals: Callable[[], bool] = lambda: False
        # Speculative decoding (a draft model, else the model's MTP head) runs a sequence
        # alone (uids < 0) until a second one arrives (engine/drafting.py).
        self.drafting = drafting
        self.mtp_heads = drafting.heads
        self.speculating = drafting.solo(model)
        self._solo: SoloSpeculator | MtpSpeculator | None = None
        self._solo_uid = 0
        self._alias: dict[int, int] = {}  # generator uid -> the solo uid it started as
        self._in_batch: set[int] = set()  # generator uids not finished or removed
        self._prefilling: dict[int, np.ndarray] = {}  # generator uid -> prompt, in prefill
        self._awaited: set[int] = set()  # prefilling uids a waiting request shares with
        self._keys: dict[int, list[int]] = {}  # uid -> its prompt as the cache keys it (images)
        self._drafted = self._accepted = 0
        self.handovers = 0  # solo sequences moved into the batch
        # Beside others, the batch verifies prompt lookup's drafts or the MTP head's (its
        # hidden states kept by the model the generator calls, ``_tap``).
        self.lookup, self._tap = drafting.in_batch(model, self._decoding_batches)
        self._gen = self._new_generator()

    def _fresh_cache(self) -> list[LayerCache] | None:
        """A new sequence's cache: quantized with ``kv_bits``, else the generator's default."""
        if self.kv_bits is None:
            return None
        return quantized_prompt_cache(self.model, bits=self.kv_bits, group_size=self.kv_group_size)

    def _probe_quantized_cache(self) -> None:
        """Fail at start-up, not on the first request, when the model's heads cannot be
        quantized in groups of ``kv_group_size``."""
        try:
            mx.eval(self.model(mx.array([[0]]), cache=self._fresh_cache()))
        except ValueError as exc:
            raise ValueError(
                f"--kv-bits {self.kv_bits} --kv-group-size {self.kv_group_size} does not fit "
                f"this model: {exc}"
            ) from None

    @property
    def stream(self) -> Any:
        """The stream the generator computes on (a sharded server's collectives join it)."""
        return self._gen.stream

    def _new_generator(self) -> FairBatchGenerator:
        model = self.model if self._tap is None else self._tap  # adapters' routing outside
        if self.adapter_rows is not None:
            model = RowRoutedModel(model, self.adapter_rows, self._batches, self._slot_of)
        generator = FairBatchGenerator(
            model,
            schedule=PrefillSchedule(self.prefill_step_size, self.decode_steps_per_chunk),
            stop_tokens=None,  # the engine decides stops (stop ids, strings, constraints)
            completion_batch_size=self.max_num_seqs,
        )
        generator.interrupt = self._arrivals
        generator.decode_with = self._lookup_step
        return generator

    def _lookup_step(self, generator: FairBatchGenerator) -> list[Any] | None:
        """A decode step verifying prompt-lookup proposals, or None for a plain one."""
        return self.lookup.step(generator) if self.lookup is not None else None

    def yield_to(self, arrivals: Callable[[], bool]) -> None:
        """Stop a step's prefill at its next model call while ``arrivals()`` (a request
        waits for admission; the engine's own thread asks). Not for a sharded server's
        ranks, whose steps must all do the same work."""
        self._arrivals = arrivals
        self._gen.interrupt = arrivals

    def _decoding_batches(self) -> tuple[Any, Any]:
        return self._gen._generation_batch, self._gen.drafting_batch

    def _batches(self) -> list[Any]:
        """The generator's batches whose calls the adapter rows must place."""
        gen = self._gen
        return [gen._generation_batch, gen.drafting_batch, *gen.prompt_batches]

    def insert(
        self,
        prompt,
        *,
        sampler,
        processors,
        max_tokens,
        checkpoints=(),
        vision=None,
        adapter=None,
    ):
        if adapter is not None and (self.adapter_rows is None or vision is not None):
            raise ValueError("adapters run only on a text model's source that serves them")
        lane = adapter.lane if adapter is not None else None
        key = vision.key if vision is not None else prompt
        ahead = vision is not None and vision.prefilled is not None  # nothing to fetch
        cache, cached = (
            self.prefix_cache.fetch(key, lane)
            if self.prefix_cache is not None and not ahead
            else (None, 0)
        )
        if vision is not None:
            return self._insert_vision(
                prompt, vision, cache, cached, sampler, processors, max_tokens
            )
        if cache is not None and isinstance(self.model, LanguageModel):
            set_shift(cache, 0)  # text positions: no image before them
        if cache is None:
            cache = self._fresh_cache()
        # The generator pauses at segment ends, where the cache holds exactly the prompt
        # up to a checkpoint (the last one before the final token; earlier ones are covered).
        cut = max((c for c in checkpoints if cached < c < len(prompt) - 1), default=None)
        if not self.checkpointing:
            cut = None
        if self.speculating and self._solo is None and not self._in_batch and adapter is None:
            return self._start_solo(prompt, cache, cached, sampler, processors, max_tokens, cut)
        if self._solo is not None:
            self._hand_over()
        segments = [prompt[cached:]] if cut is None else [prompt[cached:cut], prompt[cut:]]
        (uid,) = self._gen.insert_segments(
            [segments],
            max_tokens=[max_tokens],
            caches=[cache] if cache is not None else None,
            all_tokens=[list(prompt[:cached])],
            samplers=[sampler],
            logits_processors=[processors],
            stop_sequences=[StopSequences(None)],
        )
        if cut is not None:
            self._checkpoints[uid] = list(prompt[:cut])
        self._in_batch.add(uid)
        if adapter is not None:
            self._slot_of[uid] = adapter.slot
            self._lane_of[uid] = adapter.lane
        elif self.prefix_cache is not None and not self.checkpointing:
            self._prefilling[uid] = np.asarray(prompt, dtype=np.int32)
        return uid, cached

    def _insert_vision(
        self,
        prompt: list[int],
        vision: VisionInput,
        cache: list[LayerCache] | None,
        cached: int,
        sampler: Sampler,
        processors: list[LogitsProcessor],
        max_tokens: int,
    ) -> tuple[int, int]:
        """A prompt with images: what the cache lacks up to the last image is prefilled from
        the merged image embeddings here, once; the rest joins the batch as text does."""
        if not isinstance(self.model, LanguageModel):
            raise ValueError("this model does not read images")
        if self._solo is not None:
            self._hand_over()
        if vision.prefilled is not None:  # prefilled while the request was prepared
            cache, start, vision.prefilled = vision.prefilled, vision.image_end, None
        else:
            if cache is None:
                cache = self._fresh_cache() or make_prompt_cache(self.model)
            with mx.stream(self._gen.stream):  # the batch's stream, as its own prefill uses
                step = self.prefill_step_size
                start = self.model.prefill_images(prompt, vision, cache, cached, step)
        (uid,) = self._gen.insert_segments(
            [[prompt[start:]]],
            max_tokens=[max_tokens],
            caches=[cache],
            all_tokens=[list(prompt[:start])],
            samplers=[sampler],
            logits_processors=[processors],
            stop_sequences=[StopSequences(None)],
        )
        self._in_batch.add(uid)
        if self.prefix_cache is not None:
            self._keys[uid] = list(vision.key)
        return uid, cached

    def encode_ahead(self, prompt: list[int], vision: VisionInput) -> None:
        """A vision prompt's work done in the calling thread (its preparation, off the
        engine's): nothing when the prefix cache (memory or disk) holds the prompt past its
        last image now (a read-only look; if that changes before admission, admission does
        the work); the
        images' encoding and their span's prefill when it holds less than
        ``AHEAD_REUSE_MIN`` tokens of it (recomputing those beats pausing the batch);
        else the encoding alone (admission prefills from the cached prefix)."""
        if not isinstance(self.model, LanguageModel):
            return
        cache = self.prefix_cache
        key = np.asarray(vision.key, dtype=np.int32)
        served = cache.servable(key) if cache is not None else 0
        if served >= vision.image_end:
            return
        if served < AHEAD_REUSE_MIN:
            fresh = self._fresh_cache() or make_prompt_cache(self.model)
            self.model.prefill_ahead(prompt, vision, fresh, self.prefill_step_size)
            return
        self.model.encode(prompt, vision)

    def _keyed(self, uid: int, tokens: Any) -> list[int]:
        """The tokens a finished sequence's cache is stored under: its prompt's key (image
        tokens as pixel hashes) followed by what it generated."""
        tokens = list(tokens)
        key = self._keys.pop(uid, None)
        return tokens if key is None else key + tokens[len(key) :]

    def prefill_to_share(self, prompt: list[int]) -> bool:
        if not self._prefilling:
            return False
        wanted = np.asarray(prompt, dtype=np.int32)
        assert self.prefix_cache is not None  # prefills are tracked only with a cache
        have = self.prefix_cache.served(wanted)
        for uid, other in self._prefilling.items():
            if min(common_prefix(other, wanted), len(wanted) - 1) - have >= SHARED_PREFILL_MIN:
                self._awaited.add(uid)
                return True
        return False

    def _share_prefills(self, prompt_responses: list[Any]) -> None:
        """A prompt others wait for is stored the moment its prefill ends."""
        for r in prompt_responses:
            if not r.end_of_prompt or self._prefilling.pop(r.uid, None) is None:
                continue
            if r.uid in self._awaited and self.prefix_cache is not None:
                self._awaited.discard(r.uid)
                cache, tokens = self._gen.extract_cache([r.uid])[r.uid]
                self.prefix_cache.store(list(tokens), cache)  # base lane: only it is shared

    def _start_solo(self, prompt, cache, cached, sampler, processors, max_tokens, cut):
        self._solo_uid -= 1
        common = dict(
            prompt=prompt,
            cache=cache if cache is not None else make_prompt_cache(self.model),
            cached=cached,
            sampler=sampler,
            processors=processors,
            max_tokens=max_tokens,
            prefill_step_size=self.prefill_step_size,
        )
        if self.mtp_heads is not None:
            self._solo = MtpSpeculator(
                self.model,
                self.mtp_heads,
                num_draft=self.drafting.mtp_tokens,
                throttle=self.drafting.mtp_throttle(common["cache"]),
                checkpoint=None if cut is None else (cut, self._store_solo_checkpoint),
                **common,
            )
        else:
            self._solo = SoloSpeculator(
                self.model,
                self.drafting.draft_model,
                num_draft=self.drafting.num_draft_tokens,
                **common,
            )
        return self._solo_uid, cached

    def _store_solo_checkpoint(self, tokens: list[int], cache: list[Any]) -> None:
        """A solo prompt's checkpoint: views of its cache, which decoding goes on writing."""
        if self.prefix_cache is not None:
            self.prefix_cache.store(tokens, shared_copy(cache))

    def _hand_over(self) -> None:
        """Move the solo sequence into the batch: its cache, tokens and pending token."""
        solo, self._solo = self._solo, None
        assert solo is not None
        cache, tokens = solo.held()
        (uid,) = self._gen.insert_segments(
            [[[solo.pending]]],
            max_tokens=[solo.remaining],
            caches=[cache],
            all_tokens=[tokens],
            samplers=[solo.sampler],
            logits_processors=[solo.processors],
            stop_sequences=[StopSequences(None)],
        )
        self._alias[uid] = self._solo_uid
        self._in_batch.add(uid)
        self.handovers += 1

    def _end_solo(self) -> None:
        solo, self._solo = self._solo, None
        if solo is not None and self.prefix_cache is not None:
            cache, tokens = solo.held()
            self.prefix_cache.store(tokens, cache)

    def _solo_step(self) -> list[Step]:
        solo = self._solo
        assert solo is not None
        drafted, accepted = solo.drafted, solo.accepted
        decided = solo.step()
        self._drafted += solo.drafted - drafted
        self._accepted += solo.accepted - accepted
        steps = [Step(self._solo_uid, d.token, d.logprobs, False) for d in decided]
        if solo.remaining <= 0:
            steps[-1].at_limit = True
            self._end_solo()
        return steps

    @property
    def spec_counts(self) -> tuple[int, int]:
        if self.lookup is None:
            return self._drafted, self._accepted
        return self._drafted + self.lookup.drafted, self._accepted + self.lookup.accepted

    def remove(self, uid: int) -> None:
        if self._solo is not None and uid == self._solo_uid:
            self._end_solo()
            return
        if uid < 0:
            batch_uid = next((g for g, solo in self._alias.items() if solo == uid), None)
            if batch_uid is None:
                return
            uid = batch_uid
        self._alias.pop(uid, None)
        self._in_batch.discard(uid)
        if self.lookup is not None:
            self.lookup.forget(uid)
        self._prefilling.pop(uid, None)
        self._awaited.discard(uid)
        self._checkpoints.pop(uid, None)
        self._slot_of.pop(uid, None)
        lane = self._lane_of.pop(uid, None)
        caches = self._gen.remove([uid], return_prompt_caches=self.prefix_cache is not None)
        if uid in caches and self.prefix_cache is not None:
            cache, tokens = caches[uid]
            self.prefix_cache.store(self._keyed(uid, tokens), cache, lane)
        self._keys.pop(uid, None)

    def _store_checkpoints(self, prompt_responses: list[Any]) -> None:
        for r in prompt_responses:
            if r.end_of_segment and not r.end_of_prompt and r.uid in self._checkpoints:
                tokens = self._checkpoints.pop(r.uid)
                cache, held = self._gen.extract_cache([r.uid])[r.uid]
                if list(held) == tokens and self.prefix_cache is not None:
                    self.prefix_cache.store(tokens, cache, self._lane_of.get(r.uid))

    def step(self) -> tuple[list[Step], list[int]]:
        with computing_with(self.numerics):  # the model's kernels, whatever else is loaded
            return self._step()

    def _step(self) -> tuple[list[Step], list[int]]:
        if self._solo is not None:
            return self._solo_step(), []
        prompt_responses, responses = self._gen.next()
        if self._checkpoints:
            self._store_checkpoints(prompt_responses)
        if self._prefilling:
            self._share_prefills(prompt_responses)
        steps = []
        for r in responses:
            done = r.finish_reason is not None
            lane = self._lane_of.get(r.uid)
            if done:
                self._in_batch.discard(r.uid)
                if self.lookup is not None:
                    self.lookup.forget(r.uid)
                self._slot_of.pop(r.uid, None)
                self._lane_of.pop(r.uid, None)
            if done and self.prefix_cache is not None:
                self.prefix_cache.store(self._keyed(r.uid, r.all_tokens), r.prompt_cache, lane)
            uid = self._alias.pop(r.uid, r.uid) if done else self._alias.get(r.uid, r.uid)
            steps.append(Step(uid, r.token, r.logprobs, done))
        return steps, []

    def reset(self) -> None:
        self._solo = None
        if self.lookup is not None:
            self.lookup.reset()
        self._alias.clear()
        self._in_batch.clear()
        self._prefilling.clear()
        self._awaited.clear()
        self._checkpoints.clear()
        self._keys.clear()
        self._slot_of.clear()
        self._lane_of.clear()
        self._gen.close()
        self._gen = self._new_generator()

    def flush(self) -> None:
        if self.prefix_cache is not None:
            self.prefix_cache.flush()


class ReplayBatchSource:
    """Every sequence yields ``token_ids`` in order whatever its prompt, then ends."""

    def __init__(self, token_ids: list[int]):
        self.token_ids = list(token_ids)
        self._running: dict[int, list] = {}  # uid -> [position, max_tokens]
        self._next_uid = 0

    def insert(self, prompt, *, sampler, processors, max_tokens, checkpoints=(), adapter=None):
        uid, self._next_uid = self._next_uid, self._next_uid + 1
        self._running[uid] = [0, max_tokens]
        return uid, 0

    def remove(self, uid: int) -> None:
        self._running.pop(uid, None)

    def step(self) -> tuple[list[Step], list[int]]:
        steps, ended = [], []
        for uid, state in list(self._running.items()):
            position, max_tokens = state
            if position >= len(self.token_ids):
                ended.append(uid)
                del self._running[uid]
                continue
            state[0] += 1
            at_limit = state[0] >= max_tokens
            steps.append(Step(uid, self.token_ids[position], None, at_limit))
            if at_limit:
                del self._running[uid]
        return steps, ended

    def reset(self) -> None:
        self._running.clear()

    def flush(self) -> None:
        pass

    @property
    def spec_counts(self) -> tuple[int, int]:
        return 0, 0

    def prefill_to_share(self, prompt: list[int]) -> bool:
        return False
