"""Which family a model writes, from its chat template, special tokens and name.

Each table is tried in order, most specific first: (marker in the chat template or special
tokens, parser) and (substring of the lower-cased model name, parser). A Seed-OSS template
also holds `<function=`, an Apriel one `<tool_call>`, llama.cpp's Phi-4-mini one
`<|tool_call|>`: their own markers come before those of the families they resemble.
"""

from __future__ import annotations

from ..formats import HARMONY
from .markup_calls import DSML, MINIMAX_NS

REASONING_MARKERS: tuple[tuple[str, str], ...] = (
    ("<|START_THINKING|>", "command_r"),
    ("[BEGIN FINAL RESPONSE]", "apriel"),
    ("◁think▷", "kimi"),
    ("Here is my thought process:", "granite"),
    ("<seed:think>", "seed_oss"),
    ("[THINK]", "mistral"),
    ("<response>", "granite"),  # Granite 3.3: <think>…</think><response>…</response>
    (HARMONY.channel, "harmony"),
    ("<|channel>", "gemma4"),
)
REASONING_MODEL_NAMES: tuple[tuple[str, str], ...] = (
    ("laguna", "poolside_v1"),
    ("poolside", "poolside_v1"),
    ("step-3.5", "step3p5"),
    ("step3.5", "step3p5"),
    ("step-3", "step3"),
    ("step3", "step3"),
    ("nemotron", "nemotron_v3"),
    ("kimi-k2.5", "kimi_k25"),
    ("kimi-k2-thinking", "kimi_k25"),
    ("minimax-m2", "minimax_m2"),
    ("apriel", "apriel"),
    ("command-r", "command_r"),
    ("command-a", "command_r"),
    ("c4ai-command", "command_r"),
    ("granite-3.2", "granite"),
    ("gpt-oss", "harmony"),
    ("gpt_oss", "harmony"),
    ("seed-oss", "seed_oss"),
    ("magistral", "mistral"),
    ("gemma-4", "gemma4"),
    ("gemma4", "gemma4"),
    ("deepseek-r1", "deepseek_r1"),
    ("deepseek_r1", "deepseek_r1"),
    ("glm-4.5", "glm45"),
    ("glm-4.6", "glm45"),
    ("glm-4.7", "glm45"),
    ("qwq", "qwen3"),
    ("qwen3", "qwen3"),
)
TOOL_CALL_MARKERS: tuple[tuple[str, str], ...] = (
    ("<seed:tool_call>", "seed_oss"),
    (DSML, "deepseek_v32"),
    ("<steptml:invoke", "step3"),
    ("<TOOLCALL>", "nemotron"),
    ("<|START_ACTION|>", "command_r"),
    ("<tool_calls>", "apriel"),
    ("<|/tool_call|>", "phi4_mini"),
    ("functools[", "phi4_mini"),
    ("<|tool_call_start|>", "lfm2"),
    ("<|tools_prefix|>", "apertus"),
    (MINIMAX_NS, "minimax_m3"),
    ("<|tool_calls_section_begin|>", "kimi_k2"),
    ("<minimax:tool_call>", "minimax_m2"),
    (HARMONY.channel, "harmony"),
    ("<arg_key>", "glm45"),
    ("<function=", "qwen3_coder"),
    ("<|tool_call>", "gemma4"),
    ("<|tool_call|>", "granite"),
    ("[TOOL_CALLS]", "mistral"),
    ("<|python_start|>", "pythonic"),
    ("<tool_call>", "hermes"),
    # functionary v3.2 writes each call (and text, ">>>all") after ">>>"; its templates also
    # name <|python_tag|>, so this comes before Llama 3's marker
    (">>>", "functionary_v3"),
    ("<|python_tag|>", "llama3_json"),
)
TOOL_CALL_MODEL_NAMES: tuple[tuple[str, str], ...] = (
    ("seed-oss", "seed_oss"),
    ("nemotron", "nemotron"),
    ("command-r", "command_r"),
    ("c4ai-command", "command_r"),
    ("command-a", "command_r"),
    ("apriel", "apriel"),
    ("phi-4-mini", "phi4_mini"),
    ("functionary-small-v3.1", "functionary_v31"),
    ("functionary-medium-v3.1", "functionary_v31"),
    ("functionary", "functionary_v3"),
    ("lfm2", "lfm2"),
    ("step-3.5", "step3p5"),
    ("step3.5", "step3p5"),
    ("step-3", "step3"),
    ("step3", "step3"),
    ("laguna", "poolside_v1"),
    ("poolside", "poolside_v1"),
    ("xlam", "xlam"),
    ("apertus", "apertus"),
    ("minimax-m3", "minimax_m3"),
    ("kimi", "kimi_k2"),
    ("gpt-oss", "harmony"),
    ("minimax-m2", "minimax_m2"),
    ("qwen3-coder", "qwen3_coder"),
    ("qwen3.5", "qwen3_coder"),
    ("deepseek-v3.1", "deepseek_v31"),
    ("deepseek-v3.2", "deepseek_v31"),
    ("deepseek-v3", "deepseek_v3"),
    ("deepseek-r1", "deepseek_v3"),
    ("glm-4.5", "glm45"),
    ("glm-4.6", "glm45"),
    ("glm-4.7", "glm45"),
    ("gemma-4", "gemma4"),
    ("granite", "granite"),
    ("llama-4", "pythonic"),
    ("llama-3", "llama3_json"),
    ("mistral", "mistral"),
    ("magistral", "mistral"),
    ("devstral", "mistral"),
    ("qwen", "hermes"),
)
