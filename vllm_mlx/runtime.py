"""Build a ready-to-serve pipeline from a model spec: load, pick parsers, start the engine.

The server and the Python API both start here, so they serve a model the same way.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

from .chat.template import choose_template, special_tokens, template_sources
from .chat.template_kwargs import ChatTemplateError
from .chat.template_probe import probe_text
from .chat.tool_prompt import FALLBACK_TOOL_PARSER
from .chat.vision_prompt import VisionPrompter
from .constrained.tokenizer_cache import token_count
from .distributed.channel import Channel
from .distributed.group import GroupHealth, Sharding, rank_roles
from .distributed.shard import shard_model
from .distributed.source import Follower, LeaderSource, Watchdog
from .engine.cpu import openblas_preloaded
from .engine.drafting import Drafting
from .engine.engine import Engine
from .engine.mtp_speculative import MtpMode
from .engine.prefix_cache import build_prefix_cache
from .engine.sampling import SamplingParams
from .engine.sources import ModelBatchSource, ReplayBatchSource, TokenSource
from .families.formats import ReasoningFormat, ToolCallFormat
from .models.adapter_set import AdapterSet
from .models.adapters import read_adapter
from .models.fit import Estimate, fit_context, model_estimate
from .models.loader import CpuWeights, LoadedModel, load_model, load_tokenizer_only
from .models.lora import fuse_adapter
from .models.mtp_heads import MtpHeads, load_mtp_heads
from .models.sampling_defaults import model_sampling
from .native.layers import kv_namespace
from .options import RuntimeOptions
from .pipeline import Pipeline
from .protocols import Tokenizer
from .reasoning import ReasoningParserManager
from .request import ChatRequest, Sampling
from .tool_parsers import ToolParserManager

log = logging.getLogger(__name__)

DEFAULT_CONTEXT_LENGTH = 4096


@dataclass
class Runtime:
    loaded: LoadedModel
    engine: Engine
    pipeline: Pipeline
    distributed: GroupHealth | None = None  # a sharded server's group, as /health shows it
    adapters: AdapterSet | None = None  # adapters served on this model (models/adapter_set.py)

    def close(self) -> None:
        self.engine.close()
        if isinstance(self.engine.source, LeaderSource):
            self.engine.source.close()  # the followers exit


def build_runtime(
    model: str | None = None,
    options: RuntimeOptions | None = None,
    *,
    chat_template: str | None = None,
    progress: bool = True,
    sharding: Sharding | None = None,
    fuse: str | None = None,
    max_loaded_adapters: int | None = None,
) -> Runtime:
    """``chat_template``: a template's text to use instead of the model's own;
    ``sharding``: this process is rank 0 of a sharded server (``_build_sharded``);
    ``fuse``: an adapter folder merged into this copy of the weights (``--adapter-fuse``;
    no per-request adapters on it); ``max_loaded_adapters``: the bound on
    the adapters loaded on it at once."""
    options = options or RuntimeOptions()
    if sharding is not None:
        return _build_sharded(model, sharding, options)
    options = _fitted(model, options, progress)
    cpu_weights = _weights_for_cpu(options.model.cpu_weights)
    engine, cache = options.engine, options.cache
    loaded = load_model(model, cpu_weights=cpu_weights, progress=progress)
    if loaded.processor is not None and engine.kv_bits and loaded.model.mrope:
        raise ValueError(
            "--kv-bits is not supported for this vision model yet: its M-RoPE rows carry a "
            "rotary shift that quantized caches do not keep"
        )
    adapters = None
    if fuse is not None:
        weights = read_adapter(fuse, loaded.model)
        fuse_adapter(loaded.model, weights)
        if weights.chat_template is not None and chat_template is None:
            chat_template = weights.chat_template
        log.info("fused adapter %s into %s", fuse, loaded.name)
    elif loaded.processor is None:  # a vision model's layers take no adapters yet
        adapters = AdapterSet(loaded.model, max_loaded_adapters)
    loaded = _with_template(loaded, chat_template)
    prefix_cache = build_prefix_cache(
        loaded.model,
        loaded.tokenizer,
        memory_mb=cache.prefix_cache_mb,
        disk_dir=cache.prefix_cache_dir,
        disk_gb=cache.prefix_cache_disk_gb,
        kv_bits=engine.kv_bits,
        kv_group_size=engine.kv_group_size if engine.kv_bits else None,
        **kv_namespace(loaded.kernels),
    )
    draft = options.model.draft_model
    source = ModelBatchSource(
        loaded.model,
        max_num_seqs=engine.max_num_seqs,
        prefill_step_size=engine.prefill_step_tokens,
        decode_steps_per_chunk=engine.decode_steps_per_chunk,
        prefix_cache=prefix_cache,
        kv_bits=engine.kv_bits,
        kv_group_size=engine.kv_group_size,
        adapter_rows=adapters.rows if adapters is not None else None,
        drafting=Drafting(
            draft_model=load_draft(draft, loaded, cpu_weights) if draft else None,
            num_draft_tokens=options.model.num_draft_tokens,
            prompt_lookup=engine.prompt_lookup,
            prompt_lookup_tokens=engine.prompt_lookup_tokens,
            mtp_heads=None if draft else load_mtp(loaded, options.model.mtp),
            mtp=options.model.mtp,
            mtp_tokens=options.model.mtp_tokens,
        ),
    )
    log.info("loaded %s (%s weights) from %s", loaded.name, loaded.weights, loaded.path)
    runtime = _assemble(loaded, source, options)
    runtime.adapters = adapters
    if cache.warmup_prompt:
        warm_up(runtime.pipeline, cache.warmup_prompt)
    return runtime


def estimate_for(
    model: str | None, options: RuntimeOptions, progress: bool = True, download: bool = True
) -> Estimate:
    """The fit check's estimate for ``model`` served with ``options`` (``download=False``:
    a hub model not downloaded yet is estimated from the hub, not fetched)."""
    return model_estimate(
        model,
        cpu_weights=_weights_for_cpu(options.model.cpu_weights),
        max_model_len=options.model.max_model_len,
        default_context=DEFAULT_CONTEXT_LENGTH,
        kv_bits=options.engine.kv_bits,
        kv_group_size=options.engine.kv_group_size,
        prefix_cache_mb=options.cache.prefix_cache_mb,
        progress=progress,
        download=download,
        mtp=options.model.mtp != "off" and options.model.draft_model is None,
    )


def _fitted(model: str | None, options: RuntimeOptions, progress: bool) -> RuntimeOptions:
    """``options`` with the context capped to what fits in memory (logged), or a
    ModelLoadError with the numbers when the model does not fit at all."""
    found = estimate_for(model, options, progress)
    context = fit_context(found, explicit=options.model.max_model_len is not None)
    return options.updated(max_model_len=context) if context < found.context else options


def _weights_for_cpu(cpu_weights: CpuWeights) -> CpuWeights:
    if cpu_weights == "auto" and sys.platform.startswith("linux") and not openblas_preloaded():
        # float32 pays off only when OpenBLAS does the matmuls (engine/cpu.py)
        return "quantized"
    return cpu_weights


def _sharded_source(
    model: str | None, sharding: Sharding, options: RuntimeOptions
) -> tuple[LoadedModel, ModelBatchSource]:
    """This rank's share of the model and its batch source: the same on every rank, with
    no prefix cache (each rank's cache would have to make identical hit and eviction
    decisions; see docs/distributed.md)."""
    loaded = load_model(
        model,
        cpu_weights=_weights_for_cpu(options.model.cpu_weights),
        progress=sharding.rank == 0,
        shard=lambda m: log.info("%s", shard_model(m, sharding.mode, sharding.group)),
    )
    engine = options.engine
    source = ModelBatchSource(
        loaded.model,
        max_num_seqs=engine.max_num_seqs,
        prefill_step_size=engine.prefill_step_tokens,
        decode_steps_per_chunk=engine.decode_steps_per_chunk,
        kv_bits=engine.kv_bits,
        kv_group_size=engine.kv_group_size,
    )
    return loaded, source


def _build_sharded(model: str | None, sharding: Sharding, options: RuntimeOptions) -> Runtime:
    """Rank 0 of a sharded server: the usual pipeline over a ``LeaderSource``, whose
    failure halts the engine (503s) and a watchdog for ranks that hang or exit."""
    if options.model.draft_model:
        raise ValueError("--draft-model is not supported with --distributed")
    if options.model.mtp == "on":
        raise ValueError("--mtp on is not supported with --distributed")
    log.info(
        "sharded over %d ranks: the prefix cache is off (docs/distributed.md)", sharding.world_size
    )
    loaded, source = _sharded_source(model, sharding, options)
    layers = getattr(getattr(loaded.model, "args", None), "num_hidden_layers", 0)
    health = GroupHealth(
        world_size=sharding.world_size,
        backend=sharding.backend,
        mode=sharding.mode,
        rank_roles=rank_roles(sharding.world_size, sharding.mode, layers),
    )
    leader = LeaderSource(source, Channel(sharding.group, source.stream), health)
    runtime = _assemble(loaded, leader, options)
    runtime.distributed = health
    leader.on_failure = runtime.engine.halt
    Watchdog(leader, sharding.timeout, sharding.check)
    if options.cache.warmup_prompt:
        warm_up(runtime.pipeline, options.cache.warmup_prompt)
    return runtime


def build_follower(
    model: str | None, sharding: Sharding, options: RuntimeOptions | None = None
) -> Follower:
    """Every rank but 0 of a sharded server: its share of the model, driven by rank 0."""
    _, source = _sharded_source(model, sharding, options or RuntimeOptions())
    return Follower(source, Channel(sharding.group, source.stream))


def load_draft(spec: str, target: LoadedModel, cpu_weights: CpuWeights):
    """The ``--draft-model``: any model the loader accepts, with the target's vocabulary."""
    draft = load_model(spec, cpu_weights=cpu_weights, progress=False)
    if draft.tokenizer.get_vocab() != target.tokenizer.get_vocab():
        raise ValueError(f"--draft-model {spec} does not share {target.name}'s vocabulary")
    log.info("draft model %s (%s weights)", draft.name, draft.weights)
    return draft.model


