"""The reasoning formats: the markers around a model's reasoning block, by family."""

from __future__ import annotations

from ..formats import HARMONY, ReasoningFormat

THINK = ReasoningFormat(
    "qwen3",
    "<think>",
    "</think>",
    # `<think>` writers whose template may open the block (the prompt tail says so); the
    # families with names of their own (think, kimi, step3p5, nemotron_v3, deepseek_v31…)
    # follow below
    aliases=("qwen", "qwen3_5", "qwq"),
    call_markers=("<tool_call>",),
)

REASONING: tuple[ReasoningFormat, ...] = (
    THINK,
    ReasoningFormat(
        "deepseek_r1",
        "<think>",
        "</think>",
        starts_in_reasoning=True,
        # templates that always open the block: Qwen3 Thinking-2507, MiniMax-M2
        aliases=("deepseek-r1", "r1", "deepseek", "qwen3_thinking"),
    ),
    ReasoningFormat(
        "glm45", "<think>", "</think>", aliases=("glm4", "glm4_moe", "glm-4.5", "glm47")
    ),
    ReasoningFormat("mistral", "[THINK]", "[/THINK]", aliases=("magistral",)),
    ReasoningFormat(
        "gemma4", "<|channel>", "<channel|>", label="thought", aliases=("gemma", "gemma-4")
    ),
    ReasoningFormat(
        "harmony",
        HARMONY.channel + HARMONY.reasoning_channel + HARMONY.message,
        HARMONY.end,
        aliases=("gpt_oss", "gpt-oss", "openai", "openai_gptoss"),
        channels=HARMONY,
    ),
    ReasoningFormat("seed_oss", "<seed:think>", "</seed:think>", aliases=("seed-oss", "seed")),
    ReasoningFormat("think", "<think>", "</think>", aliases=("think_tags",)),
    ReasoningFormat("poolside_v1", "<think>", "</think>", aliases=("poolside", "laguna")),
    ReasoningFormat("step3p5", "<think>", "</think>", aliases=("step3.5", "step3_5")),
    ReasoningFormat("step3", "<think>", "</think>", aliases=("stepfun",)),
    ReasoningFormat(
        "nemotron_v3", "<think>", "</think>", aliases=("nano_v3", "nemotron3", "nemotron")
    ),
    ReasoningFormat("kimi_k25", "<think>", "</think>", aliases=("kimi_k2", "kimi_thinking")),
    ReasoningFormat(  # Kimi-VL; Kimi K2's thinking models write <think>
        "kimi", "◁think▷", "◁/think▷", aliases=("kimi_vl",), alternatives=(("<think>", "</think>"),)
    ),
    ReasoningFormat(  # the template opened the block (vLLM's "append think")
        "minimax_m2_append_think", "<think>", "</think>", starts_in_reasoning=True
    ),
    ReasoningFormat(
        "minimax_m2",
        "<think>",
        "</think>",
        aliases=("minimax", "minimax_m3"),
    ),
    ReasoningFormat("deepseek_v31", "<think>", "</think>", aliases=("deepseek_v3", "deepseek_v32")),
    ReasoningFormat(
        "command_r",
        "<|START_THINKING|>",
        "<|END_THINKING|>",
        aliases=("cohere", "cohere_cmd", "cohere_command3", "cohere_command4", "command_a"),
        dropped=("<|START_RESPONSE|>", "<|END_RESPONSE|>"),
    ),
    ReasoningFormat(
        "apriel",
        "Here are my reasoning steps:\n",
        "[BEGIN FINAL RESPONSE]",
        starts_in_reasoning=True,  # Apriel 1.6 always reasons; its template opens the block
        aliases=("apriel_thinker", "apriel-1.6"),
        dropped=("[END FINAL RESPONSE]",),  # the answer's closing wrapper, tools or not
    ),
    ReasoningFormat(
        "granite",
        "Here is my thought process:",
        "Here is my response:",
        aliases=("granite3.2", "granite-3.2", "granite3.3", "granite-3.3"),
        alternatives=(("<think>", "</think>"),),  # Granite 3.3
        dropped=("<response>", "</response>"),
    ),
)
