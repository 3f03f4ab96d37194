"""Vision-language models in the engine: the admission-time image prefill computes what
mlx-vlm's own forward pass computes, a vision request batched with text requests decodes
what each decodes alone, and a second turn with the same image is served from the prefix
cache (and answers what it answers cold)."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache
from tiny_vision import FAMILIES, png_data_url, tiny_vlm
from vision_chats import Img, request, run_alone, together, user

from vllm_mlx.chat.images import ImageLimits, read_image
from vllm_mlx.chat.template import render_chat
from vllm_mlx.chat.vision_prompt import VisionPrompter
from vllm_mlx.engine import sources
from vllm_mlx.engine.vision import ShiftedBatchKVCache, ShiftedKVCache
from vllm_mlx.models.loader import load_model
from vllm_mlx.options import RuntimeOptions
from vllm_mlx.runtime import build_runtime

RED, GREEN = (230, 20, 20), (10, 200, 40)


@pytest.fixture(scope="module", params=FAMILIES)
def runtime(request):
    runtime = build_runtime(
        str(tiny_vlm(request.param)), RuntimeOptions.of(max_num_seqs=4), progress=False
    )
    yield runtime
    runtime.close()


@pytest.mark.parametrize("step", [256, 5])
@pytest.mark.parametrize("family", FAMILIES)
def test_image_prefill_and_decode_match_mlx_vlm(family, step):
    """Two images: the logits after the split prefill (images from merged embeddings, in
    one chunk or chunks of 5 rows, then text through the batch path) and after one decoded
    token equal mlx-vlm's full forward."""
    loaded = load_model(str(tiny_vlm(family)), progress=False)
    prompter = VisionPrompter.for_model(loaded.processor, loaded.tokenizer)
    limits = ImageLimits()
    images = [
        read_image(data=None, url=png_data_url(color), param="p", limits=limits)
        for color in (RED, GREEN)
    ]
    content = f"A {prompter.image_text} and B {prompter.image_text}: which is red?"
    text = render_chat(loaded.tokenizer, [{"role": "user", "content": content}]).text
    ids, vision = prompter.encode(text, images, limits, loaded.tokenizer)
    assert vision is not None and 0 < vision.image_end < len(ids)
    vlm = loaded.model.vlm

    def reference(tokens):
        vlm.language_model.__dict__.pop("_rope_deltas", None)  # mlx-vlm's per-call state
        if hasattr(vlm.language_model, "_position_ids"):
            vlm.language_model._rope_deltas = vlm.language_model._position_ids = None
        ids = mx.array([tokens])
        if family in GENERATION_REFERENCE:
            return generation_logits(vlm, ids, vision.features)
        out = vlm(ids, mask=None, **vision.features)  # causal, as generation attends
        return getattr(out, "logits", out)[0, -1]

    cache = make_prompt_cache(loaded.model)
    start = loaded.model.prefill_images(ids, vision, cache, 0, step)
    ours = loaded.model(mx.array([ids[start:]]), cache=cache)[0, -1]
    assert mx.allclose(ours, reference(ids), atol=1e-4)
    token = int(ours.argmax().item())
    ours_next = loaded.model(mx.array([[token]]), cache=cache)[0, -1]
    assert mx.allclose(ours_next, reference([*ids, token]), atol=1e-4)


def test_mistral3_images_of_their_own_shapes_match_mlx_vlm():
    """Mistral 3's processor keeps each image's aspect ratio (its own rows of ``[IMG]``
    between ``[IMG_BREAK]``s; ``image_sizes`` tell the tower and the patch merger): a tall
    and a wide image in one prompt are counted per image and, prefilled in chunks of 5,
    give mlx-vlm's logits."""
    loaded = load_model(str(tiny_vlm("mistral3")), progress=False)
    prompter = VisionPrompter.for_model(loaded.processor, loaded.tokenizer)
    limits = ImageLimits()
    images = [
        read_image(data=None, url=png_data_url(color, size), param="p", limits=limits)
        for color, size in ((RED, (16, 64)), (GREEN, (64, 48)))
    ]
    content = f"A {prompter.image_text} and B {prompter.image_text}"
    text = render_chat(loaded.tokenizer, [{"role": "user", "content": content}]).text
    ids, vision = prompter.encode(text, images, limits, loaded.tokenizer)
    assert vision is not None
    assert vision.features["image_sizes"].tolist() == [[32, 16], [32, 32]]
    breaks = loaded.tokenizer.convert_tokens_to_ids("[IMG_BREAK]")
    assert sum(1 for t in ids if t == breaks) == 1 + 1  # one between each image's two rows
    assert prompter._counts(images, None) == [2 * 1, 2 * 2]
    reference = loaded.model.vlm(mx.array([ids]), mask=None, **vision.features).logits[0, -1]
    cache = make_prompt_cache(loaded.model)
    start = loaded.model.prefill_images(ids, vision, cache, 0, 5)
    ours = loaded.model(mx.array([ids[start:]]), cache=cache)[0, -1]
    assert mx.allclose(ours, reference, atol=1e-4)