def load_mtp(loaded: LoadedModel, mode: MtpMode) -> MtpHeads | None:
    """The checkpoint's multi-token-prediction head under ``--mtp`` (``on`` insists on one)."""
    if mode == "off" or loaded.processor is not None:
        heads = None
    else:
        heads = load_mtp_heads(loaded.path, loaded.model) if loaded.path.is_dir() else None
    if heads is None and mode == "on":
        raise ValueError(f"--mtp on: {loaded.name} carries no multi-token-prediction head")
    if heads is not None:
        log.info("MTP head: %s layout, its drafts verified while one request runs", heads.family)
    return heads


def warm_up(pipeline: Pipeline, system_prompt: str) -> int:
    """Pre-fill the prefix cache with a system prompt, so the first request that starts
    with it computes only what follows; returns the prompt tokens read from a cache (a
    restart with ``--prefix-cache-dir`` reads them from disk)."""
    request = ChatRequest(
        messages=[{"role": "system", "content": system_prompt}],
        sampling=Sampling(temperature=0.0),
        max_tokens=1,
    )
    result = pipeline.complete_sync(pipeline.prepare_chat(request))
    log.info("warm-up: %d system prompt tokens", result.usage.prompt_tokens)
    return result.usage.cached_tokens


def build_replay_runtime(
    text: str,
    model: str | None = None,
    options: RuntimeOptions | None = None,
    *,
    chat_template: str | None = None,
) -> Runtime:
    """A runtime that answers every request with ``text`` (then EOS), tokenized by the
    model's real tokenizer, at no model cost: for measuring the server's own per-token cost
    and for exercising clients and parsers with a chosen output."""
    loaded = _with_template(load_tokenizer_only(model), chat_template)
    token_ids = loaded.tokenizer.encode(text, add_special_tokens=False)
    source = ReplayBatchSource([*token_ids, loaded.tokenizer.eos_token_id])
    return _assemble(loaded, source, options or RuntimeOptions())


