"""The adapters a server can serve: ``--adapter NAME=PATH`` (on the server's default model),
``[adapters.NAME]`` tables in ``models.toml`` (``path``, ``base``, ``served_name``) and
those loaded at run time (``POST /v1/adapters``).

A request names one by its served name or as ``BASE:ADAPTER``; either way it runs on
the base's loaded weights with the adapter's low-rank updates (``models.lora``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..models.adapters import is_adapter_folder
from .settings import SettingsError


@dataclass(frozen=True)
class AdapterEntry:
    """One servable adapter."""

    name: str  # the id clients use (its served name)
    path: Path  # the folder mlx_lm.lora wrote
    base: str | None  # the model it runs on (a catalog id); None: the default model
    found_in: str  # --adapter, a models.toml, or the API


class AdapterSettings(BaseModel):
    """An ``[adapters.NAME]`` table."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    path: str = Field(min_length=1)
    base: str | None = Field(default=None, min_length=1)  # None: the default model
    served_name: str | None = Field(default=None, min_length=1, max_length=256)


def parse_flag(value: str) -> tuple[str, str]:
    """``NAME=PATH`` of ``--adapter`` (ValueError naming the flag's shape)."""
    name, sep, path = value.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise ValueError(f"--adapter {value!r}: expected NAME=PATH")
    return name.strip(), path.strip()


def checked_folder(path: str | Path, where: str) -> Path:
    """An existing adapter folder (SettingsError naming ``where`` otherwise)."""
    folder = Path(path).expanduser()
    if not is_adapter_folder(folder):
        raise SettingsError(
            f"{where}: {folder} is not an adapter folder (adapter_config.json and "
            "adapters.safetensors, as mlx_lm.lora writes)"
        )
    return folder.resolve()


def parse_tables(source: Path, tables: Any) -> list[AdapterEntry]:
    """The ``[adapters.*]`` tables of ``source``; paths relative to its folder."""
    if not isinstance(tables, dict):
        raise SettingsError(f"{source}: adapters must be a table of [adapters.NAME] tables")
    entries = []
    for name, table in tables.items():
        try:
            settings = AdapterSettings.model_validate(table)
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(part) for part in error["loc"]) or "?"
            raise SettingsError(
                f"{source}: adapter {name!r}, field {field!r}: {error['msg']}"
            ) from None
        path = Path(settings.path).expanduser()
        path = path if path.is_absolute() else source.parent / path
        folder = checked_folder(path, f"{source}: adapter {name!r}, field 'path'")
        entries.append(
            AdapterEntry(settings.served_name or name, folder, settings.base, str(source))
        )
    return entries