# Families whose forward pass differs from mlx-vlm's generation, which the server follows:
# Gemma 3's applies the processor's mask as full attention over the prompt; its generation
# (and ours) attends causally.
GENERATION_REFERENCE = {"gemma3"}


def generation_logits(vlm, ids: mx.array, features: dict) -> mx.array:
    """The last logits of mlx-vlm's generation for a prompt: the merged embeddings and
    every feature through the language model in one pass, no cache."""
    mask = mx.ones(ids.shape, dtype=mx.int32)
    merged = vlm.get_input_embeddings(ids, mask=mask, **features).to_dict()
    embeds = merged.pop("inputs_embeds")
    extras = {k: v for k, v in merged.items() if v is not None}
    return vlm.language_model(ids, inputs_embeds=embeds, **extras).logits[0, -1]


def test_image_tokens_are_keyed_by_pixels(runtime):
    """The prefix-cache key: text ids as they are, each image's tokens as negative ids from
    its pixels' hash (the same image, the same ids; another image, others)."""
    red, _ = runtime.pipeline.render(request(user("see ", Img(RED))))
    red_again, _ = runtime.pipeline.render(request(user("see ", Img(RED))))
    green, _ = runtime.pipeline.render(request(user("see ", Img(GREEN))))
    assert red.vision.key == red_again.vision.key
    image_positions = [i for i, t in enumerate(red.vision.key) if t < 0]
    assert len(image_positions) == red.vision.image_tokens > 0
    assert all(red.token_ids[i] == runtime.pipeline.vision.image_token_id for i in image_positions)
    first = image_positions[0]
    assert red.vision.key[:first] == green.vision.key[:first]
    assert red.vision.key[first] != green.vision.key[first]


def test_batched_with_text_equals_alone(runtime):
    """A vision request decoding beside two text requests gives each the tokens it gets
    alone (greedy); the engine ran them together."""
    chats = [
        request(user("Describe a terminal window."), max_tokens=16),
        request(user(Img(RED), "What is in this image?"), max_tokens=12),
        request(user("Hello, world! How are you today?"), max_tokens=16),
    ]
    source = runtime.engine.source
    kept, source.prefix_cache = source.prefix_cache, None  # every prompt computed each time
    try:
        alone = [run_alone(runtime, chat) for chat in chats]
        batched, peak = together(runtime, chats)
    finally:
        source.prefix_cache = kept
    assert batched == alone
    assert peak >= 2


def test_second_turn_reuses_the_image_from_the_cache(runtime):
    """Turn two of a conversation about one image is served from the prefix cache through
    the image (cached tokens reported; the tower not run again) and answers what it answers
    with no cache; a different image in its place reuses only the text before it."""
    first = runtime.pipeline.prepare_chat(
        request(user(Img(GREEN), "What is in this image?"), max_tokens=6)
    )
    assert first.generation.vision.prefilled is not None  # encoded and prefilled while preparing
    answer = runtime.pipeline.complete_sync(first).message.content
    second_turns = (
        user(Img(GREEN), "What is in this image?"),
        ("assistant", [answer]),
        user("And its colour?"),
    )
    prepared = runtime.pipeline.prepare_chat(request(*second_turns))
    vision = prepared.generation.vision
    assert vision.encoded is None and vision.prefilled is None  # the cache holds it: no tower
    result = runtime.pipeline.complete_sync(prepared)
    image_end = prepared.generation.vision.image_end
    assert result.usage.cached_tokens >= image_end
    cold = build_runtime(
        str(runtime.loaded.path), RuntimeOptions.of(prefix_cache_mb=0), progress=False
    )
    try:
        assert run_alone(cold, request(*second_turns)) == result.message.content
    finally:
        cold.close()
    swapped = (user(Img(RED), "What is in this image?"), *second_turns[1:])
    prepared = runtime.pipeline.prepare_chat(request(*swapped))
    first_image = prepared.generation.vision.key.index(
        next(t for t in prepared.generation.vision.key if t < 0)
    )
    assert runtime.pipeline.complete_sync(prepared).usage.cached_tokens <= first_image