def _with_template(loaded: LoadedModel, chat_template: str | None) -> LoadedModel:
    """``loaded`` with ``chat_template`` in place of its own, before anything reads it:
    parser detection, the template profile, the thinking switch and the tool prompt all
    follow the override as they would a shipped template."""
    if chat_template is not None:
        loaded.tokenizer.chat_template = loaded.chat_template = chat_template
    return loaded


def _assemble(loaded: LoadedModel, source: TokenSource, options: RuntimeOptions) -> Runtime:
    """Formats chosen, the engine started on ``source``, the pipeline around it; sampling
    defaults layered: the operator's overrides over the model's own (generation_config.json,
    else its family's row), over neutral."""
    reasoning_format, tool_format = select_formats(
        loaded, options.model.reasoning_parser, options.model.tool_call_parser
    )
    model_defaults = model_sampling(loaded.path)
    sampling = {**model_defaults, **options.sampling.overrides()}
    log.info("sampling defaults: %s (model: %s)", sampling or "neutral", model_defaults or "none")
    engine = Engine(
        source,
        loaded.tokenizer,
        max_num_seqs=options.engine.max_num_seqs,
        max_queue=options.engine.max_queue,
    )
    vision = None
    if loaded.processor is not None:
        ahead = source.encode_ahead if isinstance(source, ModelBatchSource) else None
        vision = VisionPrompter.for_model(loaded.processor, loaded.tokenizer, ahead)
    pipeline = Pipeline(
        engine,
        context_length=context_limit(loaded.context_length, options.model.max_model_len),
        options=options,
        reasoning_format=reasoning_format,
        tool_format=tool_format,
        sampling_defaults=SamplingParams(**sampling),
        vocab_size=vocab_size(loaded),
        vision=vision,
    )
    return Runtime(loaded, engine, pipeline)


