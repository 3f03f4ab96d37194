"""The server's options, built once and passed whole: one frozen dataclass per concern,
one field per ``vllm-mlx serve`` flag, named as the flag is (``--tool-call-parser`` is
``tool_call_parser`` everywhere: flag, field, ``models.toml`` key).

``ServeOptions.of(**flags)`` builds the whole tree from the flags by name; a
``models.toml`` entry's settings replace fields of the same names (``RuntimeOptions.
updated``). A new option is a field here and a flag on ``serve`` (``tests/test_options.py``
checks the two correspond one to one), then its use.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from .chat.images import ImageLimits
from .engine.lookup import LookupMode
from .engine.mtp_speculative import MtpMode
from .models.loader import CpuWeights
from .request import RequestLimits

T = TypeVar("T")


@dataclass(frozen=True)
class ModelOptions:
    """How the model is read: its weights, parsers, context and draft model."""

    cpu_weights: CpuWeights = "auto"
    reasoning_parser: str | None = None  # None: detected from the template
    tool_call_parser: str | None = None  # None or "auto": detected
    max_model_len: int | None = None  # may only lower the model's own context
    draft_model: str | None = None  # speculative decoding's draft (same vocabulary)
    num_draft_tokens: int = 4
    mtp: MtpMode = "auto"  # the checkpoint's multi-token-prediction head as the drafter
    mtp_tokens: int = 1


@dataclass(frozen=True)
class EngineOptions:
    """How requests are batched and their KV cache kept."""

    max_num_seqs: int = 8
    max_queue: int = 256
    prefill_step_tokens: int = 512  # the most prompt tokens one step prefills
    decode_steps_per_chunk: int = 32  # while streams run, decode steps per long-prompt chunk
    kv_bits: int | None = None  # 4 or 8: a quantized KV cache
    kv_group_size: int = 64
    prompt_lookup: LookupMode = "auto"  # n-gram drafts from the prompt and output
    prompt_lookup_tokens: int = 5


@dataclass(frozen=True)
class CacheOptions:
    """The prefix cache: memory, the disk copy, what fills it at start-up."""

    prefix_cache_mb: int = 512
    prefix_cache_dir: str | None = None
    prefix_cache_disk_gb: float = 10.0
    warmup_prompt: str | None = None  # the text of a system prompt


@dataclass(frozen=True)
class SamplingOptions:
    """The operator's sampling defaults (``serve --temperature`` …); an unset field takes
    the model's own. The fields are the ones a model's ``generation_config.json`` may set
    (``models.sampling_defaults.SAMPLING_KEYS``), so the operator can override each of them;
    the runtime layers them into the server's ``SamplingParams``."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None

    def overrides(self) -> dict[str, Any]:
        """The fields set, over the model's defaults."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }


@dataclass(frozen=True)
class RequestOptions:
    """What the pipeline decides a request's meaning with (token limits, thinking budget,
    structured-output backend, what a request may carry)."""

    max_tokens: int | None = None  # a request that sets none: until the model stops
    max_tokens_cap: int | None = None
    default_thinking_token_budget: int | None = None
    structured_output_backend: str = "auto"
    allow_request_chat_templates: bool = False
    unsupported_media: Literal["placeholder", "reject"] = "placeholder"
    # the template variables every request starts from (a request's own, and its thinking
    # fields, win): ``--chat-template-kwargs``, or a ``models.toml`` entry's
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RuntimeOptions:
    """Everything one model's runtime is built with (``runtime.build_runtime``)."""

    model: ModelOptions = field(default_factory=ModelOptions)
    engine: EngineOptions = field(default_factory=EngineOptions)
    cache: CacheOptions = field(default_factory=CacheOptions)
    sampling: SamplingOptions = field(default_factory=SamplingOptions)
    request: RequestOptions = field(default_factory=RequestOptions)
    limits: RequestLimits = field(default_factory=RequestLimits)
    images: ImageLimits = field(default_factory=ImageLimits)  # what a vision model reads

    @classmethod
    def of(cls, **values: Any) -> RuntimeOptions:
        """Built from options by name (``RuntimeOptions.of(max_tokens=8)``)."""
        return build(cls, values)

    def updated(self, **values: Any) -> RuntimeOptions:
        """These options with ``values`` (by option name) replacing theirs."""
        return replaced(self, values)


