"""llama.cpp's ``/infill`` body, validated (its other sampling fields are accepted and have
no effect here)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ...request import Sampling

INT32_MAX = 2**31 - 1


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class ExtraFile(_Lenient):
    """A file of context (llama.cpp's ``input_extra`` chunk)."""

    filename: str = Field(default="tmp", max_length=4096)
    text: str = ""


class InfillRequest(_Lenient):
    model: str | None = None
    input_prefix: str = ""
    input_suffix: str = ""
    input_extra: list[ExtraFile] = Field(default_factory=list, max_length=1024)
    prompt: str = ""  # continues the prefix right before the gap
    n_predict: int | None = Field(default=None, ge=-1, le=INT32_MAX)  # -1: no limit
    max_tokens: int | None = Field(default=None, gt=0, le=INT32_MAX)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_k: int | None = Field(default=None, ge=0, le=INT32_MAX)
    top_p: float | None = Field(default=None, gt=0, le=1)
    min_p: float | None = Field(default=None, ge=0, le=1)
    repeat_penalty: float | None = Field(default=None, gt=0, le=10)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    seed: int | None = Field(default=None, ge=-1, le=2**64 - 1)  # -1: random
    stop: list[str] | None = Field(default=None, max_length=16)
    stream: bool = False

    def sampling(self) -> Sampling:
        return Sampling(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            min_p=self.min_p,
            repetition_penalty=self.repeat_penalty,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            seed=self.seed if self.seed is not None and self.seed >= 0 else None,
            stop=list(self.stop or []),
        )

    def limit(self) -> int | None:
        if self.n_predict is not None and self.n_predict > 0:
            return self.n_predict
        return self.max_tokens if self.n_predict is None else None
