"""The multi-token-prediction head read from a checkpoint: found by its tensor names,
loaded with the checkpoint's own tensors, and computing what the families' MTP layers
compute (checked against a forward written here from the file's tensors)."""

from __future__ import annotations

import json

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models.base import create_causal_mask
from mlx_lm.models.cache import make_prompt_cache
from tiny_mtp import dequantized, reference_block, write_mtp_folder

from vllm_mlx.models.fit import estimate
from vllm_mlx.models.loader import load_model
from vllm_mlx.models.mtp_heads import (
    carried_tensors,
    copies_of_main,
    header_names,
    load_mtp_heads,
)

ARCHS = ("deepseek_v3", "glm4_moe", "mimo", "qwen3_next")


@pytest.fixture(scope="module", params=ARCHS)
def folder(request, tmp_path_factory):
    return write_mtp_folder(tmp_path_factory.mktemp(request.param), request.param)


@pytest.fixture(scope="module")
def loaded(folder):
    return load_model(str(folder), cpu_weights="float32", progress=False)


def rms(x: mx.array, weight: mx.array, eps: float = 1e-5) -> mx.array:
    return x * mx.rsqrt(mx.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def test_the_head_is_found_by_the_released_names(folder):
    config = json.loads((folder / "config.json").read_text())
    found = carried_tensors(folder, config)
    if config["model_type"] == "qwen3_next":
        assert {"mtp.fc.weight", "mtp.norm.weight", "mtp.pre_fc_norm_hidden.weight"} <= set(found)
        assert "mtp.layers.0.mlp.experts.3.down_proj.weight" in found
    elif config["model_type"] == "mimo":
        assert "model.mtp_layers.0.input_proj.weight" in found
        assert "model.mtp_layers.0.self_attn.q_proj.bias" in found
    else:
        n = config["num_hidden_layers"]
        assert f"model.layers.{n}.eh_proj.weight" in found
        assert f"model.layers.{n}.mlp.experts.3.down_proj.weight" in found
        assert f"model.layers.{n}.shared_head.head.weight" in found
    assert not any(n.startswith("model.layers.1.") for n in found)
    assert set(found) <= set(header_names(folder / "model.safetensors"))


@pytest.mark.parametrize("arch", ["mimo", "qwen3_next"])
def test_a_checkpoint_without_the_head_loads_none(tmp_path, arch):
    folder = write_mtp_folder(tmp_path / "plain", arch, with_head=False)
    loaded = load_model(str(folder), cpu_weights="float32", progress=False)
    assert load_mtp_heads(folder, loaded.model) is None


def test_mlx_lm_drops_the_head_and_the_main_model_is_unchanged(folder, loaded):
    names = {n for n, _ in tree_flatten(loaded.model.parameters())}
    n = loaded.model.args.num_hidden_layers
    assert not any("mtp" in name or name.startswith(f"model.layers.{n}.") for name in names)


def test_the_head_computes_the_family_forward_from_the_files_tensors(folder, loaded):
    heads = load_mtp_heads(folder, loaded.model)
    assert heads is not None
    block, raw = reference_block(folder)
    tokens = mx.array([[5, 17, 300, 42, 9, 1000, 77]])
    # the main model's final hidden states, as its lm_head reads them
    h = heads.hidden(tokens[:, :-1], make_prompt_cache(loaded.model))
    expected_logits = loaded.model(tokens[:, :-1])
    assert mx.allclose(heads.main_logits(h), expected_logits, atol=1e-5)

    out = heads.step(h, tokens[:, 1:], heads.make_cache(), at_start=True)
    got = heads.logits(out)

    n = loaded.model.args.num_hidden_layers
    causal = create_causal_mask(h.shape[1])
    if loaded.model.model_type == "qwen3_next":
        p = "mtp."
        centred = lambda name: 1.0 + raw[p + name]  # noqa: E731
        e = raw["model.embed_tokens.weight"][tokens[0, 1:]][None]  # position 0 not zeroed
        joined = mx.concatenate(
            [
                rms(e, centred("pre_fc_norm_embedding.weight")),
                rms(h, centred("pre_fc_norm_hidden.weight")),
            ],
            axis=-1,
        )
        x = rms(block(joined @ raw[p + "fc.weight"].T, causal, None), centred("norm.weight"), 1e-5)
        logits = x @ raw["lm_head.weight"].T
    elif loaded.model.model_type == "mimo":
        p = "model.mtp_layers.0."
        e = raw["model.embed_tokens.weight"][tokens[0, 1:]][None]
        e = e * (mx.arange(e.shape[1]) > 0)[None, :, None]
        joined = mx.concatenate(
            [rms(h, raw[p + "hidden_layernorm.weight"]), rms(e, raw[p + "token_layernorm.weight"])],
            axis=-1,
        )
        x = block(joined @ raw[p + "input_proj.weight"].T, causal, None)
        x = rms(x, raw[p + "final_layernorm.weight"])
        logits = x @ raw["lm_head.weight"].T
    else:
        p = f"model.layers.{n}."
        e = raw[p + "embed_tokens.weight"][tokens[0, 1:]][None]
        e = e * (mx.arange(e.shape[1]) > 0)[None, :, None]
        joined = mx.concatenate(
            [rms(e, raw[p + "enorm.weight"]), rms(h, raw[p + "hnorm.weight"])], axis=-1
        )
        x = block(joined @ raw[p + "eh_proj.weight"].T, causal, None)
        logits = rms(x, raw[p + "shared_head.norm.weight"]) @ raw[p + "shared_head.head.weight"].T
    assert mx.allclose(out, x, atol=1e-4)
    assert mx.allclose(got, logits, atol=1e-3)
    # the head's logits are not the main model's: its own tensors are in use
    assert not mx.allclose(got, expected_logits, atol=1e-1)


def test_the_head_reads_its_cache_as_one_long_call(folder, loaded):
    """Rows fed in pieces (prefill chunks, then a verify's) equal one call over them all."""
    heads = load_mtp_heads(folder, loaded.model)
    assert heads is not None
    tokens = mx.array([[5, 17, 300, 42, 9, 1000, 77, 3]])
    hidden = heads.hidden(tokens[:, :-1], make_prompt_cache(loaded.model))
    whole = heads.step(hidden, tokens[:, 1:], heads.make_cache(), at_start=True)
    cache = heads.make_cache()
    first = heads.step(hidden[:, :4], tokens[:, 1:5], cache, at_start=True)
    rest = heads.step(hidden[:, 4:], tokens[:, 5:], cache, at_start=False)
    assert mx.allclose(mx.concatenate([first, rest], axis=1), whole, atol=1e-5)


def test_heads_run_together_compute_each_rows_own(folder, loaded):
    """Rows' heads in one batched cache (a row joining later, left-padded; a row leaving)
    compute what each row's head computes alone, the first position zeroed per row."""
    heads = load_mtp_heads(folder, loaded.model)
    assert heads is not None
    tokens = mx.array([[5, 17, 300, 42, 9, 1000, 77, 3, 12], [8, 640, 2, 51, 700, 23, 4, 99, 6]])
    hidden = heads.hidden(tokens[:, :-1], make_prompt_cache(loaded.model))
    alone = [
        heads.step(hidden[r : r + 1], tokens[r : r + 1, 1:], heads.make_cache(), True)
        for r in (0, 1)
    ]
    group = heads.make_batch_cache(1)
    first = heads.step(hidden[:1, :5], tokens[:1, 1:6], group, [True])
    joining = heads.make_batch_cache(1)
    for layer, other in zip(group, joining, strict=True):
        layer.extend(other)  # the second row's head starts at its position 0, behind padding
    both = heads.step(
        mx.stack([hidden[0, 5:7], hidden[1, :2]]),
        mx.stack([tokens[0, 6:8], tokens[1, 1:3]]),
        group,
        [False, True],
    )
    assert mx.allclose(first, alone[0][:, :5], atol=1e-4)
    assert mx.allclose(both[0], alone[0][0, 5:7], atol=1e-4)
    assert mx.allclose(both[1], alone[1][0, :2], atol=1e-4)
    for layer in group:
        layer.filter([1])  # the first row's sequence ended
    last = heads.step(hidden[1:, 2:4], tokens[1:, 3:5], group, False)
    assert mx.allclose(last, alone[1][:, 2:4], atol=1e-4)


def test_a_float8_head_is_dequantized_as_the_release_is(tmp_path):
    """DeepSeek-V3's released head is float8 with block scales: loaded, it computes what the
    same head stored dequantized computes."""
    fp8 = write_mtp_folder(tmp_path / "fp8", "deepseek_v3", seed=3, fp8=True)
    raw = mx.load(str(fp8 / "model.safetensors"))
    assert isinstance(raw, dict) and "model.layers.61.eh_proj.weight_scale_inv" in raw
    assert raw["model.layers.61.self_attn.kv_b_proj.weight"].dtype == mx.uint8
    plain = tmp_path / "plain"
    plain.mkdir()
    for file in fp8.iterdir():
        if file.suffix != ".safetensors":
            (plain / file.name).write_bytes(file.read_bytes())
    mx.save_safetensors(str(plain / "model.safetensors"), dequantized(raw))
    outputs = []
    for folder in (fp8, plain):
        loaded = load_model(str(folder), cpu_weights="float32", progress=False)
        heads = load_mtp_heads(folder, loaded.model)
        assert heads is not None
        tokens = mx.array([[5, 17, 300, 42, 9, 1000]])
        h = heads.hidden(tokens[:, :-1], make_prompt_cache(loaded.model))
        outputs.append(heads.logits(heads.step(h, tokens[:, 1:], heads.make_cache(), True)))
    assert mx.allclose(outputs[0], outputs[1], atol=1e-4)


def test_the_head_shares_the_main_models_embedding_and_output_head(folder, loaded):
    """The released next-n layer's embedding and output head are copies of the main
    model's: the head uses the main model's arrays and holds no vocabulary-sized one."""
    heads = load_mtp_heads(folder, loaded.model)
    assert heads is not None
    assert heads.embedding() is loaded.model.model.embed_tokens
    vocab = loaded.model.args.vocab_size
    assert not any(a.shape[0] == vocab for _, a in tree_flatten(heads.layer.parameters()))
    config = json.loads((folder / "config.json").read_text())
    if config["model_type"] in ("deepseek_v3", "glm4_moe"):
        n = config["num_hidden_layers"]
        assert set(copies_of_main(folder, config)) == {
            f"model.layers.{n}.embed_tokens.weight",
            f"model.layers.{n}.shared_head.head.weight",
        }
        out = mx.random.normal((1, 3, loaded.model.args.hidden_size))
        assert mx.array_equal(heads.logits(out), heads.main_logits(heads.layer.normed(out)))


@pytest.mark.parametrize("kind", ["other values", "other shape"])
def test_a_head_whose_own_tensors_differ_loads_them(tmp_path, kind):
    """Same shape but other bytes in the sampled rows, or another shape (a padded
    vocabulary): the head's own embedding (and output head) are loaded and used."""
    vocab_rows = None if kind == "other values" else 49160
    folder = write_mtp_folder(
        tmp_path / "own", "glm4_moe", copies=kind == "other shape", embed_rows=vocab_rows
    )
    loaded = load_model(str(folder), cpu_weights="float32", progress=False)
    heads = load_mtp_heads(folder, loaded.model)
    assert heads is not None
    raw = mx.load(str(folder / "model.safetensors"))
    assert isinstance(raw, dict)
    n = loaded.model.args.num_hidden_layers
    own = raw[f"model.layers.{n}.embed_tokens.weight"]
    embedding = heads.embedding()
    assert embedding is not loaded.model.model.embed_tokens
    assert mx.array_equal(embedding.weight, own)
    assert ("head" in heads.layer.shared_head) == (kind == "other values")
    tokens = mx.array([[5, 17, 300, 42]])
    h = heads.hidden(tokens[:, :-1], make_prompt_cache(loaded.model))
    out = heads.step(h, tokens[:, 1:], heads.make_cache(), at_start=False)
    fused = mx.concatenate(
        [
            rms(own[tokens[0, 1:]][None], raw[f"model.layers.{n}.enorm.weight"]),
            rms(h, raw[f"model.layers.{n}.hnorm.weight"]),
        ],
        axis=-1,
    )
    block, _ = reference_block(folder)
    x = block(fused @ raw[f"model.layers.{n}.eh_proj.weight"].T, create_causal_mask(3), None)
    assert mx.allclose(out, x, atol=1e-4)


def held_bytes(module) -> int:
    return sum(a.nbytes for _, a in tree_flatten(module.parameters()))


@pytest.mark.parametrize("case", ["as released", "float8", "own embedding", "own values"])
def test_the_fit_estimate_counts_what_the_head_holds(tmp_path, case):
    """The estimate's weights are the main model's plus the head's own parameters (not the
    copies it shares, DeepSeek-V3's float8 as the float32 it becomes); without the head
    (``--mtp off``), the main model's alone."""
    folder = write_mtp_folder(
        tmp_path / "m",
        "deepseek_v3",
        fp8=case == "float8",
        embed_rows=49160 if case == "own embedding" else None,
        copies=case != "own values",
    )
    loaded = load_model(str(folder), cpu_weights="float32", progress=False)
    heads = load_mtp_heads(folder, loaded.model)
    assert heads is not None
    main, head = held_bytes(loaded.model), held_bytes(heads.layer)
    with_head = estimate(folder, 1024, weights="float32", on_cpu=True)
    without = estimate(folder, 1024, weights="float32", on_cpu=True, mtp=False)
    assert without.weights == main
    assert with_head.weights == main + head
    own = 49160 * loaded.model.args.hidden_size * 4
    assert (head > own) == (case in ("own embedding", "own values"))


def test_the_fit_estimate_counts_qwen3_nexts_head(tmp_path):
    """Qwen3-Next's ``mtp.*`` tensors: not the main model's weights, and with the head
    exactly the bytes it holds once loaded (its experts stacked, its norms offset)."""
    folder = write_mtp_folder(tmp_path / "q", "qwen3_next")
    loaded = load_model(str(folder), cpu_weights="float32", progress=False)
    heads = load_mtp_heads(folder, loaded.model)
    assert heads is not None
    with_head = estimate(folder, 1024, weights="float32", on_cpu=True)
    without = estimate(folder, 1024, weights="float32", on_cpu=True, mtp=False)
    assert without.weights == held_bytes(loaded.model)
    assert with_head.weights == without.weights + held_bytes(heads.layer)