@dataclass(frozen=True)
class ServingOptions:
    """The HTTP server: binding, access, limits and timeouts, the MCP servers."""

    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: str | None = None
    chat_template: str | None = None  # MODEL's template text, instead of its own
    api_key: str | None = None
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    read_timeout: float = 30.0
    max_connections: int = 1024
    max_body_mb: int = 16
    responses_store_mb: int = 128
    timeout: float | None = None
    sse_keepalive: float = 15.0
    mcp_config: str | None = None
    mcp_allow_any_command: bool = False
    log_level: str = "info"
    replay: str | None = None  # a recorded model output answering every request
    estimate: bool = False  # print the fit check's numbers and exit


@dataclass(frozen=True)
class FleetOptions:
    """Several models: where they are found and how many stay loaded."""

    models_dir: tuple[str, ...] = ()
    model_config: str | None = None
    max_loaded_models: int | None = None
    model_ttl: float | None = None
    max_memory_gb: float | None = None
    strict_model_ids: bool = False
    adapter: tuple[str, ...] = ()  # NAME=PATH, on the default model
    adapter_fuse: tuple[str, ...] = ()  # adapters served merged, as models of their own
    max_loaded_adapters: int | None = None  # per model

    @property
    def several(self) -> bool:
        return bool(self.models_dir or self.model_config)


@dataclass(frozen=True)
class DistributedOptions:
    """Sharding the model over mlx.distributed ranks."""

    distributed: Literal["tensor", "pipeline"] | None = None
    ranks: int | None = None
    hosts: str | None = None
    distributed_backend: str = "any"
    collective_timeout: float = 120.0


@dataclass(frozen=True)
class ServeOptions:
    """Every ``vllm-mlx serve`` option."""

    runtime: RuntimeOptions = field(default_factory=RuntimeOptions)
    serving: ServingOptions = field(default_factory=ServingOptions)
    fleet: FleetOptions = field(default_factory=FleetOptions)
    distributed: DistributedOptions = field(default_factory=DistributedOptions)

    @classmethod
    def of(cls, **values: Any) -> ServeOptions:
        """Built from the flags by name; a flag with no field is a TypeError."""
        return build(cls, values)


def _groups(cls: type) -> dict[str, type]:
    """The fields of ``cls`` that are option groups, with their classes."""
    hints = typing.get_type_hints(cls)
    return {
        f.name: hints[f.name]
        for f in dataclasses.fields(cls)
        if dataclasses.is_dataclass(hints[f.name])
    }


def option_names(cls: type) -> list[str]:
    """Every option of ``cls`` by name (its leaf fields, through the groups)."""
    groups = _groups(cls)
    names: list[str] = []
    for f in dataclasses.fields(cls):
        names.extend(option_names(groups[f.name]) if f.name in groups else [f.name])
    return names


def build(cls: type[T], values: dict[str, Any]) -> T:
    """``cls`` with each option of ``values`` in the group that has its name."""
    return replaced(cls(), values)


def replaced(options: T, values: dict[str, Any]) -> T:
    """``options`` with ``values`` (by option name, at any depth) replacing theirs."""
    own = {f.name for f in dataclasses.fields(options)}  # type: ignore[arg-type]
    groups = _groups(type(options))
    changes: dict[str, Any] = {
        name: value for name, value in values.items() if name in own and name not in groups
    }
    for name, group in groups.items():
        mine = {k: v for k, v in values.items() if k in option_names(group)}
        if mine:
            changes[name] = replaced(getattr(options, name), mine)
    unknown = set(values) - set(option_names(type(options)))
    if unknown:
        raise TypeError(f"unknown option(s): {', '.join(sorted(unknown))}")
    return dataclasses.replace(options, **changes)  # type: ignore[type-var]
