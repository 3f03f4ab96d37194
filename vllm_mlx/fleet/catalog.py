"""What a server can serve: every model folder and ``.gguf`` in its ``--models-dir``
folders, renamed, aliased and configured by each folder's ``models.toml`` (and
``--model-config``), plus the ``serve MODEL`` argument. Read once at start-up; a bad entry
stops it there with the file, the model and the field named.

``models.toml``::

    default = "coder"              # the model unknown ids get (else MODEL, else the first)
    [models.coder]                 # a folder or .gguf in DIR, or any name with a path
    path = "Qwen3-Coder-GGUF/qwen3-coder-q4_k_m.gguf"
    aliases = ["claude-sonnet-4-5"]
    tool_call_parser = "qwen3_coder"
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..embeddings.kinds import KIND_NAMES, model_facts
from ..models.default_model import default_gguf, is_default_model_name
from ..models.errors import ModelLoadError
from ..models.gguf import read_header
from ..models.loader import context_length
from ..models.resolve import cache_root, is_model_name, model_by_name, validate_model_folder
from ..options import RuntimeOptions
from .adapters import AdapterEntry, parse_tables
from .settings import CatalogError, ModelSettings, SettingsError, parse_settings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CONFIG_NAME = "models.toml"


@dataclass(frozen=True)
class Entry:
    """One servable model."""

    name: str  # the id clients use and responses report
    spec: str  # what the loader takes: a folder, a .gguf or "default"
    found_in: str  # the folder or config it came from (for messages and `vllm-mlx models`)
    settings: ModelSettings = field(default_factory=lambda: ModelSettings())
    chat_template: str | None = None  # the template file's text
    draft_spec: str | None = None
    config: str = ""  # the models.toml that configured it, if one did
    adapter: AdapterEntry | None = None  # an adapter's id: the base's entry with the adapter
    fuse: str | None = None  # an adapter folder merged into this model's own weights

    @property
    def aliases(self) -> tuple[str, ...]:
        return self.settings.aliases

    def options(self, server: RuntimeOptions) -> RuntimeOptions:
        """This model's runtime options: its settings over the server's flags."""
        values = self.settings.options()
        if self.draft_spec is not None:
            values["draft_model"] = self.draft_spec
        return server.updated(**values)

    @property
    def by_name(self) -> bool:
        """The spec names a hub model or an Ollama one rather than a path."""
        return is_model_name(self.spec)

    def local_path(self) -> Path | None:
        """The folder or file served, from disk only (None: a name not downloaded yet)."""
        if is_default_model_name(self.spec):
            return default_gguf(cache_root())
        return model_by_name(self.spec, download=False) if self.by_name else Path(self.spec)

    def weight_files(self) -> list[Path]:
        """The files the weights are read from (their sizes estimate the memory a load
        needs before it happens)."""
        path = self.local_path()
        if path is None:
            return []
        return [path] if path.is_file() else sorted(path.glob("*.safetensors"))

    def weight_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.weight_files() if f.is_file())

    def context_length(self) -> int | None:
        """The context the model will allow, known before loading when its config says."""
        if self.settings.max_model_len is not None:
            return self.settings.max_model_len
        path = self.local_path()
        config = path / "config.json" if path is not None else None
        if config is not None and config.is_file():
            try:
                return context_length(_json_object(config))
            except (OSError, ValueError):
                return None
        return None

    def check(self) -> str | None:
        """Why this entry would not load (what the loader checks before reading weights),
        or None."""
        facts = model_facts(Path(self.spec)) if Path(self.spec).is_dir() else None
        if facts is not None:
            route = "/v1/rerank" if facts.kind != "embedding" else "/v1/embeddings"
            return f"it is {KIND_NAMES[facts.kind]}: it serves {route}, not chat"
        try:
            path = self.local_path()
            if path is None:
                return None  # downloaded at start-up or on first use
            if path.is_file():
                read_header(path)
            else:
                validate_model_folder(path)
        except (ModelLoadError, OSError) as exc:
            return str(exc)
        return None


def _json_object(path: Path) -> dict:
    """A JSON config file as a dict (ValueError when it is not one)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object")
    return data


