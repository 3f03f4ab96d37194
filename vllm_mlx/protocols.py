"""The protocol types every layer shares, defined once (the bottom layer, beside
``families``: it imports nothing of vllm_mlx; not ``types.py``, which ``engine/`` has)."""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx

# mlx-lm's logits processor: (the tokens so far, this step's logits) -> the logits to sample
# from. The penalties, the constraint chain and the thinking-aware phase machine are these.
LogitsProcessor = Callable[[mx.array, mx.array], mx.array]
