"""What a caller may hand a chat template: the variables the renderer sets itself (which
``chat_template_kwargs`` may not override) and the error for a template that cannot be used.

No MLX here: ``serve``'s flags check ``--chat-template-kwargs`` with it, and ``--help`` loads
none of the renderer.
"""

from __future__ import annotations

from typing import Any

# Variables the renderer sets itself (and transformers' own arguments): a request's
# ``chat_template_kwargs`` may not override them.
RENDERER_KEYS = frozenset(
    {"messages", "conversation", "tools", "documents", "add_generation_prompt"}
    | {"continue_final_message", "tokenize", "return_dict", "return_tensors", "padding"}
    | {"truncation", "max_length", "tokenizer_kwargs", "return_assistant_tokens_mask"}
    | {"sanitize_control_tokens", "raise_exception", "strftime_now", "namespace", "dict"}
    | {"range", "cycler", "joiner", "lipsum"}
)


class ChatTemplateError(ValueError):
    """The messages cannot be rendered (no template, or the template rejected them)."""


def check_template_kwargs(kwargs: dict[str, Any]) -> None:
    """ChatTemplateError for a variable the renderer sets itself."""
    owned = sorted(key for key in kwargs if key in RENDERER_KEYS)
    if owned:
        raise ChatTemplateError(
            f"chat_template_kwargs.{owned[0]} is set by the server and cannot be given"
        )
