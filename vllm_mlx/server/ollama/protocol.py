"""Ollama API request bodies, validated.

Ollama clients send fields this server has no use for (``num_gpu``, ``mirostat``…): Ollama
itself accepts them, so do we, type-checked. The fields that shape generation are checked so
a bad value is a 400 naming it (``options.temperature: Input should be a valid number``)
rather than coerced or passed on.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ...engine.sampling_bounds import INT32_MAX, MAX_STOPS, RepetitionPenalty
from ..sampling_fields import SamplerFields

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class Options(SamplerFields):
    """``options``: Ollama's runtime parameters (a Modelfile's PARAMETER lines)."""

    # -1: no limit (until the context is full), -2: fill the context; 0 as Ollama: no limit
    num_predict: int | None = Field(default=None, ge=-2, le=INT32_MAX)
    num_ctx: int | None = Field(default=None, gt=0, le=INT32_MAX)
    seed: int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)  # negative: random
    stop: list[str] | None = Field(default=None, max_length=MAX_STOPS)
    repeat_penalty: RepetitionPenalty | None = None
    # accepted as Ollama accepts them; they change nothing here (MLX loads the model once,
    # with its own context, batch and threads)
    num_keep: int | None = None
    typical_p: float | None = None
    repeat_last_n: int | None = None
    tfs_z: float | None = None
    mirostat: int | None = None
    mirostat_tau: float | None = None
    mirostat_eta: float | None = None
    penalize_newline: bool | None = None
    numa: bool | None = None
    num_batch: int | None = None
    num_gpu: int | None = None
    main_gpu: int | None = None
    low_vram: bool | None = None
    f16_kv: bool | None = None
    logits_all: bool | None = None
    vocab_only: bool | None = None
    use_mmap: bool | None = None
    use_mlock: bool | None = None
    num_thread: int | None = None


class ToolCallFunction(_Lenient):
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    index: int | None = None


class ToolCall(_Lenient):
    id: str | None = None
    function: ToolCallFunction


class Message(_Lenient):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    thinking: str | None = None
    images: list[str] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None


class FunctionDef(_Lenient):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class Tool(_Lenient):
    type: Literal["function"] = "function"
    function: FunctionDef


# "max" is Ollama's name for the most effort
Think = bool | Literal["low", "medium", "high", "max"]


class GenerationFields(_Lenient):
    """What /api/chat and /api/generate share."""

    model: str | None = None
    # "" and null: free text; "json": any JSON object; an object: that JSON schema
    format: str | dict[str, Any] | None = None
    options: Options | None = None
    stream: bool = True  # Ollama streams unless told not to
    # seconds (a number) or a Go duration ("5m", "1h30m"); negative: forever, 0: unload now
    keep_alive: float | str | None = None
    think: Think | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)


class ChatBody(GenerationFields):
    messages: list[Message] = Field(default_factory=list)  # none: load the model only
    tools: list[Tool] | None = None


class GenerateBody(GenerationFields):
    prompt: str = ""  # empty: load (or with keep_alive 0, unload) the model only
    suffix: str | None = None  # the text after the gap: fill-in-the-middle
    system: str | None = None
    template: str | None = None  # a Go template of Ollama's: refused unless empty
    context: list[int] | None = None  # Ollama's deprecated token memory: refused unless empty
    raw: bool = False
    images: list[str] | None = None


class ShowBody(_Lenient):
    model: str | None = None
    name: str | None = None  # the older field name
    verbose: bool = False