@pytest.mark.parametrize("reuse_from", [0, 10_000])
def test_a_turn_that_adds_an_image_reuses_the_earlier_one(runtime, reuse_from, monkeypatch):
    """Each image's tokens are keyed by its own pixels: the next turn, which adds a second
    image, is served from the cache through the first image (with its images encoded while
    it is prepared and the rest prefilled at admission, or, when the cached part is too
    short to be worth a pause of the batch, everything through the last image prefilled
    while it is prepared)."""
    monkeypatch.setattr(sources, "AHEAD_REUSE_MIN", reuse_from)
    first = request(user(Img(GREEN), "What is in this image?"), max_tokens=4)
    answer = run_alone(runtime, first)
    turns = (
        user(Img(GREEN), "What is in this image?"),
        ("assistant", [answer]),
        user(Img(RED if reuse_from == 0 else (20, 20, 230)), "And this one?"),  # a new image
    )
    prepared = runtime.pipeline.prepare_chat(request(*turns))
    key = prepared.generation.vision.key
    images = [i for i, t in enumerate(key) if t < 0]
    first_image = [i for i in images if key[i] == key[images[0]]]
    assert 0 < len(first_image) < len(images)  # two images, each its own id
    vision = prepared.generation.vision
    if reuse_from == 0:
        assert vision.prefilled is None and vision.encoded is not None
    else:
        assert vision.prefilled is not None
    result = runtime.pipeline.complete_sync(prepared)
    assert result.usage.cached_tokens > first_image[-1] or reuse_from > 0


def test_the_disk_prefix_cache_serves_an_image_turn_after_a_restart(tmp_path):
    """A conversation's image turn persisted by one server process is read back by the
    next: the second turn's image KV comes from disk, M-RoPE positions and all."""
    folder = str(tiny_vlm("qwen2_5_vl"))
    options = RuntimeOptions.of(prefix_cache_dir=str(tmp_path))
    first = request(user(Img(GREEN), "What is in this image?"), max_tokens=4)
    writer = build_runtime(folder, options, progress=False)
    writer.engine.source.prefix_cache.disk.min_tokens = 1  # the tiny prompt persists too
    try:
        answer = run_alone(writer, first)
    finally:
        writer.close()  # flushes the disk writes
    turns = (*first_turn(answer), user("And its colour?"))
    reader = build_runtime(folder, options, progress=False)
    try:
        prepared = reader.pipeline.prepare_chat(request(*turns))
        result = reader.pipeline.complete_sync(prepared)
    finally:
        reader.close()
    assert result.usage.cached_tokens >= prepared.generation.vision.image_end


def first_turn(answer: str) -> tuple[tuple[str, list], tuple[str, list]]:
    return user(Img(GREEN), "What is in this image?"), ("assistant", [answer])


def test_row_shifts_survive_batch_merge_filter_and_extract():
    """Each row keeps its own rotary shift through the batch cache's operations."""
    rows = []
    for shift, length in ((-5, 3), (0, 2), (-2, 4)):
        cache = ShiftedKVCache(shift)
        cache.update_and_fetch(mx.zeros((1, 2, length, 4)), mx.zeros((1, 2, length, 4)))
        rows.append(cache)
    batch = ShiftedKVCache.merge(rows)
    assert isinstance(batch, ShiftedBatchKVCache)
    assert batch.shift.tolist() == [-5, 0, -2]
    batch.filter([0, 2])
    assert batch.shift.tolist() == [-5, -2]
    batch.extend(ShiftedKVCache.merge([rows[1]]))
    assert batch.shift.tolist() == [-5, -2, 0]
    extracted = batch.extract(1)
    assert isinstance(extracted, ShiftedKVCache) and extracted.shift == -2
    assert extracted.offset == 4
