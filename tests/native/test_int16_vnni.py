"""The int16 products' AVX-512 VNNI body gives the AVX2 body's bits, and each row of a
product of 1..8 rows (one pass over the weights serves 8 there, 4 on AVX2) equals the
one-row product's, for every layout a decode step reads: 4/8 bits, group sizes 32-128,
float32 and float16 scales, row lengths with fewer than 8 groups and with a ragged tail.
Under int8 activations likewise: the VNNI body's vpdpbusd gives the AVX2 body's bits."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from vllm_mlx import native

BODIES = [b for b in ("avx2", "vnni") if native.available() and native.set_int16_body(b)]
if BODIES:  # probing left the last one selected: back to the best
    native.set_int16_body(BODIES[-1])

pytestmark = [
    pytest.mark.default_activations,  # the int16 products
    pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built"),
    pytest.mark.skipif(
        not BODIES or native.status().get("isa") != "avx2", reason="the int16 bodies need AVX2"
    ),
]


@pytest.fixture
def body_restored():
    packed = native.packed_mode()
    native.set_packed(False)  # the unpacked bodies (test_packed_products.py: the packed one)
    yield
    native.set_int16_body(BODIES[-1])
    native.set_activations("int16")
    native.set_packed_mode(packed)


def product(x, w, scales, biases, group_size: int, bits: int, body: str) -> np.ndarray:
    assert native.set_int16_body(body)
    return np.array(native.quantized_matmul(x, w, scales, biases, group_size, bits))


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize(("group_size", "k"), [(32, 576), (32, 160), (64, 1536), (128, 384)])
@pytest.mark.parametrize("half_scales", [False, True])
@pytest.mark.parametrize("activations", ["int16", "int8"])
def test_every_body_gives_each_row_its_one_row_bits(
    body_restored: None, bits: int, group_size: int, k: int, half_scales: bool, activations: str
) -> None:
    assert native.set_activations(activations)
    mx.random.seed(bits * 1000 + k)
    w, scales, biases = mx.quantize(mx.random.normal((203, k)), group_size=group_size, bits=bits)
    if half_scales:
        scales, biases = scales.astype(mx.float16), biases.astype(mx.float16)
    x = mx.random.normal((8, k)) * mx.random.uniform(0.01, 10.0, (8, 1))
    alone = [product(x[m : m + 1], w, scales, biases, group_size, bits, "avx2") for m in range(8)]
    for body in BODIES:
        for rows in range(1, 9):
            block = product(x[:rows], w, scales, biases, group_size, bits, body)
            for m in range(rows):
                assert np.array_equal(block[m : m + 1], alone[m]), (body, rows, m)


def test_the_vnni_body_is_the_default_where_the_cpu_has_it() -> None:
    assert native.int16_body() == BODIES[-1]
    assert native.status()["int16_body"] == BODIES[-1]
    assert not native.set_int16_body("avx512")
