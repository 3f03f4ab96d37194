"""The one-node decode stack (``native/decode.py``) gives MLX's own logits and tokens on
plain and batched caches, writes the caches in place in a steady loop, never changes a
buffer another cache shares, and leaves every step it does not cover to mlx-lm; each on
float32 and on float16 KV caches (``kv``: MLX's reference then runs on caches given the
same float16 keys and values)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models import llama
from mlx_lm.models.cache import BatchKVCache, make_prompt_cache
from test_patch import PROMPT, greedy, half_writes, quantized_llama

from vllm_mlx import native
from vllm_mlx.engine.prefix_cache import shared_copy
from vllm_mlx.native import heap, patch
from vllm_mlx.native.decode import NativeLlamaModel, layer_weights
from vllm_mlx.native.layers import KV_ENV

pytestmark = pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built")


def close(got: np.ndarray, want: np.ndarray) -> bool:
    return bool(np.abs(got - want).max() <= 1e-4 * (1 + np.abs(want).max()))


def count_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each ``native.decode_layers`` call's batch size (the real function still runs)."""
    calls: list[int] = []
    real = native.decode_layers
    monkeypatch.setattr(
        native, "decode_layers", lambda h, *a: calls.append(h.shape[0]) or real(h, *a)
    )
    return calls


@pytest.mark.usefixtures("float_attention")
@pytest.mark.parametrize(
    "bits, group_size, traditional, hidden",
    [(4, 32, False, 128), (8, 64, False, 128), (4, 128, True, 128), (4, 64, False, 256)],
)
def test_decode_stack_gives_mlx_logits_and_tokens(
    monkeypatch: pytest.MonkeyPatch,
    kv: bool,
    bits: int,
    group_size: int,
    traditional: bool,
    hidden: int,
) -> None:
    model = quantized_llama(bits, group_size, seed=bits + group_size, hidden=hidden)
    for block in model.model.layers:
        block.self_attn.rope.traditional = traditional
    want_tokens, want_rows = greedy(model, half=kv)
    routed = patch.enable(model)
    assert routed.decode_stacks == 1 and type(model.model) is NativeLlamaModel
    calls = count_calls(monkeypatch)
    got_tokens, got_rows = greedy(model)
    assert len(calls) == 24  # every one-token step after the prefill
    assert got_tokens == want_tokens
    assert all(close(g, w) for g, w in zip(got_rows, want_rows, strict=True))


def test_steady_decode_writes_the_caches_in_place(kv: bool) -> None:
    model = quantized_llama(4, 32)
    patch.enable(model)
    before = native.kv_write_copies()
    greedy(model, steps=16)
    assert native.kv_write_copies() == before  # every write reused its cache's buffer


def test_a_step_past_the_cache_capacity_goes_to_mlx_lm(
    monkeypatch: pytest.MonkeyPatch, kv: bool
) -> None:
    model = quantized_llama(4, 32, seed=2)
    prompt = mx.array([[(7 * i) % 250 + 1 for i in range(250)]])

    def run(half: bool) -> list[int]:
        cache = make_prompt_cache(model)
        feed = half_writes(cache) if half else cache
        logits = model(prompt, cache=feed)[:, -1, :]
        tokens = []
        for _ in range(12):  # positions 250..261: the 256-row buffer grows at 256
            token = mx.argmax(logits, axis=-1)
            tokens.append(token.item())
            logits = model(token[None], cache=feed)[:, -1, :]
        # grown by mlx-lm's concatenate, still in the dtype the native path writes
        assert cache[0].keys.shape[2] == 512
        assert cache[0].keys.dtype == (mx.float16 if kv else mx.float32)
        return tokens

    want = run(half=kv)
    patch.enable(model)
    calls = count_calls(monkeypatch)
    assert run(half=False) == want
    assert len(calls) == 11  # every step but the one that grows the buffer


