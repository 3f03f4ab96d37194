"""models.toml entries that name hub ids: accepted without a folder, found in the cache
without a request once downloaded, fetched at start-up when marked so (errors naming the
file and model)."""

from __future__ import annotations

from pathlib import Path

import click
import openai
import pytest
from click.testing import CliRunner
from models.conftest import hub, stores, tiny_folder  # noqa: F401  (the stand-in fixtures)
from models.hub_standin import HubStandIn
from servers import cli_server

from vllm_mlx.cli import main
from vllm_mlx.fleet.catalog import build_catalog
from vllm_mlx.fleet.settings import SettingsError
from vllm_mlx.server.startup import _download_at_start


def write_config(folder: Path, body: str) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "models.toml").write_text(body)
    return folder


def test_a_hub_entry_downloads_at_start_or_on_first_use(
    hub: HubStandIn,  # noqa: F811
    stores: Path,  # noqa: F811
) -> None:
    folder = write_config(
        stores / "fleet",
        '[models.tiny]\npath = "org/tiny"\ndownload = "start"\n'
        '[models.later]\npath = "org/tiny"\nserved_name = "later"\n',
    )
    catalog = build_catalog([str(folder)])
    entry = catalog.entries["tiny"]
    assert entry.by_name and entry.local_path() is None and entry.check() is None
    assert not hub.requests  # nothing fetched to build the catalog
    _download_at_start(catalog)
    assert entry.local_path() is not None and entry.weight_bytes() > 100_000
    assert catalog.entries["later"].context_length() == 4096  # from the cached config


def test_a_hub_entry_that_cannot_be_had_stops_start_up_with_its_name(
    hub: HubStandIn,  # noqa: F811
    stores: Path,  # noqa: F811
) -> None:
    folder = write_config(stores / "fleet", '[models.x]\npath = "org/absent"\ndownload = "start"\n')
    with pytest.raises(click.ClickException, match=r"models.toml: model 'x': no model 'org/abs"):
        _download_at_start(build_catalog([str(folder)]))
    folder = write_config(stores / "fleet", '[models.x]\npath = "org/tiny"\ndownload = "soon"\n')
    with pytest.raises(SettingsError, match="model 'x', field 'download'"):
        build_catalog([str(folder)])
    folder = write_config(stores / "fleet", '[models.x]\npath = "no/such/dir"\n')
    with pytest.raises(SettingsError, match="not found .*nor is it a hub id"):
        build_catalog([str(folder)])


def test_a_hub_entry_is_downloaded_by_its_first_request(
    hub: HubStandIn,  # noqa: F811
    stores: Path,  # noqa: F811
) -> None:
    folder = write_config(
        stores / "fleet",
        '[models.tiny]\npath = "org/tiny"\n[models.gone]\npath = "org/absent"\n',
    )
    log = stores / "server.log"
    with cli_server("--models-dir", str(folder), "--strict-model-ids", log_path=log) as base:
        assert not hub.downloads("model.safetensors")  # nothing fetched to start
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="-", max_retries=0, timeout=120)
        hello = [{"role": "user", "content": "hi"}]
        reply = client.chat.completions.create(model="tiny", messages=hello, max_tokens=4)
        assert reply.model == "tiny" and hub.downloads("model.safetensors")
        with pytest.raises(openai.APIStatusError) as failed:
            client.chat.completions.create(model="gone", messages=hello, max_tokens=4)
    assert "no model 'org/absent' on the hub" in str(failed.value)
    assert "Traceback" not in log.read_text()


def test_the_models_command_shows_a_hub_entry_before_its_download(
    hub: HubStandIn,  # noqa: F811
    stores: Path,  # noqa: F811
) -> None:
    folder = write_config(stores / "fleet", '[models.tiny]\npath = "org/tiny"\n')
    shown = CliRunner().invoke(main, ["models", str(folder)])
    assert shown.exit_code == 0, shown.output
    assert "tiny (default)  org/tiny" in shown.output
    assert "loads: yes  (from the hub, not downloaded yet: at first use)" in shown.output
    CliRunner().invoke(main, ["pull", "org/tiny"])
    assert "MB of weights" in CliRunner().invoke(main, ["models", str(folder)]).output
