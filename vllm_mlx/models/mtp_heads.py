"""Multi-token-prediction heads, read from a checkpoint that ships them.

DeepSeek-V3/R1, GLM-4.5, MiMo and Qwen3-Next are trained with extra "next-n" layers that
predict the token after next from the main model's last hidden state and the next token's
embedding. mlx-lm's ``sanitize`` drops their tensors at load, so this module finds them in
the checkpoint's safetensors (their headers name every tensor), builds the head around the
family's own mlx-lm decoder block and hands the engine's MTP drafter
(``engine/mtp_speculative.py``) what it asks of a head (``engine.mtp_speculative.Heads``).

The layouts, under the published checkpoints' key names (N = ``num_hidden_layers``):

- DeepSeek-V3/R1 (``deepseek_v3``) and GLM-4.5 (``glm4_moe``): ``model.layers.{N}.``
  holds ``enorm`` and ``hnorm`` (RMSNorms of the token embedding and of the hidden state),
  ``eh_proj`` (2D -> D over [embedding, hidden]), a decoder layer of the family (its
  ``self_attn``, ``mlp`` and two norms, built as layer N would be: a MoE layer where the
  model's are), ``shared_head.norm`` and ``shared_head.head`` (the logits) and
  ``embed_tokens``. In the released checkpoints those last two are copies of the main
  model's embedding and ``lm_head`` (several GB for DeepSeek-V3), so, as vLLM and SGLang
  do, the head uses the main model's own arrays instead of reading the copies: a copy is
  recognised from the headers (same shape, dtype and quantization companions) and a sample
  of its rows (first, middle, last: equal bytes); one that differs, or is absent, is
  loaded (when different) or taken from the main model (when absent).
  The block's output feeds the next chained step; the logits are the head over its norm.
- MiMo (``mimo``): ``model.mtp_layers.{i}.`` holds ``hidden_layernorm``,
  ``token_layernorm``, ``input_proj`` over [hidden, embedding], a Qwen2-style block and
  ``final_layernorm``, whose output feeds the next step and, through the main model's
  ``lm_head``, gives the logits.
- Qwen3-Next (``qwen3_next``): ``mtp.`` holds ``pre_fc_norm_embedding`` and
  ``pre_fc_norm_hidden``, ``fc`` over [embedding, hidden], a full-attention decoder layer
  ``layers.{i}.`` (a MoE one in the released models) and ``norm``, whose output feeds the
  next step and, through the main model's ``lm_head``, gives the logits. Its norms are
  stored zero-centred (the weight is 1 + w), as the main model's are; its embedding at
  position 0 is not zeroed (vLLM's ``qwen3_next_mtp.py`` does not).

The hidden state is the main model's output after its final norm (what its ``lm_head``
reads), and the embedding at absolute position 0 is zeroed where the reference
implementations (vLLM's ``deepseek_mtp.py``, ``mimo_mtp.py``) do. Only the first next-n
layer is used; chained drafts run it again on its own output.
"""

from __future__ import annotations

import importlib
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import BatchKVCache, KVCache

NEXTN_OWN = ("enorm", "hnorm", "eh_proj", "shared_head", "embed_tokens")
MIMO_OWN = ("hidden_layernorm", "token_layernorm", "input_proj", "final_layernorm")
QWEN3_NEXT_OWN = ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "fc", "norm")
# Qwen3-Next's block norms its raw checkpoints store zero-centred (mlx-lm's sanitize adds
# the 1 to a MoE checkpoint's; the head's own norms are always stored so)
CENTRED_NORMS = (
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "q_norm.weight",
    "k_norm.weight",
)
MAX_HEADER = 100 << 20  # bytes of a safetensors JSON header: far above any real one
# the next-n layer's tensors that released checkpoints store as copies of the main model's
MAIN_COPIES = {
    "embed_tokens.weight": "model.embed_tokens.weight",
    "shared_head.head.weight": "lm_head.weight",
}
COMPANIONS = (".scales", ".biases", "_scale_inv")  # quantization tensors beside a weight
SAMPLED_ROWS = 3  # rows compared byte for byte to recognise a copy (first, middle, last)


