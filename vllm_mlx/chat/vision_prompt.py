"""A vision-language model's prompt: images written where the client put them, in the
family's own image text, then expanded and tokenized by the model's processor.

Converters leave a marker in a message's text for each image (``request.media_placeholder``);
a text-only model sees the omitted-media placeholder there instead. The image text is found
by rendering the model's template with and without an image part (what its real template
writes for one), so any role — a tool result included — can carry an image.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vllm_mlx.engine.vision import VisionInput, image_key

from ..protocols import Tokenizer
from .images import DecodedImage, ImageError, ImageLimits
from .template import encode_prompt, render_chat
from .template_kwargs import ChatTemplateError

_PROBE = "\x1fprobe\x1f"
_SEEN = 1024  # images whose token counts are remembered


@dataclass(frozen=True)
class VisionPrompter:
    """What turns rendered text and decoded images into a vision prompt for one model."""

    processor: Any
    image_text: str  # what the template writes for one image part
    image_token_id: int  # the id the processor expands an image into
    # encodes a prepared prompt's images in the preparing thread (the batch source's
    # ``encode_ahead``), so the engine's thread only prefills them
    encode_ahead: Callable[[list[int], VisionInput], None] | None = None
    # pixel hash -> the image's token count, for processors that give no patch grid
    seen: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def for_model(
        cls,
        processor: Any,
        tokenizer: Tokenizer,
        encode_ahead: Callable[[list[int], VisionInput], None] | None = None,
    ) -> VisionPrompter:
        token = getattr(processor, "image_token", None)
        if not isinstance(token, str):
            raise ValueError("the processor names no image token")
        token_id = getattr(processor, "image_token_id", None)
        if not isinstance(token_id, int):
            token_id = tokenizer.convert_tokens_to_ids(token)
        # what the processor expands: its image token, or the marker it replaces with the
        # image's tokens (Gemma 3's begin-of-image token)
        markers = [m for m in (token, getattr(processor, "boi_token", None)) if isinstance(m, str)]
        text = template_image_text(tokenizer, markers)
        return cls(processor, text, token_id, encode_ahead)

    def encode(
        self, text: str, images: list[DecodedImage], limits: ImageLimits, tokenizer: Tokenizer
    ) -> tuple[list[int], VisionInput | None]:
        """Token ids (each image expanded) and the images' model input. ``text`` holds one
        image text per image, in order."""
        if not images:
            return encode_prompt(tokenizer, text), None
        bos: str | None = getattr(tokenizer, "bos_token", None)
        add_special = bool(bos) and not text.startswith(bos or "")
        try:
            out = self._process(text, [d.image for d in images], add_special)
        except (ValueError, TypeError, IndexError) as error:
            raise ImageError(
                f"the model's processor refused the images: {error}", "messages"
            ) from None
        ids = [int(t) for t in out["input_ids"][0].tolist()]
        bos_id = getattr(tokenizer, "bos_token_id", None)
        if not add_special and bos_id is not None and ids[:2] == [bos_id, bos_id]:
            ids = ids[1:]  # a processor that added the BOS the rendered text has
        positions = [i for i, t in enumerate(ids) if t == self.image_token_id]
        if len(positions) > limits.max_image_tokens:
            raise ImageError(
                f"the images take {len(positions)} tokens; this server accepts at most "
                f"{limits.max_image_tokens} per request (--max-image-tokens)",
                "messages",
            )
        features = {k: v for k, v in out.items() if k not in ("input_ids", "attention_mask")}
        counts = self._counts(images, features.get("image_grid_thw"))
        digests = [d.digest for d in images]
        vision = VisionInput(
            features=features,
            image_end=min(positions[-1] + 1, len(ids) - 1) if positions else 0,
            key=image_key(ids, self.image_token_id, digests, counts),
            image_tokens=len(positions),
            digests=digests,
        )
        return ids, vision

    def _process(self, text: str, images: list[Any], add_special: bool) -> Any:
        """The processor's output; a processor that hands its keyword arguments to its
        image processor too (LLaVA's) is called without ``add_special_tokens``."""
        try:
            return self.processor(text=[text], images=images, add_special_tokens=add_special)
        except TypeError as error:
            if "add_special_tokens" not in str(error):
                raise
            return self.processor(text=[text], images=images)

    def _counts(self, images: list[DecodedImage], grid: Any) -> list[int]:
        """Each image's tokens, in order: from the patch grid when the processor gives one
        (Qwen-VL), else by expanding the image alone (Idefics3's tiles, Gemma 3's soft
        tokens), remembered by pixel hash so a conversation's images are expanded once."""
        if grid is not None:
            merge = getattr(getattr(self.processor, "image_processor", None), "merge_size", 1)
            return [int(n) // (merge * merge) for n in grid.prod(axis=-1).tolist()]
        counts = []
        for image in images:
            count = self.seen.get(image.digest)
            if count is None:
                out = self._process(self.image_text, [image.image], False)
                ids = out["input_ids"][0].tolist()
                count = sum(1 for t in ids if t == self.image_token_id)
                if len(self.seen) >= _SEEN:
                    self.seen.pop(next(iter(self.seen)))
                self.seen[image.digest] = count
            counts.append(count)
        return counts


def template_image_text(tokenizer: Tokenizer, markers: list[str]) -> str:
    """What the template writes for an image part: the difference between a message with an
    image before its text and one without (when it contains one of the processor's
    ``markers``), else the first marker (the processor's image token) alone."""
    image_token = markers[0]
    try:
        with_image = _probe(tokenizer, [{"type": "image"}, {"type": "text", "text": _PROBE}])
        without = _probe(tokenizer, [{"type": "text", "text": _PROBE}])
    except (ChatTemplateError, TypeError, ValueError):
        return image_token
    head = with_image.split(_PROBE)[0]
    plain = without.split(_PROBE)[0]
    start = next(
        (i for i, (a, b) in enumerate(zip(head, plain, strict=False)) if a != b), len(plain)
    )
    middle = head[start:].strip()
    return middle if any(m in middle for m in markers) else image_token


def _probe(tokenizer: Tokenizer, content: list[dict]) -> str:
    return render_chat(tokenizer, [{"role": "user", "content": content}]).text
