"""OpenAI request bodies, validated. Unknown fields are accepted and ignored, as clients send
many; known fields are checked so a bad value is a 400 that names it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ...engine.sampling_bounds import MAX_STOPS, RepetitionPenalty
from ...request import Sampling
from ..sampling_fields import SamplerFields


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class ContentPart(_Lenient):
    type: str
    text: str | None = None


class FunctionCall(_Lenient):
    name: str
    arguments: str | dict = "{}"


class CustomCall(_Lenient):
    name: str
    input: str = ""


class ToolCallIn(_Lenient):
    """A call in the assistant's history: a function's, or a custom tool's (its input)."""

    id: str | None = None
    type: Literal["function", "custom"] = "function"
    function: FunctionCall | None = None
    custom: CustomCall | None = None

    @model_validator(mode="after")
    def _has_its_body(self) -> ToolCallIn:
        if getattr(self, self.type) is None:
            raise ValueError(f"a {self.type} tool call needs its {self.type!r} object")
        return self


class ChatMessage(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class FunctionDef(_Lenient):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class CustomDef(_Lenient):
    """A custom tool: free-form text input, optionally shaped by ``format``."""

    name: str = Field(min_length=1)
    description: str | None = None
    format: dict[str, Any] | None = None


class Tool(_Lenient):
    type: Literal["function", "custom"]
    function: FunctionDef | None = None
    custom: CustomDef | None = None

    @model_validator(mode="after")
    def _has_its_body(self) -> Tool:
        if getattr(self, self.type) is None:
            raise ValueError(f"a {self.type} tool needs its {self.type!r} object")
        return self


class SamplingFields(SamplerFields):
    """Fields shared by chat and text completions."""

    model: str | None = None
    max_tokens: int | None = Field(default=None, gt=0)
    n: int = Field(default=1, ge=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    repetition_penalty: RepetitionPenalty | None = None
    logit_bias: dict[str, float] | None = None
    seed: int | None = None
    # Output constraints (one per request; translated by structured.py): OpenAI, vLLM
    # (structured_outputs, guided_*), SGLang (regex, ebnf), llama.cpp (grammar, json_schema).
    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    grammar: str | None = None
    json_schema: dict[str, Any] | str | None = None

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, v: str | list[str] | None) -> list[str]:
        stops = [v] if isinstance(v, str) else list(v or [])
        if len(stops) > MAX_STOPS:
            raise ValueError(f"at most {MAX_STOPS} stop sequences are supported")
        return stops

    @field_validator("logit_bias")
    @classmethod
    def _bias_keys(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        for key, value in (v or {}).items():
            if not key.lstrip("-").isdigit():
                raise ValueError(f"logit_bias keys must be token ids, got {key!r}")
            if not -100 <= value <= 100:
                raise ValueError("logit_bias values must be between -100 and 100")
        return v

    def sampling(self) -> Sampling:
        """The sampling fields this request set (the pipeline fills in the defaults)."""
        return Sampling(
            **self.sampler_kwargs(),
            repetition_penalty=self.repetition_penalty,
            logit_bias={int(k): v for k, v in (self.logit_bias or {}).items()},
            seed=self.seed,
            stop=list(self.stop or []),
            stop_token_ids=list(self.stop_token_ids or []),
        )

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, gt=0)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    thinking_token_budget: int | None = Field(default=None, ge=0)


class CompletionRequest(SamplingFields):
    prompt: str | list[int] | list[str]
    logprobs: int | None = Field(default=None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None
