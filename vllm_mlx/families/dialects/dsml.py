"""The ``dsml`` dialect: DeepSeek V3.2's parameters, ``<｜DSML｜parameter name="k"
string="true|false">v</｜DSML｜parameter>`` (V4 the same inside ``<｜DSML｜tool_calls>``).

It is the ``xml`` dialect plus the ``string`` attribute: ``string="true"`` values are
verbatim (unless the tool's schema declares another type: then they are typed by it, as vLLM
does), ``string="false"`` values are JSON. An invoke body may also be one JSON object instead
of parameters (SMG's "direct JSON" form). The writer and the grammar write the attribute from
the schema: ``true`` for strings, ``false`` for everything else.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from ..lark import LarkRules
from ..literal import skip_space
from ..value_types import declared_types, typed_value
from .base import ArgumentReader, Layout, Status, Step
from .json_arguments import JsonArguments
from .xml_arguments import Xml, XmlArguments, xml_value_text

_ATTRIBUTE = re.compile(r'\s*(?:string\s*=\s*"(true|false)"\s*)?>')
_MAX_ATTRIBUTE = 24  # characters between the key's quote and the tag's ``>``


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _attribute(is_string: bool) -> str:
    return f' string="{"true" if is_string else "false"}">'


@dataclass(frozen=True)
class Dsml(Xml):
    """``KEY_START key" string="…">value VALUE_END`` (``key_end`` is the key's quote)."""

    name: ClassVar[str] = "dsml"

    def reader(self, properties: dict[str, Any], named: bool = True) -> ArgumentReader:
        return DsmlArguments(self, properties)

    def render_arguments(self, arguments: dict) -> str:
        return "".join(
            f"{self.key_start}{k}{self.key_end}{_attribute(isinstance(v, str))}"
            f"{xml_value_text(v)}{self.value_end}\n"
            for k, v in arguments.items()
        )

    def closing(self, layout: Layout, named: bool = True) -> str:
        """A JSON body may be followed by a newline before the invoke's end."""
        return "\n" + super().closing(layout, named)

    def _parameter(
        self, layout: Layout, function: str, key: str, prop: Any, root: dict, g: LarkRules
    ) -> list[str]:
        """The xml dialect's rule for one parameter, with the attribute its type implies."""
        types = declared_types(prop)
        is_string = not types or "string" in types
        plain = Xml(self.key_start, self.key_end, self.value_end, _attribute(is_string))
        return plain._parameter(layout, function, key, prop, root, g)


class DsmlArguments(XmlArguments):
    """XML parameters with the ``string`` attribute, or one JSON object."""

    def __init__(self, params: Dsml, properties: dict[str, dict]) -> None:
        super().__init__(params, properties)
        self.settles = "".join(sorted(set(self.settles) | {">", "}"}))
        self._attr: str | None = None  # the current parameter's ``string`` attribute
        self._json: JsonArguments | None = None
        self._decided = False

    def quick(self, text: str) -> str | None:
        if self._json is not None:
            return self._json.quick(text)
        if not self._decided:
            return None
        return super().quick(text)

    def feed(self, text: str, final: bool) -> Step:
        if not self._decided:
            at = skip_space(text, 0)
            if at == len(text) and not final:
                return "", 0, Status.MORE
            self._decided = True
            if text.startswith("{", at):
                self._json = JsonArguments()
        if self._json is not None:
            return self._json.feed(text, final)
        return super().feed(text, final)

    def _read_key(self, text: str, pos: int, final: bool) -> tuple[str, int] | None:
        at = text.find(self._key_end, pos)
        if at < 0 or at - pos > 256:
            return None
        m = _ATTRIBUTE.match(text, at + 1)
        if m is None or m.end() - at > _MAX_ATTRIBUTE:
            return None
        self._attr = m.group(1)
        return text[pos:at].strip(), m.end()

    def _is_string(self, key: str) -> bool:
        types = declared_types(self._properties.get(key))
        if self._attr == "false":
            return False
        return not types or "string" in types

    def _close_value(self, out: list[str]) -> None:
        if self._string or self._attr != "false":
            super()._close_value(out)
            return
        schema = self._properties.get(self._key)
        if declared_types(schema):
            value = typed_value(self._pending, schema)
        else:
            try:
                value = json.loads(self._pending, parse_constant=_no_constant)
            except ValueError:
                value = self._pending
        out.append(json.dumps(value, ensure_ascii=False))
        self._pending = ""