def test_a_shared_prefix_cache_is_never_changed(kv: bool) -> None:
    """The prefix cache hands a request views of an entry's buffers: decoding from them
    must leave the entry's own rows as they were (MLX's value semantics)."""
    model = quantized_llama(4, 32, seed=4)
    patch.enable(model)
    entry = make_prompt_cache(model)
    mx.eval(model(PROMPT, cache=entry))
    assert entry[0].keys.dtype == (mx.float16 if kv else mx.float32)
    saved = [np.array(c.keys) for c in entry]
    copies = native.kv_write_copies()
    request = shared_copy(entry)
    for c in request:
        c.trim(5)  # serve a shorter prefix: its next rows overwrite the entry's rows
    token = mx.array([[3]])
    for _ in range(6):
        logits = model(token, cache=request)
        token = mx.argmax(logits[:, -1, :], axis=-1)[None]
        mx.eval(token)
    assert native.kv_write_copies() > copies  # the shared buffers were copied, not written
    assert request[0].keys.dtype == entry[0].keys.dtype
    for c, rows in zip(entry, saved, strict=True):
        assert np.array_equal(np.array(c.keys), rows)


@pytest.mark.usefixtures("float_attention")
@pytest.mark.parametrize("hidden", [128, 256])  # head size 32; 64 (the kernels' tiled path)
def test_batched_steps_with_left_padding_agree_with_mlx(
    monkeypatch: pytest.MonkeyPatch, kv: bool, hidden: int
) -> None:
    model = quantized_llama(4, 32, seed=5, hidden=hidden)
    prompt = mx.array([[0, 0, 5, 9, 40], [1, 7, 8, 3, 2], [0, 4, 4, 4, 9]])

    def run(half: bool) -> list[np.ndarray]:
        cache = [BatchKVCache(left_padding=[2, 0, 1]) for _ in model.layers]
        feed = half_writes(cache) if half else cache
        logits = model(prompt, cache=feed)[:, -1, :]
        rows = []
        for _ in range(4):
            rows.append(np.array(logits))
            logits = model(mx.argmax(logits, axis=-1)[:, None], cache=feed)[:, -1, :]
        assert cache[0].keys.dtype == (mx.float16 if kv else mx.float32)
        return rows

    want = run(half=kv)
    patch.enable(model)
    calls = count_calls(monkeypatch)
    got = run(half=False)
    assert calls == [3, 3, 3, 3]
    assert all(close(g, w) for g, w in zip(got, want, strict=True))


def test_float16_kv_stays_within_its_bound_of_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    """Float16 keys and values (each rounded by at most 2^-11 relative) against the float32
    path on one routed model: the same greedy tokens and logits within 5e-3 of the largest
    (measured <= 3e-4 on these tiny models); not identical, so the switch took effect."""
    model = quantized_llama(4, 32, seed=8)
    patch.enable(model)
    monkeypatch.setenv(KV_ENV, "f32")
    want_tokens, want_rows = greedy(model)
    monkeypatch.setenv(KV_ENV, "f16")
    got_tokens, got_rows = greedy(model)
    assert got_tokens == want_tokens
    errors = [
        np.abs(g - w).max() / (1 + np.abs(w).max())
        for g, w in zip(got_rows, want_rows, strict=True)
    ]
    assert 0 < max(errors) <= 5e-3


def test_the_per_layer_path_still_serves_when_the_stack_is_off(kv: bool) -> None:
    model = quantized_llama(8, 32, seed=6)
    want, _ = greedy(model, steps=8, half=kv)
    patch.enable(model)
    model.model.__class__ = llama.LlamaModel  # the fused blocks alone
    assert greedy(model, steps=8)[0] == want


