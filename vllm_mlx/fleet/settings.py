"""One model's settings from ``models.toml``: the same names, ranges and parser names as
the ``vllm-mlx serve`` flags, checked at start-up so a typo stops the server there (with the
model and field named) rather than at the model's first request."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..chat.template_kwargs import check_template_kwargs
from ..engine.sampling_bounds import MinP, RepetitionPenalty, Temperature, TopK, TopP
from ..reasoning import ReasoningParserManager
from ..tool_parsers import ToolParserManager

# where the model is and what clients call it (the catalog's); every other field is a
# runtime option of the same name (options.RuntimeOptions)
PLACEMENT = ("path", "served_name", "aliases", "chat_template", "draft_model", "download")


class ModelSettings(BaseModel):
    """A ``[models.NAME]`` table. Every field is optional; unset ones take the server's
    flags (and the model's own defaults below those)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    path: str | None = Field(default=None, min_length=1)  # a folder, a .gguf, "default", a name
    # a hub model not yet downloaded: fetched when the server starts, or by its first request
    download: Literal["start", "first_use"] | None = None
    served_name: str | None = Field(default=None, min_length=1, max_length=256)
    aliases: tuple[str, ...] = ()
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    chat_template: str | None = Field(default=None, min_length=1)  # a .jinja file
    chat_template_kwargs: dict[str, Any] | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_tokens_cap: int | None = Field(default=None, ge=1)
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    min_p: MinP | None = None
    repetition_penalty: RepetitionPenalty | None = None
    max_model_len: int | None = Field(default=None, ge=1)
    kv_bits: Literal[4, 8] | None = None
    draft_model: str | None = Field(default=None, min_length=1)  # a catalog name or a model path
    num_draft_tokens: int | None = Field(default=None, ge=1, le=16)
    mtp: Literal["auto", "on", "off"] | None = None
    mtp_tokens: int | None = Field(default=None, ge=1, le=8)
    default_thinking_token_budget: int | None = Field(default=None, ge=0)

    @field_validator("temperature", "top_p", "min_p", "repetition_penalty", mode="before")
    @classmethod
    def _int_is_a_float(cls, value: Any) -> Any:
        """TOML writes ``temperature = 1`` as an integer; strict mode would refuse it."""
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("aliases", mode="before")
    @classmethod
    def _list_is_a_tuple(cls, value: Any) -> Any:
        return tuple(value) if isinstance(value, list) else value

    @field_validator("aliases")
    @classmethod
    def _aliases_not_empty(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not alias.strip() for alias in value):
            raise ValueError("an alias cannot be empty")
        return value

    @field_validator("chat_template_kwargs")
    @classmethod
    def _template_variables(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            if "chat_template" in value:
                raise ValueError("the template is the chat_template field")
            check_template_kwargs(value)
        return value

    @field_validator("reasoning_parser")
    @classmethod
    def _known_reasoning_parser(cls, value: str | None) -> str | None:
        return ReasoningParserManager.resolve(value) if value is not None else None

    @field_validator("tool_call_parser")
    @classmethod
    def _known_tool_parser(cls, value: str | None) -> str | None:
        if value is None or ToolParserManager.is_auto(value):
            return value
        return ToolParserManager.resolve(value)

    def options(self) -> dict[str, Any]:
        """The runtime options set, by name (``RuntimeOptions.updated`` takes them); the
        placement fields are the catalog's."""
        return {
            name: getattr(self, name)
            for name in self.model_fields_set
            if name not in PLACEMENT and getattr(self, name) is not None
        }


class CatalogError(ValueError):
    """A catalog that cannot be served (bad config, clashing names, missing files)."""


class SettingsError(CatalogError):
    """A bad model setting: the message names the file, the model and the field."""


def parse_settings(source: str, name: str, table: Any) -> ModelSettings:
    """``table`` (the ``[models.NAME]`` of ``source``) validated; the first error raised as
    ``SettingsError`` naming the model and field."""
    if not isinstance(table, dict):
        raise SettingsError(f"{source}: model {name!r}: expected a table, got {table!r}")
    try:
        return ModelSettings.model_validate(table)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "?"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            known = ", ".join(ModelSettings.model_fields)
            message = f"unknown setting (known: {known})"
        raise SettingsError(f"{source}: model {name!r}, field {field!r}: {message}") from None
