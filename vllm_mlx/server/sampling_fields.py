"""The sampling fields whose names the OpenAI, Ollama and llama.cpp bodies share, declared
once with their ranges (`engine.sampling_bounds`).

A surface's body subclasses `SamplerFields` (and annotates a field the API names its own way,
``repeat_penalty``, with the same bounds' types) and parses with ``errors.parse_body``, so an
out-of-range value is a 400 in that API's own error shape.
"""

from __future__ import annotations

from typing import TypedDict

from pydantic import BaseModel, ConfigDict

from ..engine.sampling_bounds import MinP, Penalty, Temperature, TopK, TopP


class SamplerKwargs(TypedDict):
    """The `request.Sampling` fields every surface names alike."""

    temperature: float | None
    top_p: float | None
    top_k: int | None
    min_p: float | None
    presence_penalty: float | None
    frequency_penalty: float | None


class SamplerFields(BaseModel):
    """The sampling fields whose names the OpenAI, Ollama and llama.cpp APIs share."""

    model_config = ConfigDict(extra="allow")

    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    min_p: MinP | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None

    def sampler_kwargs(self) -> SamplerKwargs:
        """These fields as ``Sampling(**...)`` takes them (None: the server's default)."""
        return SamplerKwargs(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            min_p=self.min_p,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
        )