def context_limit(model_len: int | None, max_model_len: int | None) -> int:
    """The context the server allows: ``--max-model-len`` when given (it may only lower a
    known model context), else the model's own, else ``DEFAULT_CONTEXT_LENGTH``."""
    if max_model_len is None:
        return model_len or DEFAULT_CONTEXT_LENGTH
    if model_len is not None and max_model_len > model_len:
        raise ValueError(
            f"--max-model-len {max_model_len} exceeds the model's context length {model_len}"
        )
    return max_model_len


@dataclass(frozen=True)
class ParserChoice:
    """The parsers picked for a model, and why (for the log and `vllm-mlx template`)."""

    reasoning: str | None
    tool: str
    reasoning_why: str
    tool_why: str


def choose_parsers(
    model_name: str,
    tokenizer: Tokenizer,
    reasoning: str | None = None,
    tool: str | None = None,
) -> ParserChoice:
    """Parser names: given (validated; an unknown name is a ValueError listing the valid
    ones), else detected from the template's rendering of a probe conversation (markers a
    template assembles from expressions are literal there), else from the template source,
    the special tokens and the model name; for tool calls the Hermes fallback last."""
    specials = set(getattr(tokenizer, "all_special_tokens", []) or [])
    specials |= set(tokenizer.get_added_vocab()) if hasattr(tokenizer, "get_added_vocab") else set()
    source = getattr(tokenizer, "chat_template", None)
    source_text = "\n".join(template_sources(source))
    try:
        rendered = probe_text(
            choose_template(tokenizer, None, [{}], False), special_tokens(tokenizer)
        )
    except ChatTemplateError:
        rendered = ""
    if reasoning is not None:
        reasoning, reasoning_why = ReasoningParserManager.resolve(reasoning), "given"
    elif found := ReasoningParserManager.match("", rendered, ()):
        reasoning, reasoning_why = found, "its marker in the rendered probe conversation"
    elif found := ReasoningParserManager.detect(model_name, source_text, specials):
        reasoning, reasoning_why = found, "the template source, special tokens or model name"
    else:
        reasoning_why = "no reasoning markers found"
    if tool is not None and not ToolParserManager.is_auto(tool):
        tool, tool_why = ToolParserManager.resolve(tool), "given"
    elif found := ToolParserManager.detect("", rendered, ()):
        tool, tool_why = found, "its marker in the rendered probe conversation"
    elif found := ToolParserManager.detect(model_name, source_text, specials):
        tool, tool_why = found, "the template source, special tokens or model name"
    else:
        tool, tool_why = FALLBACK_TOOL_PARSER, "no tool-call markers found: the Hermes fallback"
    return ParserChoice(reasoning, tool, reasoning_why, tool_why)


def vocab_size(loaded: LoadedModel) -> int:
    """How many token ids a request may use: the tokenizer's ids, cut to the model's
    embedding rows when it has fewer (an id past them would index outside the weights)."""
    count = token_count(loaded.tokenizer)
    rows = getattr(getattr(loaded.model, "args", None), "vocab_size", None)
    return min(count, rows) if isinstance(rows, int) and rows > 0 else count


def select_formats(
    loaded: LoadedModel, reasoning: str | None, tool: str | None
) -> tuple[ReasoningFormat | None, ToolCallFormat | None]:
    """The model's family as format objects (`choose_parsers`)."""
    choice = choose_parsers(loaded.name, loaded.tokenizer, reasoning, tool)
    log.info(
        "reasoning parser: %s (%s); tool-call parser: %s (%s)",
        choice.reasoning,
        choice.reasoning_why,
        choice.tool,
        choice.tool_why,
    )
    return (
        ReasoningParserManager.formats[choice.reasoning] if choice.reasoning else None,
        ToolParserManager.formats[choice.tool],
    )
