"""What a model name that is not a path means: a hub id ``ORG/NAME[@REVISION][:QUANT]``
(llama.cpp's ``-hf`` form for GGUF repos), and which GGUF file of a repo a quant tag picks.

Pure string work, shared by the hub download, LM Studio's folder and ``vllm-mlx rm``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from vllm_mlx.models.errors import ModelLoadError

_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
_REPO = rf"(?P<repo>{_PART}/{_PART})"
_REV = r"@(?P<rev>[A-Za-z0-9][A-Za-z0-9._/-]{0,199})"
_QUANT = r":(?P<quant>[A-Za-z0-9][A-Za-z0-9._+-]{0,63})"
_FORMS = (
    re.compile(rf"{_REPO}(?:{_REV})?(?:{_QUANT})?"),
    re.compile(rf"{_REPO}(?:{_QUANT})(?:{_REV})"),
)
# The GGUF tensor types the importer reads (vllm_mlx.models.gguf.TENSOR_TYPES).
IMPORTABLE_QUANTS = ("Q4_0", "Q4_1", "Q8_0", "F16", "F32")
# A quant type's name inside a GGUF file name (llama.cpp's naming: Q4_K_M, IQ2_XS, BF16...).
_QUANT_IN_NAME = re.compile(
    r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32)(?![A-Za-z0-9])", re.I
)
_SPLIT = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.I)


@dataclass(frozen=True)
class HubRef:
    """A model on the hub: its repo, an optional revision and an optional GGUF quant tag."""

    repo_id: str
    revision: str | None = None
    quant: str | None = None

    @property
    def name(self) -> str:
        """The id it is served under: the repo and its tag, without the revision."""
        return f"{self.repo_id}:{self.quant}" if self.quant else self.repo_id

    def __str__(self) -> str:
        revision = f"@{self.revision}" if self.revision else ""
        return f"{self.name}{revision}"


def parse_hub_ref(spec: str) -> HubRef | None:
    """``ORG/NAME``, ``ORG/NAME@REV``, ``ORG/NAME:QUANT`` (either order with both), else None."""
    for form in _FORMS:
        match = form.fullmatch(spec.strip())
        if match and ".." not in match["repo"] and "--" not in match["repo"]:
            return HubRef(match["repo"], match["rev"], match["quant"])
    return None


def quant_of(filename: str) -> str | None:
    """The quant tag a GGUF file name carries (``Q4_K_M`` in ``x-Q4_K_M.gguf``), if any."""
    found = _QUANT_IN_NAME.findall(PurePosixPath(filename).stem)
    return found[-1].upper() if found else None


def gguf_files(files: list[str]) -> list[str]:
    """The model GGUFs among a repo's files (a vision projector is not a model)."""
    return sorted(
        f
        for f in files
        if f.lower().endswith(".gguf") and "mmproj" not in PurePosixPath(f).name.lower()
    )


def pick_gguf(files: list[str], quant: str | None, where: str) -> str | None:
    """The GGUF among ``files`` that ``quant`` names (None: the only one; None back when
    there is no GGUF). Several candidates, a missing tag or a split file are errors that
    list what there is to choose from."""
    ggufs = gguf_files(files)
    if not ggufs:
        if quant:
            raise ModelLoadError(f"{where} has no GGUF files, so no :{quant} to pick")
        return None
    if quant is None:
        chosen = ggufs
    else:
        tag = re.compile(rf"(?<![A-Za-z0-9]){re.escape(quant)}(?![A-Za-z0-9]|_[A-Za-z0-9])", re.I)
        chosen = [f for f in ggufs if tag.search(PurePosixPath(f).name)]
    if len(chosen) == 1:
        if _SPLIT.search(chosen[0]):
            raise ModelLoadError(
                f"{where}: {chosen[0]} is one part of a split GGUF, which vllm-mlx cannot "
                "import; merge the parts with llama.cpp's `llama-gguf-split --merge`"
            )
        return chosen[0]
    choices = "\n".join(f"  {where}:{quant_of(f) or PurePosixPath(f).stem}  ({f})" for f in ggufs)
    if not chosen:
        raise ModelLoadError(f"{where} has no GGUF file tagged {quant!r}; it has:\n{choices}")
    raise ModelLoadError(f"{where} has several GGUF files; name one with a tag:\n{choices}")


def check_importable_quant(quant: str | None, where: str) -> None:
    """Refuse, before any download, a tag naming a GGUF type the importer cannot read."""
    if quant is None:
        return
    named = quant_of(quant + ".gguf")
    if named is not None and named not in IMPORTABLE_QUANTS:
        raise ModelLoadError(
            f"{where}:{quant}: vllm-mlx imports GGUF files of types "
            f"{', '.join(IMPORTABLE_QUANTS)}, not {named}; pick one of those tags, or an MLX "
            "repo of the model (mlx-community/… holds most)"
        )
