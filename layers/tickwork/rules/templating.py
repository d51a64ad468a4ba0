"""Tenant templates, rendered in a sandbox. Generic: rules render their action payloads with
it, and anything else that turns a context into a message can.

A template is a JSON value whose strings are Jinja2 templates; keys and non-string values
are kept as they are. Rendering uses Jinja2's `SandboxedEnvironment` with `StrictUndefined`
and less than Jinja offers, so a tenant's template reaches their context data and nothing
of Python's:

- no attributes or methods of any object: `a.b` reads key `b` of a mapping (and `a[0]`
  an item of a list); transformations are filters from an allowlist;
- no macros, call blocks, includes, imports or inheritance, and loops are not nested;
- `range` stops at 1,000, `*` and `**` and string `%` formatting are refused where they
  would build large values, and a rendered string stops at 64 KiB.

A template that does not compile is an `InvalidTemplateError` (an InputError naming the
field, refused when it is written); a field missing at render time is a `RenderError`
naming the field, and nothing of that payload is used: never a half-rendered message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, TemplateError, TemplateSyntaxError, nodes
from jinja2.environment import Template
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment

from tickwork.errors import InputError, TickworkError

MAX_TEMPLATE_CHARS = 10_000
MAX_OUTPUT_CHARS = 65_536
MAX_RANGE = 1_000
MAX_DEPTH = 20
MAX_EXPONENT = 64

# Filters that cannot reach Python objects and cannot build a value much larger than
# their input. (Left out: attr, batch, center, format, indent, pprint, slice, wordwrap,
# xmlattr, safe, forceescape.)
ALLOWED_FILTERS = frozenset(
    {
        "abs", "capitalize", "count", "d", "default", "dictsort", "e", "escape",
        "filesizeformat", "first", "float", "groupby", "int", "items", "join", "last",
        "length", "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace",
        "reverse", "round", "select", "selectattr", "sort", "string", "striptags", "sum",
        "title", "tojson", "trim", "truncate", "unique", "upper", "urlencode", "wordcount",
    }
)  # fmt: skip
FORBIDDEN_NODES: tuple[type[nodes.Node], ...] = (
    nodes.Macro,
    nodes.CallBlock,
    nodes.Include,
    nodes.Import,
    nodes.FromImport,
    nodes.Extends,
    nodes.Block,
)


class InvalidTemplateError(InputError):
    """A template that does not compile, or uses what the sandbox does not offer."""

    code = "invalid_template"


class RenderError(TickworkError):
    """A template met a missing field (or a refused operation) while rendering."""

    code = "render_failed"

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message, details={"field": field})
        self.field = field


class _OutputTooLargeError(Exception):
    pass


def _safe_range(*args: int) -> range:
    values = range(*args)
    if len(values) > MAX_RANGE:
        raise SecurityError(f"range() of more than {MAX_RANGE} items")
    return values


def _size(value: Any) -> int | None:
    return len(value) if isinstance(value, str | list | tuple) else None


def _replace(value: Any, old: str, new: str, count: int | None = None) -> str:
    text, old, new = str(value), str(old), str(new)
    hits = text.count(old) if count is None else min(count, text.count(old))
    if len(text) + hits * max(0, len(new) - len(old)) > MAX_OUTPUT_CHARS:
        raise SecurityError(f"replace() would make more than {MAX_OUTPUT_CHARS} characters")
    return text.replace(old, new, -1 if count is None else count)


def _datetime(value: Any, fmt: str = "%Y-%m-%d %H:%M", tz: str | None = None) -> str:
    """An ISO 8601 instant (as contexts carry them) formatted, optionally in zone `tz`."""
    from tickwork.wallclock import zone

    instant = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if tz is not None:
        if instant.tzinfo is None:
            raise SecurityError(f"{value!r} has no offset to convert to {tz}")
        instant = instant.astimezone(zone(tz))
    return instant.strftime(str(fmt))


class _Sandbox(SandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "%"})

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        return False  # data only: a.b is a key lookup (getattr below), never a method

    def getattr(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, Mapping):
            if attribute in obj:
                return obj[attribute]
            return self.undefined(obj=obj, name=attribute)
        return super().getattr(obj, attribute)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                size = _size(seq)
                if size is not None and isinstance(times, int) and size * times > MAX_OUTPUT_CHARS:
                    raise SecurityError(f"a value of more than {MAX_OUTPUT_CHARS} items")
        if operator == "**" and isinstance(right, int | float) and abs(right) > MAX_EXPONENT:
            raise SecurityError(f"an exponent above {MAX_EXPONENT}")
        if operator == "%" and isinstance(left, str):
            raise SecurityError("string formatting with % is not available; use filters")
        return super().call_binop(context, operator, left, right)


def _environment() -> _Sandbox:
    env = _Sandbox(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
    filters: dict[str, Callable[..., Any]] = {
        name: f for name, f in env.filters.items() if name in ALLOWED_FILTERS
    }
    filters["replace"] = _replace
    filters["datetime"] = _datetime
    env.filters = filters
    env.globals = {"range": _safe_range}
    return env


_ENV = _environment()


def _loop_depth(node: nodes.Node, depth: int = 0) -> int:
    here = depth + 1 if isinstance(node, nodes.For) else depth
    return max([here, *(_loop_depth(child, here) for child in node.iter_child_nodes())])


@lru_cache(maxsize=1024)
def _compile(source: str) -> Template:
    tree = _ENV.parse(source)
    for forbidden in FORBIDDEN_NODES:
        found = next(iter(tree.find_all(forbidden)), None)
        if found is not None:
            name = type(found).__name__.lower()
            raise SecurityError(f"{name} is not available in templates")
    for flt in tree.find_all(nodes.Filter):
        if flt.name not in _ENV.filters:
            raise SecurityError(f"no filter named {flt.name!r}")
    if _loop_depth(tree) > 1:
        raise SecurityError("loops cannot be nested")
    return _ENV.from_string(tree)


def compile_string(source: str, field: str) -> Template:
    """One template string, compiled, or InvalidTemplateError naming `field`."""
    if len(source) > MAX_TEMPLATE_CHARS:
        raise InvalidTemplateError(
            f"{field}: the template is longer than {MAX_TEMPLATE_CHARS} characters", field=field
        )
    try:
        return _compile(source)
    except TemplateSyntaxError as exc:
        raise InvalidTemplateError(
            f"{field}: the template does not compile: {exc.message} (line {exc.lineno})",
            field=field,
        ) from exc
    except (SecurityError, TemplateError) as exc:
        raise InvalidTemplateError(f"{field}: {exc}", field=field) from exc


def render_string(template: Template, context: Mapping[str, Any], field: str) -> str:
    """A compiled template rendered, or RenderError naming `field` and the problem."""
    try:
        return "".join(_bounded(template.generate(dict(context))))
    except _OutputTooLargeError as exc:
        raise RenderError(
            f"{field}: the rendered text is longer than {MAX_OUTPUT_CHARS} characters",
            field=field,
        ) from exc
    except TemplateError as exc:  # UndefinedError, SecurityError, ...
        raise RenderError(f"{field}: {exc.message or exc}", field=field) from exc
    except (ArithmeticError, TypeError, ValueError, LookupError, RecursionError) as exc:
        raise RenderError(f"{field}: {type(exc).__name__}: {exc}", field=field) from exc


def _bounded(chunks: Iterator[str]) -> Iterator[str]:
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > MAX_OUTPUT_CHARS:
            raise _OutputTooLargeError
        yield chunk


class JsonTemplate:
    """A JSON value whose strings are templates (an action's payload, a target key), compiled
    once. `render` gives the same shape with every string rendered from the context."""

    def __init__(self, source: Any, field: str) -> None:
        self.source = source
        self.field = field
        self._compiled = self._compile(source, field, 0)

    @classmethod
    def _compile(cls, value: Any, field: str, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise InvalidTemplateError(f"{field}: nested deeper than {MAX_DEPTH}", field=field)
        if isinstance(value, str):
            return compile_string(value, field)
        if isinstance(value, Mapping):
            return {k: cls._compile(v, f"{field}.{k}", depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [cls._compile(v, f"{field}[{i}]", depth + 1) for i, v in enumerate(value)]
        return value

    def render(self, context: Mapping[str, Any]) -> Any:
        """The rendered value; RenderError (naming the field) if any string fails."""
        return self._render(self._compiled, context, self.field)

    @classmethod
    def _render(cls, value: Any, context: Mapping[str, Any], field: str) -> Any:
        if isinstance(value, Template):
            return render_string(value, context, field)
        if isinstance(value, dict):
            return {k: cls._render(v, context, f"{field}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [cls._render(v, context, f"{field}[{i}]") for i, v in enumerate(value)]
        return value


def is_template(source: str) -> bool:
    """Whether a string has template syntax (a plain string renders as itself)."""
    return any(mark in source for mark in ("{{", "{%", "{#"))
