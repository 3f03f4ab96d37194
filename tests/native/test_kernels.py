"""The native kernels against MLX's reference ops, over random shapes, bits, group sizes
and batch sizes, on every instruction set this CPU has (AVX2 and the generic bodies)."""

from __future__ import annotations

import os
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_patch import quantized_llama

from vllm_mlx import native
from vllm_mlx.native import patch

pytestmark = pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built")
SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def assert_close(out: mx.array, ref: mx.array, rtol: float = 2e-5) -> None:
    """Float32 sums in another order: the error is a few ulps of the largest term."""
    assert out.shape == ref.shape and out.dtype == ref.dtype
    got, want = np.array(out), np.array(ref)
    scale = 1.0 + float(np.abs(want).max(initial=0.0))
    assert np.abs(got - want).max(initial=0.0) <= rtol * scale


@st.composite
def matmul_cases(draw):
    bits = draw(st.sampled_from([4, 8]))
    group_size = draw(st.sampled_from([32, 64, 128]))
    k = group_size * draw(st.integers(1, 12))
    n = draw(st.integers(1, 300))
    lead = draw(st.sampled_from([(), (1,), (3,), (1, 1), (2, 5), (17,), (1, 9)]))
    seed = draw(st.integers(0, 2**31 - 1))
    return bits, group_size, k, n, lead, seed


@given(case=matmul_cases())
@SETTINGS
def test_quantized_matmul_matches_mlx(isa, case) -> None:
    bits, group_size, k, n, lead, seed = case
    key_w, key_x = mx.random.split(mx.random.key(seed))
    weight = mx.random.normal((n, k), key=key_w)
    w, scales, biases = mx.quantize(weight, group_size, bits)
    x = mx.random.normal((*lead, k), key=key_x)
    ref = mx.quantized_matmul(
        x, w, scales, biases, transpose=True, group_size=group_size, bits=bits
    )
    assert_close(native.quantized_matmul(x, w, scales, biases, group_size, bits), ref)


@given(case=matmul_cases())
@SETTINGS
def test_dequantize_matches_mlx(isa, case) -> None:
    bits, group_size, k, n, _, seed = case
    w, scales, biases = mx.quantize(
        mx.random.normal((n, k), key=mx.random.key(seed)), group_size, bits
    )
    ref = mx.dequantize(w, scales, biases, group_size, bits)
    assert_close(native.dequantize(w, scales, biases, group_size, bits), ref, rtol=1e-6)


def test_quantized_matmul_reads_strided_inputs(isa) -> None:
    """Transposed or sliced activations are views: the op must see their real layout."""
    weight = mx.random.normal((64, 256), key=mx.random.key(1))
    w, scales, biases = mx.quantize(weight, 64, 4)
    x = mx.random.normal((256, 6), key=mx.random.key(2)).T  # column-major view
    ref = mx.quantized_matmul(x, w, scales, biases, transpose=True, group_size=64, bits=4)
    assert_close(native.quantized_matmul(x, w, scales, biases, 64, 4), ref)
    sliced = mx.random.normal((4, 512), key=mx.random.key(3))[:, 128:384]
    ref = mx.quantized_matmul(sliced, w, scales, biases, transpose=True, group_size=64, bits=4)
    assert_close(native.quantized_matmul(sliced, w, scales, biases, 64, 4), ref)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(bits=3), "bits"),
        (dict(group_size=16), "group size"),
        (dict(x=mx.zeros((2, 128), dtype=mx.float16)), "float32"),
        (dict(x=mx.zeros((2, 96))), "last dimension"),
        (dict(scales=mx.zeros((8, 3))), "scales"),
    ],
)
def test_quantized_matmul_rejects_what_it_does_not_cover(change, message) -> None:
    w, scales, biases = mx.quantize(mx.zeros((8, 128)), 32, 4)
    args = dict(x=mx.zeros((2, 128)), w=w, scales=scales, biases=biases, group_size=32, bits=4)
    args.update(change)
    with pytest.raises(ValueError, match=message):
        native.quantized_matmul(**args)


@st.composite
def attention_cases(draw):
    b = draw(st.integers(1, 3))
    kv_heads = draw(st.integers(1, 4))
    heads = kv_heads * draw(st.integers(1, 4))
    q_len = draw(st.integers(1, 8))
    k_len = draw(st.integers(q_len, 700))
    dim = draw(st.sampled_from([16, 32, 64, 80, 128]))
    causal = draw(st.booleans())
    seed = draw(st.integers(0, 2**31 - 1))
    return b, heads, kv_heads, q_len, k_len, dim, causal, seed


