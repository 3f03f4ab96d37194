"""Split a lazily loaded mlx-lm model over the group: tensor or pipeline parallel.

Tensor parallelism is mlx-lm's ``Model.shard`` (attention heads and MLP columns split, an
all-sum after each block); pipeline parallelism is mlx-lm's ``model.pipeline`` where the
architecture has it and ``llama_pipeline`` for Llama, which lacks it. Either way every rank
ends with the same logits, which is what lets rank 0 alone decide each token.
"""

from __future__ import annotations

import math
from typing import Any

from .group import Mode
from .llama_pipeline import pipeline_llama


def check_tensor_split(args: Any, world_size: int) -> None:
    """Heads must divide evenly, or ``shard`` would mis-split them; the error names the
    rank counts that work."""
    heads = getattr(args, "num_attention_heads", None)
    kv_heads = getattr(args, "num_key_value_heads", None) or heads
    if not isinstance(heads, int) or not isinstance(kv_heads, int):
        return
    for name, count in (("attention heads", heads), ("key/value heads", kv_heads)):
        if count % world_size:
            common = math.gcd(heads, kv_heads)
            fits = [str(n) for n in range(2, common + 1) if common % n == 0] or ["none"]
            raise ValueError(
                f"tensor parallelism over {world_size} ranks needs the {name} ({count}) to "
                f"divide evenly (rank counts that fit: {', '.join(fits)}); "
                "or use --distributed pipeline"
            )


def shard_model(model: Any, mode: Mode, group: Any) -> str:
    """Shard ``model`` in place; returns how (for the log)."""
    size = group.size()
    if mode == "tensor":
        if not hasattr(model, "shard"):
            raise ValueError(
                f"mlx-lm has no tensor parallelism for {model.model_type} models; "
                "use --distributed pipeline"
            )
        check_tensor_split(getattr(model, "args", None), size)
        model.shard(group)
        return f"mlx-lm tensor parallel over {size} ranks"
    pipeline = getattr(getattr(model, "model", None), "pipeline", None)
    if callable(pipeline):
        pipeline(group)
        return f"mlx-lm pipeline over {size} ranks"
    if getattr(model, "model_type", None) == "llama":
        pipeline_llama(model, group)
        return f"Llama pipeline (vllm-mlx) over {size} ranks"
    raise ValueError(
        f"no pipeline parallelism for {getattr(model, 'model_type', '?')} models; "
        "use --distributed tensor"
    )
