"""The families: every reasoning and tool-call format by parser name, and the markers that
detect a family from a model's chat template, special tokens and name.

To add a family: describe its syntax in `json_calls` or `markup_calls` (by how it writes
arguments; `families.formats` says what each literal means) and its reasoning markers in
`reasoning`, add its detection markers to `detection`, and check `render_call` against a
real model output.
"""

from __future__ import annotations

from ..formats import ReasoningFormat, ToolCallFormat
from .detection import (
    REASONING_MARKERS,
    REASONING_MODEL_NAMES,
    TOOL_CALL_MARKERS,
    TOOL_CALL_MODEL_NAMES,
)
from .json_calls import DEEPSEEK_CALLS_BEGIN, DEEPSEEK_SEP, JSON_CALLS
from .markup_calls import MARKUP_CALLS
from .reasoning import REASONING

REASONING_FORMATS: dict[str, ReasoningFormat] = {f.name: f for f in REASONING}
TOOL_CALL_FORMATS: dict[str, ToolCallFormat] = {f.name: f for f in (*JSON_CALLS, *MARKUP_CALLS)}

# Upstream vllm-mlx's names that try every format: here they ask for detection from the
# model; with no model to detect from (`vllm-mlx parse`) they mean the Hermes fallback.
AUTO_TOOL_NAMES = ("auto", "generic")
FALLBACK_TOOL_FORMAT = "hermes"

__all__ = [
    "AUTO_TOOL_NAMES",
    "DEEPSEEK_CALLS_BEGIN",
    "DEEPSEEK_SEP",
    "FALLBACK_TOOL_FORMAT",
    "REASONING_FORMATS",
    "REASONING_MARKERS",
    "REASONING_MODEL_NAMES",
    "TOOL_CALL_FORMATS",
    "TOOL_CALL_MARKERS",
    "TOOL_CALL_MODEL_NAMES",
]