@pytest.mark.usefixtures("float_attention")
@given(case=attention_cases())
@SETTINGS
def test_attention_matches_mlx_sdpa(isa, case) -> None:
    b, heads, kv_heads, q_len, k_len, dim, causal, seed = case
    kq, kk, kv = mx.random.split(mx.random.key(seed), 3)
    q = mx.random.normal((b, heads, q_len, dim), key=kq)
    k = 2 * mx.random.normal((b, kv_heads, k_len, dim), key=kk)  # peaky softmax
    v = mx.random.normal((b, kv_heads, k_len, dim), key=kv)
    scale = dim**-0.5
    mask = "causal" if causal else None
    ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
    assert_close(native.attention(q, k, v, scale, causal), ref, rtol=1e-5)


@pytest.mark.usefixtures("float_attention")
def test_attention_reads_a_kv_cache_view(isa) -> None:
    """mlx-lm's KVCache hands out a slice of a larger buffer; q comes transposed."""
    buffer_k = mx.random.normal((1, 3, 512, 64), key=mx.random.key(4))
    buffer_v = mx.random.normal((1, 3, 512, 64), key=mx.random.key(5))
    k, v = buffer_k[..., :300, :], buffer_v[..., :300, :]
    q = mx.random.normal((1, 1, 9, 64), key=mx.random.key(6)).transpose(0, 2, 1, 3)
    ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125)
    assert_close(native.attention(q, k, v, 0.125), ref, rtol=1e-5)
    # a last axis that is not contiguous goes through the strided generic body
    kt = mx.random.normal((1, 3, 64, 300), key=mx.random.key(7)).swapaxes(-1, -2)
    ref = mx.fast.scaled_dot_product_attention(q, kt, v, scale=0.125)
    assert_close(native.attention(q, kt, v, 0.125), ref, rtol=1e-5)


@pytest.mark.usefixtures("float_attention")
@given(case=attention_cases(), keep=st.floats(0.2, 0.9), per_head=st.booleans())
@SETTINGS
def test_masked_attention_matches_mlx_sdpa(isa, case, keep, per_head) -> None:
    b, heads, kv_heads, q_len, k_len, dim, _, seed = case
    kq, kk, kv, km = mx.random.split(mx.random.key(seed), 4)
    q = mx.random.normal((b, heads, q_len, dim), key=kq)
    k = mx.random.normal((b, kv_heads, k_len, dim), key=kk)
    v = mx.random.normal((b, kv_heads, k_len, dim), key=kv)
    shape = (b, heads if per_head else 1, q_len, k_len)
    mask = (mx.random.uniform(shape=shape, key=km) < keep) | (mx.arange(k_len) == k_len - 1)
    ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=dim**-0.5, mask=mask)
    assert_close(native.attention_masked(q, k, v, dim**-0.5, mask), ref, rtol=1e-5)


def test_attention_rejects_mismatched_heads() -> None:
    q = mx.zeros((1, 5, 1, 64))
    k = mx.zeros((1, 2, 10, 64))
    with pytest.raises(ValueError, match="multiple of KV heads"):
        native.attention(q, k, k, 0.125)


def test_status_reports_the_kernels() -> None:
    info = native.status()
    assert info["built"] and info["enabled"]
    assert info["kernels"] == list(native.KERNELS)
    # every compute entry point of the extension is listed, and nothing else
    extension = native._extension()
    helpers = {"isa", "set_isa", "activations", "set_activations", "threads", "kv_write_copies"}
    helpers |= {"placement", "set_placement", "decode_weights"}
    helpers |= {"int16_body", "set_int16_body", "attention_body", "set_attention_body"}
    helpers |= {"packed_mode", "set_packed_mode", "register_packed", "packed_count"}
    entry_points = {n for n in dir(extension) if not n.startswith("_")} - helpers
    assert entry_points == set(native.KERNELS)
    assert info["isa"] in ("avx2", "generic") and info["threads"] >= 1
    assert info["activations"] == "float"  # this module's tests run the exact body
    assert info["int16_body"] in ("avx2", "vnni")
    assert info["packed"] == os.environ.get("VLLM_MLX_NATIVE_PACKED", "auto")
    assert info["attention_body"] in ("float", "bf16", "amx")


def test_the_attention_body_defaults_to_amx_where_granted() -> None:
    """Unset or "auto": amx where this CPU and kernel grant it, else float; an explicit body
    this CPU lacks (or an unknown name) leaves float. Each in a fresh process, as the body
    is chosen once, before any model runs."""
    default = native.attention_body()
    has = {body: native.set_attention_body(body) for body in ("amx", "bf16")}
    assert default is not None and native.set_attention_body(default)
    amx = "amx" if has["amx"] else "float"
    expected = {None: amx, "": amx, "auto": amx, "float": "float", "amx": amx}
    expected |= {"bf16": "bf16" if has["bf16"] else "float", "bfloat": "float"}
    for name, body in expected.items():
        env = {k: v for k, v in os.environ.items() if k != "VLLM_MLX_NATIVE_ATTENTION"}
        env |= {} if name is None else {"VLLM_MLX_NATIVE_ATTENTION": name}
        script = "from vllm_mlx import native; print(native.attention_body())"
        run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True)
        assert run.stdout.decode().strip() == body, (name, run.stderr.decode()[-500:])