def test_rejected_arguments_raise_value_error() -> None:
    model = quantized_llama(4, 32)
    patch.enable(model)
    cache = make_prompt_cache(model)
    mx.eval(model(PROMPT, cache=cache))
    inner = model.model
    h = inner.embed_tokens(mx.array([[3]]))
    weights = []
    for block in inner.layers:
        weights += layer_weights(block)
    caches = [a for c in cache for a in (c.keys, c.values)]
    eps, shape = inner.stack.eps, inner.stack.layer

    def call(**changes):
        args = dict(h=h, weights=weights, caches=caches, positions=mx.array([11], mx.int32),
                    key_start=mx.array([0], mx.int32), index=11)  # fmt: skip
        args.update(changes)
        return native.decode_layers(
            args["h"], args["weights"], args["caches"], args["positions"], args["key_start"],
            shape.inv_freq, eps, *shape.attention_quant, *shape.mlp_quant, *shape.heads,
            *shape.rope, shape.scale, args["index"],
        )  # fmt: skip

    mx.eval(call())
    for bad in (
        dict(weights=weights[:-1]),
        dict(caches=caches[:-1]),
        dict(positions=mx.array([11], mx.int64)),
        dict(key_start=mx.array([0, 0], mx.int32)),
        dict(index=cache[0].keys.shape[2]),
        dict(index=-1),
        dict(h=mx.zeros((1, 2, h.shape[-1]))),
        dict(h=h.astype(mx.float16)),
        dict(caches=[caches[0].astype(mx.float16), *caches[1:]]),  # one dtype for all
        dict(caches=[c.astype(mx.bfloat16) for c in caches]),
    ):
        with pytest.raises(ValueError):
            call(**bad)
    _, rows = call()
    for cache_array, new_rows in (
        (caches[0], mx.zeros((2, 2, 1, 2, 8))),  # another shape
        (caches[0], rows.astype(mx.float16)),  # half rows for a float32 cache
        (caches[0].astype(mx.bfloat16), rows),
    ):
        with pytest.raises(ValueError):
            native.kv_write(cache_array, new_rows, 0, 0, 0)


def test_float32_rows_written_to_a_half_cache_round_as_mlx_does() -> None:
    """kv_write's float32 rows into a float16 cache (eight at a time where the CPU has
    F16C, a row's last D % 8 one by one: every value below lands in both): MLX's
    astype(float16) bits, overflow, ties and subnormal halves included; a nan stays a
    quiet nan with its payload's top bits (MLX's own conversion gives another nan)."""
    nan_bits = [0x7FC12345, 0x7F812345, 0xFFC00001]
    other_bits = [0x7F800000, 0xFF800000, 0x00000001, 0x80000000]  # inf, -inf, tiny, -0
    values = [65504.0, 65519.99, 65520.0, 1e6, 2**-24, 2**-25, 3 * 2**-26, 2**-14]
    values += [1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11), 1e-40, -7.3]
    row = np.concatenate(
        [np.array(nan_bits + other_bits, np.uint32).view(np.float32), np.float32(values)]
    )
    assert row.size == 20  # D: two vectors of 8 and a tail of 4
    both = np.stack([row, row[::-1]])  # each value once in a vector, once near the end
    rows = mx.array(np.stack([both, both])[None, :, None])  # [1 layer, k/v, B 1, 2 heads, D]
    out = native.kv_write(mx.zeros((1, 2, 4, 20), mx.float16), rows, 0, 0, 1)
    got = np.array(out[0, :, 1, :]).view(np.uint16)
    want = np.array(mx.array(both).astype(mx.float16)).view(np.uint16)
    bits = both.view(np.uint32)
    nan = np.isnan(both)
    quiet = ((bits >> 16) & 0x8000) | 0x7E00 | ((bits & 0x7FFFFFFF) >> 13) & 0x3FF
    assert np.array_equal(got[~nan], want[~nan])
    assert np.array_equal(got[nan], quiet[nan].astype(np.uint16))
    assert np.array_equal(np.array(out[0, :, 0, :]).view(np.uint16), np.zeros((2, 20)))


@pytest.mark.parametrize("prompt_tokens, trims", [(600, 1), (40, 0)])
def test_the_heap_is_trimmed_once_after_a_long_prompt(
    monkeypatch: pytest.MonkeyPatch, prompt_tokens: int, trims: int
) -> None:
    """At the first decode step after a prompt of 512+ tokens (run in blocks), not after a
    short one, and not again while decoding (the real trim still runs)."""
    model = quantized_llama(4, 32)
    patch.enable(model)
    calls: list[bool] = []
    real = heap.trim
    monkeypatch.setattr(heap, "trim", lambda: calls.append(real()) or calls[-1])
    cache = make_prompt_cache(model)
    ids = mx.array([list(range(1, prompt_tokens + 1))]) % 100
    for block in range(0, prompt_tokens, 256):  # mlx-lm's prefill blocks
        model(ids[:, block : block + 256], cache=cache)
    token = mx.array([[3]])
    for _ in range(4):
        mx.eval(model(token, cache=cache))
    assert calls == [True] * trims