@dataclass(frozen=True)
class Layout:
    """Where a family keeps its first MTP layer and which of its tensors are not the block's."""

    family: str
    own: tuple[str, ...]
    array_mask: bool  # the family's attention takes its causal mask as an array
    fixed: str | None = None  # the first layer's prefix, when not the layer after the model's
    every: str | None = None  # the prefix of all its MTP layers' tensors (with ``fixed``)
    block: str = ""  # where the decoder block's tensors sit under the prefix
    zero_first: bool = True  # the embedding at absolute position 0 is zeroed

    def prefix(self, config: dict[str, Any]) -> str:
        if self.fixed is not None:
            return self.fixed
        return f"model.layers.{config['num_hidden_layers']}."


LAYOUTS = {
    "deepseek_v3": Layout("deepseek_v3", NEXTN_OWN, array_mask=True),
    "glm4_moe": Layout("glm4_moe", NEXTN_OWN, array_mask=False),
    "mimo": Layout("mimo", MIMO_OWN, False, fixed="model.mtp_layers.0.", every="model.mtp_layers."),
    "qwen3_next": Layout(
        "qwen3_next", QWEN3_NEXT_OWN, False, "mtp.", "mtp.", block="layers.0.", zero_first=False
    ),
}


class SharedHead(nn.Module):
    def __init__(self, dims: int, eps: float, head: tuple[int, ...] | None):
        super().__init__()
        self.norm = nn.RMSNorm(dims, eps=eps)
        if head is not None:
            self.head = nn.Linear(head[1], head[0], bias=False)


class NextN(nn.Module):
    """DeepSeek-V3's (and GLM-4.5's) next-n layer."""

    def __init__(self, block: nn.Module, dims: int, eps: float, shapes: dict[str, tuple]):
        super().__init__()
        self.enorm = nn.RMSNorm(dims, eps=eps)
        self.hnorm = nn.RMSNorm(dims, eps=eps)
        self.eh_proj = nn.Linear(2 * dims, dims, bias=False)
        self.block = block
        self.shared_head = SharedHead(dims, eps, shapes.get("shared_head.head.weight"))
        if "embed_tokens.weight" in shapes:  # its own, not a copy of the main model's
            self.embed_tokens = nn.Embedding(*shapes["embed_tokens.weight"])

    def fuse(self, embedded: mx.array, hidden: mx.array) -> mx.array:
        return self.eh_proj(mx.concatenate([self.enorm(embedded), self.hnorm(hidden)], axis=-1))

    def finish(self, x: mx.array) -> mx.array:
        return x

    def normed(self, out: mx.array) -> mx.array:
        return self.shared_head.norm(out)


class MiMoMtp(nn.Module):
    """MiMo's MTP layer."""

    def __init__(self, block: nn.Module, dims: int, eps: float, shapes: dict[str, tuple]):
        super().__init__()
        self.hidden_layernorm = nn.RMSNorm(dims, eps=eps)
        self.token_layernorm = nn.RMSNorm(dims, eps=eps)
        self.input_proj = nn.Linear(2 * dims, dims, bias=False)
        self.block = block
        self.final_layernorm = nn.RMSNorm(dims, eps=eps)

    def fuse(self, embedded: mx.array, hidden: mx.array) -> mx.array:
        joined = [self.hidden_layernorm(hidden), self.token_layernorm(embedded)]
        return self.input_proj(mx.concatenate(joined, axis=-1))

    def finish(self, x: mx.array) -> mx.array:
        return self.final_layernorm(x)

    def normed(self, out: mx.array) -> mx.array:
        return out