@dataclass
class Catalog:
    """The servable models by id, their aliases, and the default."""

    entries: dict[str, Entry]
    default: str | None = None
    aliases: dict[str, str] = field(default_factory=dict)  # alias -> entry name
    adapters: dict[str, AdapterEntry] = field(default_factory=dict)  # served name -> adapter

    def lookup(self, model_id: str | None) -> Entry | None:
        """The entry ``model_id`` names exactly or by alias, or the adapter it names (by
        its served name or as ``BASE:ADAPTER``); None when it names none."""
        if model_id is None:
            return None
        name = model_id if model_id in self.entries else self.aliases.get(model_id)
        if name is not None:
            return self.entries.get(name)
        adapter = self.adapters.get(model_id)
        if adapter is None and ":" in model_id:
            base_id, _, adapter_name = model_id.rpartition(":")
            base = self.lookup(base_id)
            candidate = self.adapters.get(adapter_name)
            if (
                base is not None
                and candidate is not None
                and self.base_name(candidate) == base.name
            ):
                adapter = candidate
        return self.with_adapter(adapter) if adapter is not None else None

    def base_name(self, adapter: AdapterEntry) -> str | None:
        """The catalog name of the model ``adapter`` runs on (None: the default model)."""
        name = adapter.base or self.default
        if name is None:
            return None
        entry = self.entries.get(name) or self.entries.get(self.aliases.get(name, ""))
        return entry.name if entry is not None else None

    def with_adapter(self, adapter: AdapterEntry) -> Entry | None:
        """The base's entry, named and marked as ``adapter``'s."""
        base = self.base_name(adapter)
        if base is None:
            return None
        return replace(self.entries[base], name=adapter.name, adapter=adapter)

    def add_adapter(self, adapter: AdapterEntry) -> None:
        """Add ``adapter``, refusing an id a model or another adapter has."""
        owner = self.lookup(adapter.name)
        if owner is not None:
            kind = "adapter" if owner.adapter is not None else "model"
            raise CatalogError(
                f"{adapter.found_in}: adapter {adapter.name!r}: id already taken by {kind} "
                f"{owner.name!r}"
            )
        if adapter.base is not None and self.lookup(adapter.base) is None:
            raise CatalogError(
                f"{adapter.found_in}: adapter {adapter.name!r}: base {adapter.base!r} is not "
                "a model of this server"
            )
        self.adapters[adapter.name] = adapter

    def add(self, entry: Entry) -> None:
        """Add ``entry``, refusing a name or alias that is already taken."""
        for taken in (entry.name, *entry.aliases):
            owner = taken if taken in self.entries else self.aliases.get(taken)
            if owner is not None:
                raise CatalogError(
                    f"{entry.config or entry.found_in}: model {entry.name!r}: id {taken!r} is "
                    f"already taken by model {owner!r} ({self.entries[owner].found_in})"
                )
        self.entries[entry.name] = entry
        for alias in entry.aliases:
            if alias == entry.name:
                raise CatalogError(f"model {entry.name!r}: an alias repeats its name")
            self.aliases[alias] = entry.name


def discover(folder: Path) -> dict[str, Path]:
    """Model folders (with a config.json) and ``.gguf`` files directly in ``folder``, by
    name (the folder's name, the file's stem)."""
    found: dict[str, Path] = {}
    for child in sorted(folder.iterdir()):
        if child.name.startswith("."):
            continue
        if (child.is_file() and child.suffix.lower() == ".gguf") or (
            child.is_dir() and (child / "config.json").is_file()
        ):
            found.setdefault(child.stem if child.is_file() else child.name, child)
    return found


