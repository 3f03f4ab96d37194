"""The argument dialects: how a family writes a call's name and arguments (see `base`).

Each dialect is one module holding its reader, its writer and its grammar. Adding one means
writing that module and registering its class here; a family then names an instance in its
`ToolCallFormat` (`families.catalog`).
"""

from __future__ import annotations

from .base import ArgumentReader, Dialect, Layout, Status
from .dsml import Dsml
from .gemma import GEMMA, GemmaDialect
from .json_arguments import JSON, JsonDialect
from .json_named import JSON_NAMED, JsonNamed
from .keyed import JsonKeyed
from .nested_xml import NestedXml
from .python import PYTHON, PythonDialect
from .python_forced import FORCED_PYTHON, ForcedPythonDialect
from .recipient import RECIPIENT, RecipientDialect
from .spaced import SpacedNameXml
from .xml_arguments import QWEN_XML, Xml

# Every dialect, by name, in the order error messages list them.
DIALECTS: dict[str, type[Dialect]] = {
    d.name: d
    for d in (
        JsonDialect,
        JsonNamed,
        Xml,
        PythonDialect,
        GemmaDialect,
        Dsml,
        JsonKeyed,
        RecipientDialect,
        ForcedPythonDialect,
        NestedXml,
        SpacedNameXml,
    )
}

__all__ = [
    "DIALECTS",
    "FORCED_PYTHON",
    "GEMMA",
    "JSON",
    "JSON_NAMED",
    "JsonKeyed",
    "NestedXml",
    "PYTHON",
    "RECIPIENT",
    "ArgumentReader",
    "Dialect",
    "Dsml",
    "Layout",
    "SpacedNameXml",
    "Status",
    "QWEN_XML",
    "Xml",
]