class Qwen3NextMtp(nn.Module):
    """Qwen3-Next's MTP layer (``mtp.*``): a full-attention decoder layer over
    ``fc`` of [embedding, hidden], each normed first; ``norm`` gives the output that feeds
    the next step and, through the main model's ``lm_head``, the logits."""

    def __init__(self, block: nn.Module, dims: int, eps: float, shapes: dict[str, tuple]):
        super().__init__()
        self.pre_fc_norm_embedding = nn.RMSNorm(dims, eps=eps)
        self.pre_fc_norm_hidden = nn.RMSNorm(dims, eps=eps)
        self.fc = nn.Linear(2 * dims, dims, bias=False)
        self.block = block
        self.norm = nn.RMSNorm(dims, eps=eps)

    def fuse(self, embedded: mx.array, hidden: mx.array) -> mx.array:
        joined = [self.pre_fc_norm_embedding(embedded), self.pre_fc_norm_hidden(hidden)]
        return self.fc(mx.concatenate(joined, axis=-1))

    def finish(self, x: mx.array) -> mx.array:
        return self.norm(x)

    def normed(self, out: mx.array) -> mx.array:
        return out


class MtpHeads:
    """A loaded model's first MTP layer and the main-model calls the drafter needs."""

    def __init__(self, main: Any, layer: nn.Module, layout: Layout):
        self.main = main
        self.layer = layer
        self.layout = layout
        self.family = layout.family

    def make_cache(self) -> list[Any]:
        return [KVCache()]

    def make_batch_cache(self, rows: int) -> list[Any]:
        """An empty cache for ``rows`` sequences' heads run together."""
        return [BatchKVCache([0] * rows)]

    def hidden(self, inputs: mx.array, cache: list[Any]) -> mx.array:
        """The main model's final hidden states for ``inputs`` (its cache advances)."""
        return self.main.model(inputs, cache)

    def main_logits(self, hidden: mx.array) -> mx.array:
        """The main model's logits from its hidden states: its own ``__call__``'s head."""
        main = self.main
        if getattr(main.args, "tie_word_embeddings", False) and not hasattr(main, "lm_head"):
            return main.model.embed_tokens.as_linear(hidden)
        return main.lm_head(hidden)

    def embedding(self) -> nn.Module:
        """The head's token embedding: its own, or the main model's (shared, not copied)."""
        layer = self.layer
        return layer["embed_tokens"] if "embed_tokens" in layer else self.main.model.embed_tokens

    def step(
        self, hidden: mx.array, tokens: mx.array, cache: list[Any], at_start: bool | Sequence[bool]
    ) -> mx.array:
        """The head's output for positions (``hidden`` [B, L, D], the next ``tokens``
        [B, L]); ``at_start`` (one for all rows, or one a row): the row's first position is
        absolute position 0 (its embedding is zeroed)."""
        layer = self.layer
        embedded = self.embedding()(tokens)
        starts = [at_start] * tokens.shape[0] if isinstance(at_start, bool) else list(at_start)
        if any(starts) and self.layout.zero_first:
            first = mx.array(starts)[:, None] & (mx.arange(tokens.shape[1]) == 0)[None]
            embedded = embedded * mx.logical_not(first)[..., None].astype(embedded.dtype)
        x = layer.fuse(embedded, hidden)
        mask = create_attention_mask(x, cache[0], return_array=self.layout.array_mask)
        return layer.finish(layer.block(x, mask, cache[0]))

    def logits(self, out: mx.array) -> mx.array:
        """The head's logits for its output rows (the token after the next one)."""
        normed = self.layer.normed(out)
        shared = getattr(self.layer, "shared_head", None)
        if shared is not None and "head" in shared:
            return shared.head(normed)
        return self.main_logits(normed)


def tensor_files(path: Path) -> dict[str, Path]:
    """Every tensor name in the checkpoint's safetensors -> the file holding it, from the
    index when there is one, else from each file's header."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {name: path / file for name, file in weight_map.items()}
    names: dict[str, Path] = {}
    for file in sorted(path.glob("*.safetensors")):
        names.update(dict.fromkeys(header_names(file), file))
    return names


def header_names(file: Path) -> list[str]:
    """The tensor names a safetensors file's JSON header lists (no tensor is read)."""
    return list(header_entries(file))


def header_entries(file: Path) -> dict[str, dict[str, Any]]:
    """A safetensors file's header: tensor name -> its ``dtype``, ``shape`` and
    ``data_offsets`` (made absolute in the file)."""
    with file.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        if size > MAX_HEADER:
            raise ValueError(f"{file}: a safetensors header of {size} bytes")
        header = json.loads(f.read(size))
    entries = {}
    for name, entry in header.items():
        if name != "__metadata__":
            start, end = entry["data_offsets"]
            entries[name] = entry | {"data_offsets": (8 + size + start, 8 + size + end)}
    return entries