def read_config(path: Path) -> dict[str, Any]:
    """A ``models.toml``: its ``default`` and ``[models.*]`` tables, shape-checked."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CatalogError(f"{path}: {exc}") from None
    unknown = set(data) - {"default", "models", "adapters"}
    if unknown:
        raise CatalogError(
            f"{path}: unknown key {sorted(unknown)[0]!r} (known: default, models, adapters)"
        )
    if "default" in data and not isinstance(data["default"], str):
        raise CatalogError(f"{path}: default must be a model name, got {data['default']!r}")
    if not isinstance(data.get("models", {}), dict):
        raise CatalogError(f"{path}: models must be a table of [models.NAME] tables")
    return data


def build_catalog(
    models_dirs: list[str],
    config_file: str | None = None,
    main: Entry | None = None,
) -> Catalog:
    """The catalog of ``main`` (``serve MODEL``, the default when given), each folder's
    models and ``models.toml``, then ``config_file`` (whose names may be any folder's)."""
    catalog = Catalog({}, default=main.name if main is not None else None)
    if main is not None:
        catalog.add(main)
    pending: list[tuple[Path, dict[str, Path], dict[str, Any]]] = []
    for raw in models_dirs:
        folder = Path(raw).expanduser()
        if not folder.is_dir():
            raise CatalogError(f"--models-dir {raw}: not a folder")
        config = folder / CONFIG_NAME
        data = read_config(config) if config.is_file() else {}
        pending.append((config, discover(folder), data))
    extra = read_config(Path(config_file)) if config_file else {}
    adapter_tables = [(config, data.get("adapters", {})) for config, _, data in pending]
    adapter_tables.append((Path(config_file or ""), extra.get("adapters", {})))
    found_anywhere = {name: path for _, found, _ in pending for name, path in found.items()}
    for config, found, data in pending:
        tables = data.get("models", {})
        for name, path in found.items():
            if name not in extra.get("models", {}):
                _add(catalog, config, name, tables.get(name, {}), path)
        for name, table in tables.items():
            if name not in found and name not in extra.get("models", {}):
                _add(catalog, config, name, table, None)
        if data.get("default") and catalog.default is None:
            catalog.default = data["default"]
    for name, table in extra.get("models", {}).items():
        _add(catalog, Path(config_file or ""), name, table, found_anywhere.get(name))
    if extra.get("default") and main is None:
        catalog.default = extra["default"]
    _link_drafts(catalog)
    if catalog.default is None and catalog.entries:
        catalog.default = sorted(catalog.entries)[0]
    if catalog.default is not None and catalog.lookup(catalog.default) is None:
        raise CatalogError(f"default model {catalog.default!r} is not in the catalog")
    if catalog.default is not None:
        catalog.default = catalog.lookup(catalog.default).name  # type: ignore[union-attr]
    for source, tables in adapter_tables:
        for adapter in parse_tables(source, tables):
            catalog.add_adapter(adapter)
    return catalog


def _add(catalog: Catalog, config: Path, name: str, table: Any, found: Path | None) -> None:
    settings = parse_settings(str(config), name, table)
    base = config.parent
    if settings.path is not None:
        spec = settings.path
        if not is_default_model_name(spec):
            target = Path(spec).expanduser()
            target = target if target.is_absolute() else base / target
            if target.exists():
                spec = str(target)
            elif not is_model_name(spec):
                raise SettingsError(
                    f"{config}: model {name!r}, field 'path': {target} not found (nor is it a "
                    "hub id ORG/NAME or a model Ollama pulled)"
                )
    elif found is not None:
        spec = str(found)
    else:
        raise SettingsError(
            f"{config}: model {name!r}: no folder or .gguf of that name in {base} and no 'path'"
        )
    template = None
    if settings.chat_template is not None:
        file = Path(settings.chat_template).expanduser()
        file = file if file.is_absolute() else base / file
        try:
            template = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(f"{config}: model {name!r}, field 'chat_template': {exc}") from None
    found_in = str(found) if found is not None and settings.path is None else str(config)
    name_used = settings.served_name or name
    catalog.add(
        Entry(name_used, spec, found_in, settings, template, settings.draft_model, str(config))
    )


def _link_drafts(catalog: Catalog) -> None:
    """A ``draft_model`` naming a catalog entry loads that entry's files."""
    for name, entry in list(catalog.entries.items()):
        if entry.draft_spec is None:
            continue
        named = catalog.lookup(entry.draft_spec)
        if named is not None:
            spec = named.spec
        else:
            path = Path(entry.draft_spec).expanduser()
            if not path.is_absolute():
                path = Path(entry.config).parent / path
            if not path.exists():
                raise SettingsError(
                    f"{entry.config}: model {name!r}, field 'draft_model': "
                    f"{entry.draft_spec!r} is neither a model of this server nor a path"
                )
            spec = str(path)
        catalog.entries[name] = replace(entry, draft_spec=spec)
