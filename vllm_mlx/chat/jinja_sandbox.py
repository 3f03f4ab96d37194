"""Render chat templates in Jinja's immutable sandbox with a bound on work, time and size.

Jinja's sandbox stops a template from reaching Python internals, but not from running
forever: ``{% for a in range(100000) %}{% for b in range(100000) %}`` or a macro that doubles a
string forty times stalls the thread that renders it. Every template (the model's too) is
therefore compiled so that each loop iteration, call, filter, attribute/item access and output
counts against a ``RenderBudget`` (steps, a deadline, characters produced), and the operations
that can blow one value up in a single native call (``*``, ``**``, ``%``, ``replace``, ``join``,
``indent``, ``wordwrap``, widths in format strings, huge integer arguments) are checked before
they run. The environment matches transformers' renderer (trim/lstrip blocks, loop controls, the
``generation`` tag, ``tojson``, ``raise_exception``, ``strftime_now``, a ``namespace`` without
underscore names), so a template renders the same text as ``apply_chat_template``.
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace
from jinja2.visitor import NodeTransformer


class RenderLimitError(Exception):
    """The template went over its step, time or size budget."""


@dataclass(frozen=True)
class RenderLimits:
    max_steps: int = 2_000_000
    max_seconds: float = 5.0
    # Characters one value (and the whole output) may hold, and all outputs together may
    # produce (text captured by macros and ``{% set %}`` blocks counts too).
    max_chars: int = 32 * 1024 * 1024
    max_produced_chars: int = 64 * 1024 * 1024
    # Items one list/tuple/dict may hold (each item costs far more memory than a character).
    max_items: int = 1_000_000
    # Integer arguments to filters and methods (widths, counts) above this are refused.
    max_int_argument: int = 1_000_000


@dataclass
class RenderBudget:
    limits: RenderLimits
    deadline: float = 0.0
    steps: int = 0
    produced: int = 0
    _started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.deadline = self._started + self.limits.max_seconds

    def step(self, count: int = 1) -> None:
        self.steps += count
        if self.steps > self.limits.max_steps:
            raise RenderLimitError(f"the template ran more than {self.limits.max_steps} steps")
        if self.steps % 256 == 0 and time.monotonic() > self.deadline:
            raise RenderLimitError(f"the template ran longer than {self.limits.max_seconds:g}s")

    def check_size(self, size: int, what: str = "a value") -> None:
        if size > self.limits.max_chars:
            raise RenderLimitError(
                f"{what} of {size} characters is over the {self.limits.max_chars} limit"
            )

    def check_items(self, count: int, what: str = "a list") -> None:
        if count > self.limits.max_items:
            raise RenderLimitError(
                f"{what} of {count} items is over the {self.limits.max_items} limit"
            )

    def value(self, result: Any) -> Any:
        """Check a produced value's size; make iterators count their items as steps."""
        if isinstance(result, str):
            self.check_size(len(result))
        elif isinstance(result, (list, tuple, dict)):
            self.check_items(len(result))
        elif isinstance(result, Iterator):
            return _counted(result)
        return result

    def produce(self, size: int) -> None:
        self.produced += size
        if self.produced > self.limits.max_produced_chars:
            raise RenderLimitError(
                f"the template produced more than {self.limits.max_produced_chars} characters"
            )


_BUDGET: ContextVar[RenderBudget | None] = ContextVar("chat_template_budget", default=None)


def _budget() -> RenderBudget:
    budget = _BUDGET.get()
    if budget is None:  # compiled templates only run inside render_bounded
        raise RenderLimitError("a bounded template was rendered without a budget")
    return budget


def _counted(items: Iterable[Any]) -> Iterator[Any]:
    budget = _budget()
    for item in items:
        budget.step()
        yield item


# -- checks before an operation that can make one huge value in a single native call ---------

_WIDE_FORMAT = re.compile(r"\d{7,}")


def _check_format_string(text: Any) -> None:
    if isinstance(text, str) and ("%" in text or "{" in text) and _WIDE_FORMAT.search(text):
        raise RenderLimitError("a format width or precision of 7 or more digits is not allowed")


def _check_arguments(budget: RenderBudget, args: Iterable[Any]) -> None:
    for arg in args:
        if isinstance(arg, int) and not isinstance(arg, bool):
            if abs(arg) > budget.limits.max_int_argument:
                raise RenderLimitError(f"the integer argument {arg} is too large")


def _length(value: Any) -> int:
    return len(value) if isinstance(value, (str, list, tuple, dict)) else len(str(value))


