"""llama.cpp's ``/infill`` body, validated (its other sampling fields are accepted and have
no effect here)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ...engine.sampling_bounds import INT32_MAX, MAX_STOPS, RepetitionPenalty
from ...request import Sampling
from ..sampling_fields import SamplerFields


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class ExtraFile(_Lenient):
    """A file of context (llama.cpp's ``input_extra`` chunk)."""

    filename: str = Field(default="tmp", max_length=4096)
    text: str = ""


class InfillRequest(SamplerFields):
    model: str | None = None
    input_prefix: str = ""
    input_suffix: str = ""
    input_extra: list[ExtraFile] = Field(default_factory=list, max_length=1024)
    prompt: str = ""  # continues the prefix right before the gap
    n_predict: int | None = Field(default=None, ge=-1, le=INT32_MAX)  # -1: no limit
    max_tokens: int | None = Field(default=None, gt=0, le=INT32_MAX)
    repeat_penalty: RepetitionPenalty | None = None
    seed: int | None = Field(default=None, ge=-1, le=2**64 - 1)  # -1: random
    stop: list[str] | None = Field(default=None, max_length=MAX_STOPS)
    stream: bool = False

    def sampling(self) -> Sampling:
        return Sampling(
            **self.sampler_kwargs(),
            repetition_penalty=self.repeat_penalty,
            seed=self.seed if self.seed is not None and self.seed >= 0 else None,
            stop=list(self.stop or []),
        )

    def limit(self) -> int | None:
        if self.n_predict is not None and self.n_predict > 0:
            return self.n_predict
        return self.max_tokens if self.n_predict is None else None
