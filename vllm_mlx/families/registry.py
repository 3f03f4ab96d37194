"""Parser names, aliases and auto-detection, shared by the reasoning and tool-call managers.

Both managers answer the same questions about a table of formats (`families.catalog`):
the canonical names, the aliases people type, which name an alias means (and its format), and
which family a model is from its chat template, special tokens and name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Generic, Protocol, TypeVar


class UnknownParserError(ValueError):
    """A parser name that is neither a canonical name nor an alias."""

    def __init__(self, kind: str, name: str, valid: Iterable[str]) -> None:
        self.valid = sorted(valid)
        super().__init__(f"unknown {kind} parser {name!r}; valid names: {', '.join(self.valid)}")


class _Named(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def aliases(self) -> tuple[str, ...]: ...


F = TypeVar("F", bound=_Named)


def _key(name: str) -> str:
    return name.strip().lower().replace("-", "_")


class ParserRegistry(Generic[F]):
    def __init__(
        self,
        kind: str,
        formats: Mapping[str, F],
        markers: Iterable[tuple[str, str]],
        name_fragments: Iterable[tuple[str, str]],
        auto: tuple[tuple[str, ...], str] | None = None,
    ):
        """``markers``: (text in the template or special tokens, parser); ``name_fragments``:
        (substring of the lower-cased model name, parser); both most specific first.
        ``auto``: (names that ask for detection, the parser they mean without a model)."""
        self.kind = kind
        self.auto_names, self.auto_fallback = auto or ((), "")
        self.formats = formats
        self.markers = tuple(markers)
        self.name_fragments = tuple(name_fragments)

    def names(self) -> list[str]:
        """Canonical names."""
        return sorted(self.formats)

    def aliases(self) -> dict[str, str]:
        """Alias -> canonical name."""
        return {a: f.name for f in self.formats.values() for a in f.aliases}

    def is_auto(self, name: str) -> bool:
        """Does ``name`` ask for detection from the model (upstream's ``auto``)?"""
        return _key(name) in self.auto_names

    def resolve(self, name: str) -> str:
        """The canonical name for a name or alias (an auto name: the fallback family);
        `UnknownParserError` otherwise."""
        wanted = _key(name)
        if wanted in self.auto_names:
            return self.auto_fallback
        for fmt in self.formats.values():
            if wanted in {_key(n) for n in (fmt.name, *fmt.aliases)}:
                return fmt.name
        valid = [*self.names(), *self.aliases(), *self.auto_names]
        raise UnknownParserError(self.kind, name, valid)

    def format(self, name: str) -> F:
        """The format a name or alias stands for; `UnknownParserError` otherwise."""
        return self.formats[self.resolve(name)]

    def match(
        self, model_name: str, chat_template: str | None, special_tokens: Iterable[str]
    ) -> str | None:
        """The family by the tokenizer's markers first, then by the model name."""
        tokens = set(special_tokens)
        template = chat_template or ""
        for marker, parser in self.markers:
            if marker in tokens or marker in template:
                return parser
        lowered = model_name.lower()
        for fragment, parser in self.name_fragments:
            if fragment in lowered:
                return parser
        return None
