"""How a batch source drafts tokens: its options, and the pieces they make.

A sequence alone speculates with a draft model, else the checkpoint's MTP head
(``speculative``, ``mtp_speculative``); beside others, the batch verifies prompt lookup's
n-gram drafts or, when the model carries one, the MTP head's (``lookup_verify``,
``mtp_batch``). Every path keeps plain decoding's outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache

from .lookup import LookupMode, Throttle
from .lookup_verify import LookupDecoder, NgramDrafter
from .mtp_batch import HiddenTap, MtpDrafter
from .mtp_speculative import Heads, MtpMode, restorable
from .vision import LanguageModel


@dataclass(frozen=True)
class Drafting:
    """A ``ModelBatchSource``'s drafting options (the server's ``--draft-model``,
    ``--num-draft-tokens``, ``--prompt-lookup``, ``--prompt-lookup-tokens``, ``--mtp``,
    ``--mtp-tokens``; ``mtp_heads``: the checkpoint's head, if loaded)."""

    draft_model: Any = None
    num_draft_tokens: int = 4
    prompt_lookup: LookupMode = "off"
    prompt_lookup_tokens: int = 5
    mtp_heads: Heads | None = None
    mtp: MtpMode = "auto"
    mtp_tokens: int = 1

    @property
    def heads(self) -> Heads | None:
        """The MTP head in use: none under ``off`` or beside a draft model."""
        return self.mtp_heads if self.draft_model is None and self.mtp != "off" else None

    def solo(self, model: Any) -> bool:
        """Whether a sequence alone speculates: its caches can be taken back to the
        accepted tokens (trimmed; an MTP head also restores recurrent layers' states)."""
        if self.heads is not None:
            return restorable(make_prompt_cache(model))
        return self.draft_model is not None and all(
            can_trim_prompt_cache(make_prompt_cache(m)) for m in (model, self.draft_model)
        )

    def in_batch(
        self, model: Any, batches: Callable[[], Sequence[Any]]
    ) -> tuple[LookupDecoder | None, HiddenTap | None]:
        """The batch's draft verification (text models only: images shift positions) and,
        for the MTP head, the model the generator calls instead of ``model`` (it keeps the
        hidden states of ``batches()``' forwards)."""
        if isinstance(model, LanguageModel):
            return None, None
        heads, cache = self.heads, make_prompt_cache(model)
        if heads is not None and restorable(cache):
            tap = HiddenTap(model, heads, batches)
            drafter = MtpDrafter(heads, self.mtp, tap, replay_cost(cache))
            return LookupDecoder(self.mtp, self.mtp_tokens, drafter), tap
        if self.prompt_lookup == "off":
            return None, None
        lookup = NgramDrafter(self.prompt_lookup, replay_cost(cache))
        return LookupDecoder(self.prompt_lookup, self.prompt_lookup_tokens, lookup), None

    def mtp_throttle(self, cache: list[Any]) -> Throttle | None:
        """The MTP throttle of a sequence alone on ``cache``: none unless ``auto``."""
        return Throttle(replay=replay_cost(cache)) if self.mtp == "auto" else None


def replay_cost(cache: list[Any]) -> float:
    """``Throttle.replay`` for a model's ``cache``: one decode step where a recurrent
    layer's state is restored and the kept positions run again after a verify kept in
    part, none where every layer trims."""
    return 0.0 if all(c.is_trimmable() for c in cache) else 1.0


PLAIN = Drafting()  # no draft model, no prompt lookup; the MTP head only when one is given