_WHITESPACE = " \t\n\r\x0b\x0c"
# Filters that turn a string into one item per character.
_ITERATING_FILTERS = frozenset(
    {"list", "batch", "slice", "sort", "unique", "map", "select", "reject", "selectattr"}
    | {"rejectattr", "groupby", "sum", "min", "max", "dictsort"}
)
# Longest indent/separators tojson may repeat for every item.
_MAX_JSON_PADDING = 64


def _padding(arg: Any) -> int:
    """Characters an indent/separators argument repeats per item (``indent=4`` → 4)."""
    if arg is None or isinstance(arg, bool):
        return 0
    if isinstance(arg, int):
        return arg
    if isinstance(arg, (list, tuple)):
        return sum(len(str(part)) for part in arg)
    return len(str(arg))


def _check_amplifier(budget: RenderBudget, name: str, target: Any, args: list[Any]) -> None:
    """Estimate the result of replace/join/indent/wordwrap/split/tojson before running them."""
    if name in {"split", "rsplit", "splitlines"} and isinstance(target, str):
        separator = args[0] if args and isinstance(args[0], str) and name != "splitlines" else None
        count = target.count(separator) if separator else sum(map(target.count, _WHITESPACE))
        budget.check_items(count + 1, "the split text")
    elif name == "tojson":
        if any(_padding(arg) > _MAX_JSON_PADDING for arg in args):
            raise RenderLimitError(f"tojson indent/separators over {_MAX_JSON_PADDING} characters")
    elif name == "replace" and isinstance(target, str) and len(args) >= 2:
        old, new = str(args[0]), str(args[1])
        count = target.count(old) if old else len(target) + 1
        budget.check_size(len(target) + count * (len(new) - len(old)), "the replaced text")
    elif name == "join" and isinstance(target, str) and args:
        items = args[0]
        if isinstance(items, (list, tuple, str)):
            budget.check_size(len(target) * len(items), "the joined text")
    elif name in {"indent", "wordwrap"} and isinstance(target, str):
        # indent adds its (string) width to every line; wordwrap may wrap after each character
        piece = max((_length(a) for a in args if isinstance(a, str)), default=0)
        pieces = target.count("\n") + 1 if name == "indent" else len(target)
        budget.check_size(len(target) + pieces * piece, f"the {name}ed text")
    elif name in {"format", "format_map"}:
        _check_format_string(target)


_PASSED = (jinja2.runtime.Context, nodes.EvalContext, jinja2.Environment)


def _filter_precheck(budget: RenderBudget, name: str, values: list[Any], kwargs: dict) -> None:
    """``values`` are the filtered value then the filter's arguments."""
    _check_arguments(budget, [*values[1:], *kwargs.values()])
    if name == "join":  # do_join(value, d="", attribute=None)
        separator = values[1] if len(values) > 1 else kwargs.get("d", "")
        _check_amplifier(budget, "join", str(separator), [values[0]])
    elif name == "format":
        _check_format_string(values[0])
    else:
        _check_amplifier(budget, name, values[0], [*values[1:], *kwargs.values()])


def _sized(value: Any) -> Any:
    """An iterator as a list (its items counted as steps), so its length can be checked."""
    return list(_counted(value)) if isinstance(value, Iterator) else value


def _guard_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)  # keeps jinja's pass_context/pass_eval_context marker
    def guarded(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.step()
        first = next((i for i, a in enumerate(args) if not isinstance(a, _PASSED)), None)
        if first is not None:
            if name == "join":
                args = (*args[:first], _sized(args[first]), *args[first + 1 :])
            values = list(args[first:])
            if name in _ITERATING_FILTERS and isinstance(values[0], str):
                budget.check_items(len(values[0]), f"the characters given to {name}")
            _filter_precheck(budget, name, values, kwargs)
        return budget.value(func(*args, **kwargs))

    return guarded


# -- the compiled template counts its loops and outputs ----------------------------------------

_ITER_FILTER = "vllm_mlx_counted_iter"
_OUTPUT_FILTER = "vllm_mlx_counted_output"
_LITERAL_FILTER = "vllm_mlx_counted_literal"


@jinja2.pass_context
def _iter_filter(_context: Any, value: Any) -> Iterator[Any]:
    return _counted(value)


@jinja2.pass_context
def _output_filter(_context: Any, value: Any) -> Any:
    budget = _budget()
    budget.step()
    budget.produce(len(value) if isinstance(value, str) else len(str(value)))
    return value


@jinja2.pass_context
def _literal_filter(_context: Any, size: int) -> str:
    budget = _budget()
    budget.step()
    budget.produce(size)
    return ""


class _CountingTransformer(NodeTransformer):
    """Route every loop's iterable and every output through the counting filters."""

    def __init__(self, environment: jinja2.Environment):
        self.environment = environment

    def _wrapped(self, node: nodes.Expr, name: str) -> nodes.Filter:
        wrapper = nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)
        wrapper.set_environment(self.environment)
        return wrapper

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = self._wrapped(cast(nodes.Expr, node.iter), _ITER_FILTER)
        return node

    def visit_Output(self, node: nodes.Output) -> nodes.Node:
        """Each value is counted as it is output; the literal text once per output node."""
        self.generic_visit(node)
        literal = sum(len(c.data) for c in node.nodes if isinstance(c, nodes.TemplateData))
        counted: list[nodes.Expr] = [
            child if isinstance(child, nodes.TemplateData) else self._wrapped(child, _OUTPUT_FILTER)
            for child in node.nodes
        ]
        if literal:
            counted.insert(
                0, self._wrapped(nodes.Const(literal, lineno=node.lineno), _LITERAL_FILTER)
            )
        node.nodes = counted
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return self._wrapped(node, _OUTPUT_FILTER)


