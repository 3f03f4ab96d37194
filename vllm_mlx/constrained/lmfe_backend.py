"""lm-format-enforcer content constraint for JSON schemas.

Its transformers integration imports torch (and breaks on transformers 5), so the tokenizer
data is built here from the Hugging Face tokenizer directly. Parsers are immutable character
-level state machines, so a compiled schema (the root parser) is shared through a bounded LRU;
each request gets its own ``TokenEnforcer`` whose prefix-keyed states make rollback free.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from typing import Any

import numpy as np
from lmformatenforcer import JsonSchemaParser, TokenEnforcer, TokenEnforcerTokenizerData
from lmformatenforcer.characterlevelparser import CharacterLevelParser

from ..protocols import Tokenizer
from .content_constraint import ContentConstraint
from .errors import ConstraintError
from .masks import pack
from .schema_check import reject_unsupported_for_lmfe
from .tokenizer_cache import (
    eos_token_ids,
    hf_tokenizer,
    per_tokenizer,
    special_token_ids,
    token_count,
    token_texts,
)

MAX_WHITESPACE_RUN = 8
COMPILED_CACHE_SIZE = 64


def _decode(hf: Any, tokens: list[int]) -> str:
    return hf.decode(tokens).rstrip("\ufffd")


@per_tokenizer("lmfe")
def lmfe_tokenizer_data(tokenizer: Tokenizer) -> TokenEnforcerTokenizerData:
    """lm-format-enforcer's vocabulary view (≈0.7 s on 49k tokens; cached per tokenizer).

    Each regular token is decoded after a fixed "0" token so a leading space survives
    decoding; a token whose text grows that way starts a new word. Tokens that are byte
    fragments of a character, or that hold characters no single token spells, are left out
    (lm-format-enforcer desynchronises on them).
    """
    hf = hf_tokenizer(tokenizer)
    size = token_count(tokenizer)
    specials = special_token_ids(tokenizer)
    zero = hf.encode("0", add_special_tokens=False)[-1]
    candidates = [i for i in range(size) if i not in specials]
    decoded = hf.batch_decode([[i] for i in candidates])
    # Byte fragments of multi-byte characters decode to U+FFFD; lm-format-enforcer's
    # character diffing loses track of them, so they are never offered.
    pairs = [(i, text) for i, text in zip(candidates, decoded, strict=True) if "\ufffd" not in text]
    # Its parsers mishandle characters outside the alphabet of single-character tokens.
    alphabet = {text for _, text in pairs if len(text) == 1}
    pairs = [(i, text) for i, text in pairs if set(text) <= alphabet]
    ids = [i for i, _ in pairs]
    alone = [text for _, text in pairs]
    after_zero = hf.batch_decode([[zero, i] for i in ids])
    regular = [
        (i, with_zero[1:], len(with_zero) - 1 > len(single))
        for i, single, with_zero in zip(ids, alone, after_zero, strict=True)
    ]
    return TokenEnforcerTokenizerData(
        regular, functools.partial(_decode, hf), eos_token_ids(tokenizer), False, size
    )


class _ParserCache:
    """Bounded LRU of root parsers keyed by canonical schema text."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, JsonSchemaParser] = OrderedDict()
        self._lock = threading.Lock()

    def parser(self, schema: dict[str, Any]) -> JsonSchemaParser:
        key = json.dumps(schema)  # property order matters to the grammar: never sort
        with self._lock:
            parser = self._entries.get(key)
            if parser is not None:
                self._entries.move_to_end(key)
                return parser
        reject_unsupported_for_lmfe(schema)
        try:
            parser = JsonSchemaParser(schema)
        except Exception as exc:  # pydantic/lmfe raise assorted types for bad schemas
            raise ConstraintError(
                f"JSON schema not supported by lm-format-enforcer: {exc}"
            ) from exc
        with self._lock:
            self._entries[key] = parser
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return parser


parser_cache = _ParserCache(COMPILED_CACHE_SIZE)


class LMFEConstraint(ContentConstraint):
    """A JSON-schema content constraint on lm-format-enforcer.

    Characters are fed to the parser from each token's own text, one parser per position
    (parsers are immutable), instead of lm-format-enforcer's own word-level decode diffing,
    which loses its place on byte-level vocabularies.
    """

    def __init__(self, tokenizer: Tokenizer, schema: dict[str, Any]) -> None:
        super().__init__(
            "json_schema/lm-format-enforcer", eos_token_ids(tokenizer), token_count(tokenizer)
        )
        root = parser_cache.parser(schema)
        self._enforcer = TokenEnforcer(lmfe_tokenizer_data(tokenizer), root)
        # TokenEnforcer installs a fresh config on the root parser; bound whitespace on it.
        root.config.max_consecutive_whitespaces = MAX_WHITESPACE_RUN
        self._texts = token_texts(tokenizer)
        self._parsers: list[CharacterLevelParser] = [root]
        self._allowed_lists: dict[int, Any] = {}

    def _allowed_list(self) -> Any:
        position = len(self._parsers) - 1
        if position not in self._allowed_lists:
            state = TokenEnforcer.OutputTensorState(parser=self._parsers[-1])
            self._enforcer._compute_allowed_tokens((), state)
            self._allowed_lists[position] = state.allowed_tokens
        return self._allowed_lists[position]

    def _rollback(self, count: int) -> None:
        del self._parsers[len(self._parsers) - count :]
        for position in [p for p in self._allowed_lists if p >= len(self._parsers)]:
            del self._allowed_lists[position]

    def _consume(self, token: int) -> str | None:
        if not self._allowed_list().is_token_allowed(token):
            return "token not allowed by the schema here"
        parser = self._parsers[-1]
        try:
            for character in self._texts[token]:
                parser = parser.add_character(character)
        except Exception as exc:  # lm-format-enforcer signals rejection with plain exceptions
            return f"parser rejected the text: {exc}"
        self._parsers.append(parser)
        return None

    def _allowed(self) -> np.ndarray:
        allowed = np.zeros(self._vocab, dtype=bool)
        ids = self._allowed_list().allowed_tokens
        allowed[np.fromiter(ids, dtype=np.int64, count=len(ids))] = True
        return pack(allowed)

    def is_complete(self) -> bool:
        return self._parsers[-1].can_end()