def carried(tensors: Mapping[str, Any], config: dict[str, Any]) -> set[str]:
    """The names among ``tensors`` that are the checkpoint's MTP layers' (empty when the
    family has no MTP head this module builds)."""
    layout = LAYOUTS.get(config.get("model_type", ""))
    if layout is None:
        return set()
    if layout.every is not None:
        return {n for n in tensors if n.startswith(layout.every)}
    first = int(config["num_hidden_layers"])
    layers = range(first, first + int(config.get("num_nextn_predict_layers") or 1))
    return {n for n in tensors if n.startswith(tuple(f"model.layers.{i}." for i in layers))}


def head_prefix(config: dict[str, Any]) -> str | None:
    """Where the first MTP layer's tensors are named (None: no family this module builds)."""
    layout = LAYOUTS.get(config.get("model_type", ""))
    return None if layout is None else layout.prefix(config)


def main_copies(
    tensors: Mapping[str, tuple[str, Sequence[int]]], config: dict[str, Any]
) -> dict[str, str]:
    """The first MTP layer's tensors whose headers say they are the main model's embedding
    or output head stored again (same dtype and shape, same quantization companions):
    head tensor name -> the main model's. ``tensors``: name -> (dtype, shape)."""
    layout = LAYOUTS.get(config.get("model_type", ""))
    if layout is None or layout.own is not NEXTN_OWN:
        return {}
    prefix = layout.prefix(config)
    found = {}
    for own, main in MAIN_COPIES.items():
        if main not in tensors and config.get("tie_word_embeddings"):
            main = "model.embed_tokens.weight"
        name = prefix + own
        if (
            name in tensors
            and main in tensors
            and _described(tensors, name) == _described(tensors, main)
        ):
            found[name] = main
    return found


def _described(tensors: Mapping[str, tuple[str, Sequence[int]]], name: str) -> list[Any]:
    base = name.removesuffix(".weight")
    names = [name, *(base + c for c in COMPANIONS), *(name + c for c in COMPANIONS)]
    return [(n[len(base) :], tensors[n][0], list(tensors[n][1])) for n in names if n in tensors]


