"""llguidance content constraints: JSON schemas and Lark grammars, masks via numpy bitmasks.

``llguidance.mlx`` applies masks with a Metal kernel, which does not exist on CPU; here the
bitmask is filled in place by the Rust matcher and unpacked with numpy, which works everywhere.
Compiled grammars live in a bounded LRU as pristine matchers; each request gets a deep copy.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import llguidance
import llguidance.hf
import numpy as np

from ..protocols import Tokenizer
from .content_constraint import ContentConstraint
from .errors import ConstraintError
from .tokenizer_cache import eos_token_ids, hf_tokenizer, per_tokenizer, token_count

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

# Whitespace between JSON tokens: at most this many characters in a row.
MAX_WHITESPACE_RUN = 8
JSON_OPTIONS: JsonCompileOptions = {
    "whitespace_pattern": rf"[\x20\x0A\x0D\x09]{{0,{MAX_WHITESPACE_RUN}}}",
}
COMPILED_CACHE_SIZE = 64


@per_tokenizer("llguidance")
def llguidance_tokenizer(tokenizer: Tokenizer) -> llguidance.LLTokenizer:
    """The llguidance view of the vocabulary (≈0.35 s on 49k tokens; cached)."""
    return llguidance.hf.from_tokenizer(
        hf_tokenizer(tokenizer), n_vocab=token_count(tokenizer), eos_token=eos_token_ids(tokenizer)
    )


class CompiledGrammars:
    """Bounded LRU of validated, pristine matchers for one tokenizer, keyed by grammar text."""

    def __init__(self, ll_tokenizer: llguidance.LLTokenizer, capacity: int) -> None:
        self.ll_tokenizer = ll_tokenizer
        self.capacity = capacity
        self._entries: OrderedDict[str, llguidance.LLMatcher] = OrderedDict()
        self._lock = threading.Lock()

    def matcher(self, grammar: str) -> llguidance.LLMatcher:
        """A fresh matcher for ``grammar`` (a deep copy of the cached compiled one)."""
        with self._lock:
            pristine = self._entries.get(grammar)
            if pristine is not None:
                self._entries.move_to_end(grammar)
                return pristine.deep_copy()
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
            grammar, self.ll_tokenizer
        )
        if is_error or messages:
            raise ConstraintError("; ".join(messages))
        pristine = llguidance.LLMatcher(self.ll_tokenizer, grammar, log_level=0)
        if pristine.is_error():
            raise ConstraintError(pristine.get_error())
        with self._lock:
            self._entries[grammar] = pristine
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return pristine.deep_copy()

    def __len__(self) -> int:
        return len(self._entries)


@per_tokenizer("llguidance_grammars")
def compiled_grammars(tokenizer: Tokenizer) -> CompiledGrammars:
    """The compiled-grammar LRU belonging to ``tokenizer``."""
    return CompiledGrammars(llguidance_tokenizer(tokenizer), COMPILED_CACHE_SIZE)


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """The llguidance grammar for a JSON schema, with bounded whitespace."""
    return llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), overrides=JSON_OPTIONS)


class LLGuidanceConstraint(ContentConstraint):
    """A content constraint driven by an llguidance matcher."""

    def __init__(self, tokenizer: Tokenizer, grammar: str, description: str) -> None:
        super().__init__(description, eos_token_ids(tokenizer), token_count(tokenizer))
        self._matcher = compiled_grammars(tokenizer).matcher(grammar)
        self._bitmask = np.zeros((self._vocab + 31) // 32, dtype=np.int32)

    @classmethod
    def for_json_schema(cls, tokenizer: Tokenizer, schema: dict[str, Any]) -> LLGuidanceConstraint:
        try:
            grammar = json_schema_grammar(schema)
        except ValueError as exc:
            raise ConstraintError(f"invalid JSON schema: {exc}") from exc
        return cls(tokenizer, grammar, "json_schema/llguidance")

    @classmethod
    def for_lark(cls, tokenizer: Tokenizer, lark: str, description: str) -> LLGuidanceConstraint:
        """A constraint for a Lark grammar (llguidance dialect); ConstraintError if invalid."""
        try:
            grammar = llguidance.LLMatcher.grammar_from_lark(lark)
        except ValueError as exc:
            raise ConstraintError(f"invalid grammar: {exc}") from exc
        return cls(tokenizer, grammar, description)

    def mismatch(self, content: Sequence[int]) -> str | None:
        """As the base class says, in two calls into the matcher rather than one a token."""
        ids = list(content)
        accepted = self._matcher.validate_tokens(ids)
        if accepted == len(ids):
            self._matcher.consume_tokens(ids)
            return None if self.is_complete() else "the text ends before the grammar does"
        self._matcher.consume_tokens(ids[:accepted])
        why = (self._consume(ids[accepted]) or "token rejected").splitlines()[0]
        return f"token {ids[accepted]} at position {accepted}: {why}"

    def _rollback(self, count: int) -> None:
        if not self._matcher.rollback(count):
            self.give_up(f"rollback of {count} tokens refused: {self._matcher.get_error()}")

    def _consume(self, token: int) -> str | None:
        if self._matcher.consume_token(token):
            return None
        return self._matcher.get_error() or "token rejected"

    def _allowed(self) -> np.ndarray:
        self._matcher.unsafe_compute_mask_ptr(self._bitmask.ctypes.data, self._bitmask.nbytes)
        if self._matcher.is_error():
            self.give_up(self._matcher.get_error())
        return self._bitmask.view(np.uint8).copy()

    def is_complete(self) -> bool:
        return self._matcher.is_accepting()