@st.composite
def half_cases(draw):
    """Decode rows (1-9, the vector path and every tile width) and prefill blocks (64+)."""
    bits = draw(st.sampled_from([4, 8]))
    group_size = draw(st.sampled_from([32, 64, 128]))
    k = group_size * draw(st.integers(1, 8))
    n = draw(st.integers(1, 160))
    m = draw(st.one_of(st.integers(1, 9), st.integers(64, 72)))
    seed = draw(st.integers(0, 2**31 - 1))
    return bits, group_size, k, n, m, seed


def half_weights(n: int, k: int, group_size: int, bits: int, seed: int):
    """Quantized weights with float16 scales/biases (GGUF's) and their float32 copies."""
    w, scales, biases = mx.quantize(
        mx.random.normal((n, k), key=mx.random.key(seed)), group_size, bits
    )
    s16, b16 = scales.astype(mx.float16), biases.astype(mx.float16)
    return w, (s16, b16), (s16.astype(mx.float32), b16.astype(mx.float32))


@given(case=half_cases())
@SETTINGS
def test_float16_scales_match_mlx_on_their_float32_values(isa, case) -> None:
    bits, group_size, k, n, m, seed = case
    w, half, full = half_weights(n, k, group_size, bits, seed)
    x = mx.random.normal((m, k), key=mx.random.key(seed + 1))
    ref = mx.quantized_matmul(x, w, *full, transpose=True, group_size=group_size, bits=bits)
    assert_close(native.quantized_matmul(x, w, *half, group_size, bits), ref)
    ref = mx.dequantize(w, *full, group_size, bits)
    assert_close(native.dequantize(w, *half, group_size, bits), ref, rtol=1e-6)


@pytest.mark.parametrize("bits", [4, 8])
def test_every_finite_half_converts_exactly(isa, bits: int) -> None:
    """All 63,488 finite half values (subnormals, -0, the largest) as scales of q = 1 with
    zero biases, then as biases of q = 0: dequantize returns each value exactly."""
    patterns = np.arange(2**16, dtype=np.uint16)
    halves = patterns.view(np.float16)
    values = halves[np.isfinite(halves)].reshape(-1, 4)  # 15,872 rows of 4 groups of 32
    one = 0x11111111 if bits == 4 else 0x01010101
    words = values.shape[1] * 32 * bits // 32
    for q_word, scales, biases in [
        (one, values, np.zeros_like(values)),
        (0, np.ones_like(values), values),
    ]:
        w = mx.array(np.full((values.shape[0], words), q_word, dtype=np.uint32))
        out = native.dequantize(w, mx.array(scales), mx.array(biases), 32, bits)
        want = np.repeat(values.astype(np.float32), 32, axis=1)
        assert np.array_equal(np.array(out), want)


@pytest.mark.parametrize(
    "scales_dtype, biases_dtype",
    [(mx.float16, mx.float32), (mx.float32, mx.float16), (mx.bfloat16, mx.bfloat16)],
)
def test_scales_and_biases_must_share_float32_or_float16(scales_dtype, biases_dtype) -> None:
    w, scales, biases = mx.quantize(mx.zeros((8, 128)), 32, 4)
    with pytest.raises(ValueError, match="float16"):
        native.quantized_matmul(
            mx.zeros((1, 128)), w, scales.astype(scales_dtype), biases.astype(biases_dtype), 32, 4
        )


