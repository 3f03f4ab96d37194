"""`--prefix-cache-dir`: entries survive a restart (a second engine and cache over the same
directory), never cross models, and a damaged file is ignored, deleted and rebuilt."""

from __future__ import annotations

import pytest
from test_prefix_agents import build_hybrid
from tiny_models import build_tiny_model

from vllm_mlx.engine.cache_files import DiskCache, cache_namespace
from vllm_mlx.engine.engine import Engine
from vllm_mlx.engine.generation import GenerationRequest
from vllm_mlx.engine.prefix_cache import PrefixCache
from vllm_mlx.engine.sampling import SamplingParams
from vllm_mlx.engine.sources import ModelBatchSource


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_model(tokenizer, seed=2, hidden_size=128)


def prompt_of(tokenizer, text="The capital of France is Paris. " * 12):
    return tokenizer.encode(text)


def start(model, tokenizer, directory, kv_bits=None) -> Engine:
    """A fresh engine, memory cache and disk index: what a restarted server has."""
    kv = dict(kv_bits=kv_bits, kv_group_size=32 if kv_bits else None)
    disk = DiskCache(directory, cache_namespace(model, tokenizer, **kv), 1 << 30, min_tokens=8)
    source = ModelBatchSource(
        model, prefix_cache=PrefixCache(64 << 20, disk=disk), kv_bits=kv_bits, kv_group_size=32
    )
    return Engine(source, tokenizer)


def run(engine, prompt, n=6):
    chunks = list(engine.generate_sync(GenerationRequest(prompt, SamplingParams(n, 0))))
    return [t for c in chunks for t in c.token_ids], chunks[-1].cached_tokens


def files(directory):
    return sorted(directory.rglob("*.safetensors"))


@pytest.mark.parametrize("kv_bits", [None, 8])
def test_hit_after_restart_gives_the_cold_output(model, tokenizer, tmp_path, kv_bits):
    prompt = prompt_of(tokenizer)
    first = start(model, tokenizer, tmp_path, kv_bits)
    cold, cached = run(first, prompt)
    first.close()  # flushes the writer
    assert cached == 0 and len(files(tmp_path)) == 1
    second = start(model, tokenizer, tmp_path, kv_bits)
    try:
        again, cached = run(second, prompt)
        assert cached == len(prompt) - 1
        assert again == cold
        _, cached = run(second, prompt + tokenizer.encode(" And Rome?"))
        assert cached >= len(prompt)  # the hit's own prompt + output entry
    finally:
        second.close()


def test_untrimmable_checkpoints_survive_a_restart(tokenizer, tmp_path):
    hybrid = build_hybrid(tokenizer)
    prompt = prompt_of(tokenizer)
    checkpoint = len(prompt) - 3
    first = start(hybrid, tokenizer, tmp_path)
    request = GenerationRequest(prompt, SamplingParams(4, 0), checkpoints=[checkpoint])
    cold = [t for c in first.generate_sync(request) for t in c.token_ids]
    first.close()
    assert len(files(tmp_path)) == 2  # checkpoint + prompt/output (not trimmable: both kept)
    second = start(hybrid, tokenizer, tmp_path)
    try:
        assert run(second, prompt, 4) == (cold, checkpoint)
    finally:
        second.close()


def test_another_model_never_reads_the_files(model, tokenizer, tmp_path):
    prompt = prompt_of(tokenizer)
    first = start(model, tokenizer, tmp_path)
    run(first, prompt)
    first.close()
    other = build_tiny_model(tokenizer, seed=5, hidden_size=128)  # same shapes, other weights
    assert cache_namespace(other, tokenizer) != cache_namespace(model, tokenizer)
    assert cache_namespace(model, tokenizer, kv_bits=8) != cache_namespace(model, tokenizer)
    second = start(other, tokenizer, tmp_path)
    try:
        assert run(second, prompt)[1] == 0
    finally:
        second.close()


@pytest.mark.parametrize("damage", ["flip", "truncate", "header"])
def test_a_corrupted_file_is_ignored_and_rebuilt(model, tokenizer, tmp_path, damage):
    prompt = prompt_of(tokenizer)
    first = start(model, tokenizer, tmp_path)
    cold, _ = run(first, prompt)
    first.close()
    (path,) = files(tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-100] ^= 0xFF  # inside the last tensor's bytes
    elif damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[10] = ord("#")  # the JSON header
    path.write_bytes(bytes(data))
    second = start(model, tokenizer, tmp_path)
    try:
        again, cached = run(second, prompt)
        assert cached == 0 and again == cold  # recomputed, not loaded
    finally:
        second.close()
    (rebuilt,) = files(tmp_path)  # the request wrote a good file again
    third = start(model, tokenizer, tmp_path)
    try:
        assert run(third, prompt) == (cold, len(prompt) - 1)
    finally:
        third.close()
    assert rebuilt.exists()


def test_unfinished_writes_are_removed_and_the_bound_holds(model, tokenizer, tmp_path):
    engine = start(model, tokenizer, tmp_path)
    run(engine, prompt_of(tokenizer))
    engine.close()
    (path,) = files(tmp_path)
    size = path.stat().st_size
    (path.parent / "crashed.tmp").write_bytes(b"half a file")
    disk = DiskCache(tmp_path, path.parent.name, max_bytes=int(size * 1.5), min_tokens=8)
    assert not (path.parent / "crashed.tmp").exists()
    cache = PrefixCache(64 << 20, disk=disk)
    engine = Engine(ModelBatchSource(model, prefix_cache=cache), tokenizer)
    try:
        run(engine, prompt_of(tokenizer, "Hello, world! How are you today? " * 12))
    finally:
        engine.close()
    remaining = files(tmp_path)
    assert len(remaining) == 1 and remaining != [path]  # the older entry was evicted