class _CountingCodeGenerator(CodeGenerator):
    def visit_Template(self, node: nodes.Template, frame: Frame | None = None) -> None:
        _CountingTransformer(self.environment).visit(node)
        super().visit_Template(node, frame)


class _GenerationTag(Extension):
    """``{% generation %}…{% endgeneration %}`` marks assistant text for training masks;
    rendering a prompt needs only its body."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class _TemplateNamespace(Namespace):
    """A ``namespace()`` that refuses underscore names (no reaching into internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 (Jinja's own signature trick)
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _TemplateNamespace._check(name)
        Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check(name)
        Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} is not allowed")


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:  # noqa: A002 (the name templates call it with)
    _check_format_string(format)
    return datetime.now().strftime(format)


def _plain_dict(*args: Any, **kwargs: Any) -> dict[Any, Any]:
    return dict(*args, **kwargs)


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with every operation counted against the render's budget."""

    code_generator_class = _CountingCodeGenerator
    intercepted_binops = frozenset({"+", "*", "**", "%", "//"})

    def __init__(self) -> None:
        super().__init__(
            trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, loopcontrols]
        )
        self.filters["tojson"] = _tojson
        self.filters = {name: _guard_filter(name, f) for name, f in self.filters.items()}
        self.filters[_ITER_FILTER] = _iter_filter
        self.filters[_OUTPUT_FILTER] = _output_filter
        self.filters[_LITERAL_FILTER] = _literal_filter
        self.globals.update(
            raise_exception=_raise_exception,
            strftime_now=_strftime_now,
            dict=_plain_dict,
            namespace=_TemplateNamespace,
        )

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.step()
        if not isinstance(obj, (jinja2.runtime.Macro, type)) and obj is not _plain_dict:
            _check_arguments(budget, [*args, *kwargs.values()])
            name = getattr(obj, "__name__", "")
            method = getattr(obj, "__wrapped__", obj)  # the sandbox wraps str.format
            target = getattr(method, "__self__", None)
            if name == "join" and isinstance(target, str) and args:
                args = (_sized(args[0]), *args[1:])
            _check_amplifier(budget, name, target, [*args])
        return budget.value(super().call(context, obj, *args, **kwargs))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        budget = _budget()
        budget.step()
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(times, int):
                    budget.check_size(len(seq) * max(times, 0), "a repeated value")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int):
            if right > 0 and abs(left) > 1 and abs(left).bit_length() * right > 100_000:
                raise RenderLimitError("the power is too large")
        elif operator == "%":
            _check_format_string(left)
            _check_arguments(budget, right if isinstance(right, tuple) else [right])
        return budget.value(super().call_binop(context, operator, left, right))

    def getattr(self, obj: Any, attribute: str) -> Any:
        _budget().step()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _budget().step()
        return super().getitem(obj, argument)


_ENVIRONMENT = BoundedSandbox()


@functools.lru_cache(maxsize=32)
def compile_template(source: str) -> jinja2.Template:
    """Compile once per distinct template text (the model's, or an allowed request's)."""
    return _ENVIRONMENT.from_string(source)


def render_bounded(
    source: str, variables: dict[str, Any], limits: RenderLimits | None = None
) -> str:
    """Render with a fresh budget; raises RenderLimitError past it, TemplateError otherwise."""
    budget = RenderBudget(limits or RenderLimits())
    template = compile_template(source)
    token = _BUDGET.set(budget)
    try:
        parts: list[str] = []
        size = 0
        for chunk in template.generate(variables):
            size += len(chunk)
            budget.check_size(size, "the rendered prompt")
            parts.append(chunk)
        return "".join(parts)
    finally:
        _BUDGET.reset(token)


def parse_template(source: str) -> nodes.Template:
    """The template's syntax tree in the renderer's own environment (its tags and filters)."""
    return _ENVIRONMENT.parse(source)