def int_bound(
    x: np.ndarray, w, scales, group_size: int, bits: int, levels: int = 32767
) -> np.ndarray:
    """kernels.h's bound for the integer bodies, per output: x rounded to sx_g * xq with
    sx_g = max|x_g| / levels errs by at most sx_g / 2 per element, so y errs by at most
    sum_g |scale_g| * sum_k q_k * sx_g / 2 (plus float rounding, allowed separately)."""
    n, k = scales.shape[0], x.shape[-1]
    unit = mx.dequantize(w, mx.ones_like(scales), mx.zeros_like(scales), group_size, bits)
    q_sums = np.array(unit).reshape(n, k // group_size, group_size).sum(-1)
    sx = np.abs(x).reshape(k // group_size, group_size).max(-1) / levels
    return (np.abs(np.array(scales, dtype=np.float32)) * q_sums * sx / 2).sum(-1)


@given(case=half_cases())
@SETTINGS
@pytest.mark.default_activations
def test_int16_products_stay_within_their_bound(isa, case) -> None:
    """Rows of x (decode rows and prompt blocks alike) on the default body against MLX's
    float op, for float16 and float32 scales; each row's output is the one-row product's,
    bit for bit, in any batch or block. int8 activations likewise, with their 127 levels."""
    bits, group_size, k, n, m, seed = case
    assert native.status()["activations"] == "int16"
    w, half, full = half_weights(n, k, group_size, bits, seed)
    x = mx.random.normal((m, k), key=mx.random.key(seed + 1)) * 4
    ref = np.array(
        mx.quantized_matmul(x, w, *full, transpose=True, group_size=group_size, bits=bits)
    )
    try:
        for activations, levels in (("int16", 32767), ("int8", 127)):
            assert native.set_activations(activations)
            got = np.array(native.quantized_matmul(x, w, *half, group_size, bits))
            for row in range(m):
                bound = int_bound(np.array(x[row]), w, full[0], group_size, bits, levels)
                slack = 2e-5 * (1 + np.abs(ref[row]).max())
                assert (np.abs(got[row] - ref[row]) <= bound + slack).all(), activations
                alone = native.quantized_matmul(x[row : row + 1], w, *half, group_size, bits)
                assert np.array_equal(np.array(alone)[0], got[row]), activations
            full_scales = np.array(native.quantized_matmul(x, w, *full, group_size, bits))
            assert np.array_equal(full_scales, got)  # float16 scales are exact in float32
    finally:
        native.set_activations("int16")


@pytest.mark.default_activations
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("rows", [1, 5])
def test_int8_activations_give_the_product_of_x_rounded_to_127_levels(
    isa, bits: int, rows: int
) -> None:
    """int8 activations are MLX's float product of x rounded per group to sx_g * xq,
    |xq| <= 127, with the bias term on x's exact group sums (to float rounding), which
    int16's products are not."""
    if isa != "avx2":
        pytest.skip("the integer bodies are AVX2's (elsewhere x stays float)")
    w, scales, biases = mx.quantize(mx.random.normal((96, 256), key=mx.random.key(7)), 32, bits)
    x = np.array(mx.random.normal((rows, 256), key=mx.random.key(8))) * 3
    groups = x.reshape(rows, 8, 32)
    sx = np.abs(groups).max(-1, keepdims=True) / np.float32(127)
    # as the kernel: times 1/sx, to nearest even
    rounded = (np.round(groups * (np.float32(1) / sx)) * sx).reshape(rows, 256)
    zero = mx.zeros_like(biases)
    ref = np.array(mx.quantized_matmul(mx.array(rounded), w, scales, zero, True, 32, bits))
    ref += groups.sum(-1) @ np.array(biases).T
    slack = 2e-5 * (1 + np.abs(ref).max())
    try:
        assert native.set_activations("int8") and native.status()["activations"] == "int8"
        int8 = np.array(native.quantized_matmul(mx.array(x), w, scales, biases, 32, bits))
    finally:
        native.set_activations("int16")
    int16 = np.array(native.quantized_matmul(mx.array(x), w, scales, biases, 32, bits))
    assert np.abs(int8 - ref).max() <= slack
    assert np.abs(int16 - ref).max() > 10 * slack


@pytest.mark.default_activations
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("special", [np.inf, -np.inf, np.nan, 0.0])
def test_int16_decode_products_leave_special_x_to_the_float_body(isa, bits: int, special) -> None:
    """inf and nan go through the float body (rounding them to int16 would hide them), so
    both bodies give the same non-finite outputs; an all-zero group has scale 0."""
    w, scales, biases = mx.quantize(mx.random.normal((40, 128), key=mx.random.key(5)), 32, bits)
    x = np.array(mx.random.normal((1, 128), key=mx.random.key(6)))
    x[0, 32:64] = 0.0
    x[0, 70] = special
    x = mx.array(x)
    got = np.array(native.quantized_matmul(x, w, scales, biases, 32, bits))
    native.set_activations("float")
    exact = np.array(native.quantized_matmul(x, w, scales, biases, 32, bits))
    native.set_activations("int16")
    if np.isfinite(special):
        ref = mx.quantized_matmul(x, w, scales, biases, transpose=True, group_size=32, bits=bits)
        assert np.allclose(got, np.array(ref), rtol=1e-3, atol=1e-2)
    else:
        assert not np.isfinite(got).any() and np.array_equal(got, exact, equal_nan=True)


def test_a_bad_activations_switch_fails_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.ACTIVATIONS_ENV, "int4")
    with pytest.raises(ValueError, match=native.ACTIVATIONS_ENV):
        patch.enable(quantized_llama(4, 32))
    monkeypatch.setenv(native.ACTIVATIONS_ENV, "float")
    assert patch.enable(quantized_llama(4, 32)).linear > 0
    assert not native.set_activations("int4") and native.set_activations("float")
