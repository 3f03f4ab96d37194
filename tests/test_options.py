"""The options object: one name per option from ``serve`` flag to dataclass field (and
``models.toml`` key), so a new option is written in two places, its flag and its field,
then used."""

from __future__ import annotations

import dataclasses

import click
import pytest

from vllm_mlx.engine.sampling import SamplingParams
from vllm_mlx.fleet.settings import PLACEMENT, ModelSettings
from vllm_mlx.models.sampling_defaults import SAMPLING_KEYS
from vllm_mlx.options import (
    RuntimeOptions,
    SamplingOptions,
    ServeOptions,
    ServingOptions,
    option_names,
)
from vllm_mlx.server.serve_command import serve


def flag_names(command: click.Command) -> list[str]:
    return [p.name for p in command.params if isinstance(p, click.Option) and p.name]


def mismatch(command: click.Command, options: type) -> set[str]:
    """The names that are a flag or a field but not both."""
    return set(flag_names(command)) ^ set(option_names(options))


def test_every_flag_is_one_field_and_every_field_one_flag():
    names = option_names(ServeOptions)
    assert len(names) == len(set(names)), "an option name is used twice"
    assert mismatch(serve, ServeOptions) == set()


def test_a_new_flag_without_a_field_or_a_field_without_a_flag_is_caught():
    extra_flag = click.Command(
        "serve", params=[*serve.params, click.Option(["--dummy-option"], type=int)]
    )
    assert mismatch(extra_flag, ServeOptions) == {"dummy_option"}
    with pytest.raises(TypeError, match="dummy_option"):
        ServeOptions.of(dummy_option=1)  # serve would fail at start-up too
    serving = dataclasses.make_dataclass(
        "ServingOptions", [("dummy_option", int, 0)], bases=(ServingOptions,), frozen=True
    )
    extra_field = dataclasses.make_dataclass(
        "ServeOptions",
        [("serving", serving, dataclasses.field(default_factory=serving))],
        bases=(ServeOptions,),
        frozen=True,
    )
    assert mismatch(serve, extra_field) == {"dummy_option"}
    # with both written, the flag's value reaches its field by name, nothing else to edit
    assert mismatch(extra_flag, extra_field) == set()
    assert dataclasses.replace(extra_field(), serving=serving(dummy_option=3)).serving.dummy_option


def parsed(*args: str) -> ServeOptions:
    """What ``serve`` builds from these arguments."""
    context = serve.make_context("serve", list(args))
    return ServeOptions.of(**{k: v for k, v in context.params.items() if k != "model"})


def test_flag_defaults_are_the_field_defaults(monkeypatch):
    monkeypatch.delenv("VLLM_MLX_API_KEY", raising=False)
    assert parsed() == ServeOptions()  # the Python API and tests get what `serve` does


def test_flags_reach_their_fields_typed(tmp_path):
    warmup = tmp_path / "system.txt"
    warmup.write_text("You are terse.")
    options = parsed(
        "--tool-call-parser=hermes",
        "--max-tokens=5",
        "--kv-bits=8",
        "--kv-group-size=32",
        "--top-k=3",
        f"--warmup-prompt={warmup}",
        "--allowed-hosts=a.test,b.test",
        "--allowed-hosts=c.test",
        "--max-messages=7",
    )
    runtime = options.runtime
    assert runtime.model.tool_call_parser == "hermes"
    assert runtime.request.max_tokens == 5
    assert (runtime.engine.kv_bits, runtime.engine.kv_group_size) == (8, 32)
    assert runtime.sampling.overrides() == {"top_k": 3}
    assert runtime.cache.warmup_prompt == "You are terse."
    assert runtime.limits.max_messages == 7
    assert options.serving.allowed_hosts == ("a.test", "b.test", "c.test")


def test_the_operator_overrides_every_sampling_default_a_model_sets():
    operator = tuple(f.name for f in dataclasses.fields(SamplingOptions))
    assert operator == SAMPLING_KEYS
    assert set(operator) <= {f.name for f in dataclasses.fields(SamplingParams)}


def test_models_toml_settings_are_runtime_options_of_the_same_names():
    settings = set(ModelSettings.model_fields) - set(PLACEMENT)
    assert settings <= set(option_names(RuntimeOptions))
    assert "draft_model" in option_names(RuntimeOptions)  # placed by the catalog, then an option


def test_a_models_toml_entry_replaces_only_what_it_sets():
    server = RuntimeOptions.of(max_tokens=64, temperature=0.5, max_num_seqs=2)
    entry = ModelSettings.model_validate({"max_tokens": 8, "kv_bits": 4})
    options = server.updated(**entry.options())
    assert options.request.max_tokens == 8 and options.engine.kv_bits == 4
    assert options.sampling.temperature == 0.5 and options.engine.max_num_seqs == 2
    with pytest.raises(TypeError, match="no_such"):
        server.updated(no_such=1)