def same_rows(a: tuple[Path, dict[str, Any]], b: tuple[Path, dict[str, Any]]) -> bool:
    """Whether two tensors of one shape and dtype (file, header entry) hold the same bytes
    in SAMPLED_ROWS of their rows: the evidence that one is a copy, without reading either."""
    rows = int(a[1]["shape"][0]) if a[1]["shape"] else 1
    start_a, end_a = a[1]["data_offsets"]
    start_b, end_b = b[1]["data_offsets"]
    if end_a - start_a != end_b - start_b:
        return False
    width = (end_a - start_a) // max(rows, 1)
    with a[0].open("rb") as fa, b[0].open("rb") as fb:
        for row in sorted({0, rows // 2, rows - 1})[:SAMPLED_ROWS]:
            fa.seek(start_a + row * width)
            fb.seek(start_b + row * width)
            if fa.read(width) != fb.read(width):
                return False
    return True


def carried_tensors(path: Path, config: dict[str, Any]) -> dict[str, Path]:
    """The checkpoint's first MTP layer's tensors (name -> file); empty when it has none."""
    layout = LAYOUTS.get(config.get("model_type", ""))
    if layout is None:
        return {}
    prefix = layout.prefix(config)
    later = prefix + "layers." if layout.block else None  # the layers after the first
    return {
        n: f
        for n, f in tensor_files(path).items()
        if n.startswith(prefix)
        and (later is None or not n.startswith(later) or n.startswith(prefix + layout.block))
    }


def load_mtp_heads(path: Path, main: Any) -> MtpHeads | None:
    """The MTP head the checkpoint at ``path`` carries for ``main`` (mlx-lm's model of it),
    or None when it carries none (a converted checkpoint: mlx-lm's conversion drops them)."""
    if not (path / "config.json").is_file():
        return None
    config = json.loads((path / "config.json").read_text())
    found = carried_tensors(path, config)
    if not found:
        return None
    layout = LAYOUTS[config["model_type"]]
    prefix = layout.prefix(config)
    for copy in copies_of_main(path, config):
        base = copy.removesuffix(".weight")
        for name in (copy, *(base + c for c in COMPANIONS), *(copy + c for c in COMPANIONS)):
            found.pop(name, None)  # never read: the head uses the main model's array
    raw: dict[str, mx.array] = {}
    for file in sorted(set(found.values())):
        arrays = mx.load(str(file))  # lazy: only the head's tensors are ever read
        assert isinstance(arrays, dict)
        raw.update({n[len(prefix) :]: arrays[n] for n in found if found[n] == file})
    layer = _build(main, layout, {n: tuple(a.shape) for n, a in raw.items()})
    layer.load_weights(list(_block_weights(main, layout, raw).items()), strict=True)
    norm = main.model.norm.weight
    layer.set_dtype(norm.dtype)  # the main model's float type (float32 on the CPU path)
    mx.eval(layer.parameters())
    return MtpHeads(main, layer, layout)


def copies_of_main(path: Path, config: dict[str, Any]) -> list[str]:
    """The head's tensors that are copies of the main model's (``main_copies`` by the
    headers, confirmed by ``same_rows``)."""
    files = tensor_files(path)
    entries: dict[str, dict[str, Any]] = {}
    for file in sorted(set(files.values())):
        entries.update(header_entries(file))
    described = {n: (e["dtype"], e["shape"]) for n, e in entries.items()}
    pairs = main_copies(described, config).items()
    return [n for n, m in pairs if same_rows((files[n], entries[n]), (files[m], entries[m]))]


def _build(main: Any, layout: Layout, shapes: dict[str, tuple[int, ...]]) -> nn.Module:
    family = importlib.import_module(type(main).__module__)  # the model's own mlx-lm module
    args = main.args
    if layout.family == "qwen3_next":
        block = family.Qwen3NextDecoderLayer(args, args.full_attention_interval - 1)
        if f"{layout.block}mlp.experts.0.up_proj.weight" in shapes:  # a MoE one, as released
            block.mlp = family.Qwen3NextSparseMoeBlock(args)
        else:
            block.mlp = family.Qwen3NextMLP(args.hidden_size, args.intermediate_size)
    elif layout.family == "deepseek_v3":
        block = family.DeepseekV3DecoderLayer(args, args.num_hidden_layers)
    elif layout.family == "glm4_moe":
        block = family.DecoderLayer(args, args.num_hidden_layers)
    else:
        block = family.TransformerBlock(args)
    kinds = {"mimo": MiMoMtp, "qwen3_next": Qwen3NextMtp}
    kind = kinds.get(layout.family, NextN)
    return kind(block, args.hidden_size, args.rms_norm_eps, shapes)


def _block_weights(main: Any, layout: Layout, raw: dict[str, mx.array]) -> dict[str, mx.array]:
    """The head's tensors under its module's names. They go through the family's own
    ``sanitize`` as layer 0's (experts stacked, DeepSeek's fp8 dequantized and its
    ``kv_b_proj`` split, Qwen3-Next's zero-centred norms given their 1), so they take the
    form mlx-lm gives every other layer."""
    start = "model.layers.0."
    named = {start + n.removeprefix(layout.block): a for n, a in raw.items()}
    sanitized = main.sanitize(named) if hasattr(main, "sanitize") else named
    weights = {}
    for name, array in sanitized.items():
        local = name[len(start) :]
        own = local.split(".", 1)[0] in layout.own
        if layout.family == "qwen3_next" and (
            (own and local != "fc.weight") or (sanitized is named and local.endswith(CENTRED_NORMS))
        ):
            # a raw checkpoint's (only those carry the head): its own norms are always
            # zero-centred, the block's too unless sanitize gave them their 1 (MoE ones)
            array = array + 1.0
        weights[local if own else f"block.{local}"] = array
    return weights
