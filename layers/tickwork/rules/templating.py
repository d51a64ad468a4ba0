"""Tenant templates, rendered in a sandbox. Generic: rules render their action payloads with
it, and anything else that turns a context into a message can.

A template is a JSON value whose strings are Jinja2 templates; keys and non-string values
are kept as they are. Rendering uses Jinja2's `SandboxedEnvironment` with `StrictUndefined`
and less than Jinja offers, so a tenant's template reaches their context data and nothing
of Python's:

- no attributes or methods of any object: `a.b` reads key `b` of a mapping (and `a[0]`
  an item of a list); transformations are filters from an allowlist;
- no macros, call blocks, includes, imports or inheritance; loops are neither nested nor
  `recursive`; `range` stops at 1,000, string `%` formatting is refused;
- every operation is counted and sized against a budget (tickwork.rules.metering): every
  arithmetic operator and `~` goes through the sandbox (integers are sized from their
  operands' bit lengths before `*` and `**` run, strings and lists before `*`, `+`, `~`,
  join and replace build them), every filter and test is wrapped to count itself and to
  size what it reads whole and what it returns, loop iterations and output chunks count,
  and a rendered string stops at 64 KiB.

A template that does not compile is an `InvalidTemplateError` (an InputError naming the
field, refused when it is written), as is one whose constant expressions (those that read
no data, such as `9 ** 9999`) already break the budget: they are evaluated when the
template is compiled, with the same checks. A field missing at render time, or a budget
exceeded, is a `RenderError` naming the field and the reason, and nothing of that payload
is used: never a half-rendered message.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from functools import lru_cache, wraps
from typing import Any, cast

from jinja2 import StrictUndefined, TemplateError, TemplateSyntaxError, nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.environment import Template
from jinja2.exceptions import SecurityError
from jinja2.filters import do_round, make_attrgetter
from jinja2.nodes import EvalContext
from jinja2.runtime import Context, str_join
from jinja2.sandbox import SandboxedEnvironment
from jinja2.utils import pass_environment, pass_eval_context

from tickwork.platform.errors import InputError, TickworkError
from tickwork.platform.wallclock import zone
from tickwork.rules.metering import (
    MAX_VALUE,
    BudgetExceededError,
    RenderBudget,
    current,
    deep_size,
    metering,
    metering_active,
)
from tickwork.rules.metering import start as start_metering
from tickwork.rules.metering import stop as stop_metering

MAX_TEMPLATE_CHARS = 10_000
MAX_OUTPUT_CHARS = 65_536
MAX_RANGE = 1_000
MAX_DEPTH = 20
MAX_ROUND_DIGITS = 20
MAX_TRIM_CHARS = 100
MAX_DATE_FORMAT = 200

# Filters that cannot reach Python objects. (Left out: attr, batch, center, format, indent,
# pprint, slice, wordwrap, xmlattr, safe, forceescape.)
ALLOWED_FILTERS = frozenset(
    {
        "abs", "capitalize", "count", "d", "default", "dictsort", "e", "escape",
        "filesizeformat", "first", "float", "groupby", "int", "items", "join", "last",
        "length", "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace",
        "reverse", "round", "select", "selectattr", "sort", "string", "striptags", "sum",
        "title", "tojson", "trim", "truncate", "unique", "upper", "urlencode", "wordcount",
    }
)  # fmt: skip
# Filters (and tests) that turn their whole input into text, or walk and copy all of it:
# the input's full size is bounded and charged before they run (join does it itself, with
# its separator). (Case-insensitive sort,
# max, min, unique and groupby make a lower-cased copy of every string.) None of the
# allowed filters returns more than 12 times its input (urlencode: a 4-byte character is
# %XX 4 times), and what every filter returns is sized right after.
READS_WHOLE = frozenset(
    {
        "capitalize", "datetime", "dictsort", "e", "escape", "filesizeformat", "float",
        "groupby", "int", "lower", "max", "min", "replace", "sort", "string",
        "striptags", "title", "tojson", "trim", "truncate", "unique", "upper", "urlencode",
        "wordcount",
    }
)  # fmt: skip
TESTS_READING_WHOLE = frozenset({"lower", "upper"})
FORBIDDEN_NODES: tuple[type[nodes.Node], ...] = (
    nodes.Macro,
    nodes.CallBlock,
    nodes.Include,
    nodes.Import,
    nodes.FromImport,
    nodes.Extends,
    nodes.Block,
)
# Tests that compare, and the comparison each is (sized like `==` and `in` in expressions).
COMPARISON_TESTS = {
    "in": "in", "==": "eq", "eq": "eq", "equalto": "eq", "!=": "ne", "ne": "ne",
    ">": "gt", "gt": "gt", "greaterthan": "gt", ">=": "gteq", "ge": "gteq",
    "<": "lt", "lt": "lt", "lessthan": "lt", "<=": "lteq", "le": "lteq",
}  # fmt: skip
# Arithmetic goes through the sandbox's call_binop/call_unop (all of it: only `and` and
# `or` stay Python's, since they must not evaluate their right side and build nothing).
BINOPS = frozenset({"+", "-", "*", "/", "//", "%", "**"})
UNOPS = frozenset({"+", "-", "not "})


class InvalidTemplateError(InputError):
    """A template that does not compile, or uses what the sandbox does not offer."""

    code = "invalid_template"


class RenderError(TickworkError):
    """A template met a missing field (or a refused operation, or its budget) while
    rendering."""

    code = "render_failed"

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message, details={"field": field})
        self.field = field


class _OutputTooLargeError(Exception):
    pass


# ------------------------------------------------------------------- the code generator


class _MeteredCodeGenerator(CodeGenerator):
    """Jinja's code generator with what the sandbox does not intercept routed through the
    environment: `~` (Concat), comparisons (`==`, `<`, `in`, ...), output chunks written
    into a buffer, and loops' iterables (`metered_iter`: one operation per item)."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        # Not folded at compile time (the base class's is): it runs, metered, at render.
        if frame.eval_ctx.volatile:
            join = "(markup_join if context.eval_ctx.volatile else str_join)"
        elif frame.eval_ctx.autoescape:
            join = "markup_join"
        else:
            join = "str_join"
        self.write(f"environment.metered_concat({join}, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    def visit_For(self, node: nodes.For, frame: Frame) -> None:
        self.__dict__.setdefault("_loop_iterables", set()).add(id(node.iter))
        super().visit_For(node, frame)

    def visit(self, node: nodes.Node, *args: Any, **kwargs: Any) -> Any:
        """A loop's iterable is wrapped in metered_iter: one operation per item."""
        if id(node) not in self.__dict__.get("_loop_iterables", ()):
            return super().visit(node, *args, **kwargs)
        self.write("environment.metered_iter(")
        super().visit(node, *args, **kwargs)
        self.write(")")
        return None

    def visit_Compare(self, node: nodes.Compare, frame: Frame) -> None:
        # All operands are evaluated first (a chain `a < b < c` is rare in templates).
        self.write("environment.metered_compare(")
        self.visit(node.expr, frame)
        self.write(", (")
        for operand in node.ops:
            self.write(f"({operand.op!r}, ")
            self.visit(operand.expr, frame)
            self.write("), ")
        self.write("))")

    # Output: a chunk yielded at the top level is counted by render_string as it arrives;
    # one written into a buffer (a `{% set %}` or `{% filter %}` block's) by
    # metered_output, which is wrapped around it here.
    _buffered = False

    def visit_Output(self, node: nodes.Output, frame: Frame) -> None:
        self._buffered = frame.buffer is not None
        super().visit_Output(node, frame)

    def _output_const_repr(self, group: Iterable[Any]) -> str:
        text = super()._output_const_repr(group)
        return f"environment.metered_output({text})" if self._buffered else text

    def _output_child_pre(self, node: nodes.Expr, frame: Frame, finalize: Any) -> None:
        if frame.buffer is not None:
            self.write("environment.metered_output(")
        super()._output_child_pre(node, frame, finalize)

    def _output_child_post(self, node: nodes.Expr, frame: Frame, finalize: Any) -> None:
        super()._output_child_post(node, frame, finalize)
        if frame.buffer is not None:
            self.write(")")


# ------------------------------------------------------------------------- the sandbox


def _sequence_size(operator: str, left: Any, right: Any) -> int | None:
    """The length of `left operator right` for sequences, computed before building it."""
    if operator == "*":
        for seq, times in ((left, right), (right, left)):
            if isinstance(seq, str | list | tuple) and isinstance(times, int):
                return len(seq) * max(times, 0)
    elif (
        operator == "+"
        and isinstance(left, str | list | tuple)
        and isinstance(right, str | list | tuple)
    ):
        return len(left) + len(right)
    return None


def _comparison_work(op: str, left: Any, right: Any) -> int:
    """At most how many characters or items comparing `left` and `right` reads: `x in l`
    compares x with each item (each comparison reads at most x), `s in t` searches t, and
    `a == b` reads at most the smaller side."""
    if op in ("in", "notin"):
        if isinstance(right, str):
            return len(right) + (len(left) if isinstance(left, str) else 1)
        if isinstance(right, list | tuple):
            return len(right) * (deep_size(left, MAX_VALUE) + 1)
        return deep_size(left, MAX_VALUE)  # a mapping's key (hashed), a range's number
    smaller = deep_size(left, MAX_VALUE)
    return min(smaller, deep_size(right, smaller))


def _finalize(value: Any) -> Any:
    """Every `{{ ... }}` before it becomes text: a container's full size is bounded first.
    (A string is already sized; a number has at most MAX_INT_DIGITS digits.)"""
    if not isinstance(value, str | int | float) and value is not None:
        current().read_whole(value)
    return value


class _Sandbox(SandboxedEnvironment):
    code_generator_class = _MeteredCodeGenerator
    intercepted_binops = BINOPS
    intercepted_unops = UNOPS

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        return False  # data only: a.b is a key lookup (getattr below), never a method

    def getattr(self, obj: Any, attribute: str) -> Any:
        current().tick()
        if isinstance(obj, dict) or isinstance(obj, Mapping):  # noqa: SIM101 - dict first: fast
            if attribute in obj:
                return obj[attribute]
            return self.undefined(obj=obj, name=attribute)
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        meter = current()
        meter.tick()
        value = super().getitem(obj, argument)
        if isinstance(argument, slice):
            meter.built_value(value)
        return value

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        current().tick()
        return super().call(__context, __obj, *args, **kwargs)

    def call_binop(self, context: Context | None, operator: str, left: Any, right: Any) -> Any:
        meter = current()
        meter.tick()
        if isinstance(left, int) and isinstance(right, int):
            meter.check_int_op(operator, left, right)
            return self.binop_table[operator](left, right)
        if operator == "%" and isinstance(left, str):
            raise SecurityError("string formatting with % is not available; use filters")
        size = _sequence_size(operator, left, right)
        if size is not None:
            meter.bound(size)
        return meter.built_value(self.binop_table[operator](left, right))

    def call_unop(self, context: Context | None, operator: str, arg: Any) -> Any:
        current().tick()
        if operator == "not ":
            return not arg
        return self.unop_table[operator](arg)

    def metered_concat(self, join: Callable[[Iterable[Any]], str], values: tuple[Any, ...]) -> str:
        """`a ~ b ~ ...`: the parts' sizes bounded before they are joined (and the result
        after: in an `{% autoescape %}` block, joining escapes)."""
        meter = current()
        meter.tick()
        size = 0
        for value in values:
            size += deep_size(value, MAX_VALUE - size)
            meter.bound(size)
        meter.charge(size)
        joined = join(values)
        meter.bound(len(joined))
        return joined

    def metered_compare(self, first: Any, rest: tuple[tuple[str, Any], ...]) -> Any:
        """`a == b`, `a in b`, `a < b < c`: the work of each comparison is bounded (and
        counted) before it runs."""
        meter = current()
        meter.tick()
        left, result = first, True
        for op, given in rest:
            right = given
            if op in ("in", "notin") and isinstance(given, Iterator):
                right = list(given)  # (l|reverse, l|select(...)): sized as the list
            meter.work(_comparison_work(op, left, right), "a comparison")
            result = _COMPARISONS[op](left, right)
            if not result:
                return result
            left = right
        return result

    def metered_output(self, text: str) -> str:
        """An output chunk buffered by a `{% set %}` or `{% filter %}` block."""
        meter = current()
        meter.tick()
        meter.charge(len(text))
        return text

    def metered_iter(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """A loop's items, one operation each."""
        meter = current()
        for item in iterable:
            meter.tick()
            yield item


def _pass_arg(func: Callable[..., Any]) -> str | None:
    """What Jinja passes a filter or test before the value: "environment", "eval_context",
    "context" (the name of its `jinja_pass_arg`), or None."""
    found = getattr(func, "jinja_pass_arg", None)
    return None if found is None else str(found.name)


def _metered(func: Callable[..., Any], *, reads_whole: bool, sized: bool) -> Callable[..., Any]:
    """A filter or test that counts itself, bounds its input (`reads_whole`) before it runs
    and its result (`sized`) after."""
    at = 0 if _pass_arg(func) is None else 1  # where the value is among the args

    @wraps(func)  # keeps jinja_pass_arg
    def metered(*args: Any, **kwargs: Any) -> Any:
        meter = current()
        meter.tick()
        if reads_whole and len(args) > at:
            value = args[at]
            if isinstance(value, str):  # the common case, without a call
                if len(value) > MAX_VALUE:
                    meter.bound(len(value))
                meter.charge(len(value))
            else:
                if isinstance(value, Iterator):  # map(...), select(...): sized as a list
                    value = list(value)
                    args = (*args[:at], value, *args[at + 1 :])
                meter.read_whole(value)
        result = func(*args, **kwargs)
        if sized:
            meter.built_value(result)
        return result

    return metered


def _safe_range(*args: int) -> range:
    values = range(*args)
    if len(values) > MAX_RANGE:
        raise BudgetExceededError(f"range() of more than {MAX_RANGE} items")
    return values


def _replace(value: Any, old: str, new: str, count: int | None = None) -> str:
    text, old, new = str(value), str(old), str(new)
    every = count is None or count < 0  # as str.replace: a negative count replaces all
    hits = text.count(old) if every else min(int(count or 0), text.count(old))
    current().bound(len(text) + hits * max(0, len(new) - len(old)))
    return text.replace(old, new, -1 if every else int(count or 0))


@pass_eval_context
def _join(eval_ctx: EvalContext, value: Iterable[Any], d: str = "",
          attribute: str | int | None = None) -> str:  # fmt: skip
    """Jinja's join, sized first: the items and the separator between each two."""
    items = list(value)
    size = deep_size(items, MAX_VALUE) + len(str(d)) * max(len(items) - 1, 0)
    meter = current()
    meter.bound(size)
    meter.charge(size)
    join: Callable[..., str] = _JINJA_FILTERS["join"]
    return join(eval_ctx, items, d, attribute)


@pass_environment
def _sum(environment: _Sandbox, iterable: Iterable[Any],
         attribute: str | int | None = None, start: Any = 0) -> Any:  # fmt: skip
    """Jinja's sum, each addition through the sandbox's `+` (sized, counted)."""
    if attribute is not None:
        iterable = map(make_attrgetter(environment, attribute), iterable)
    total = start
    for item in iterable:
        total = environment.call_binop(None, "+", total, item)
    return total


def _round(value: float, precision: int = 0, method: str = "common") -> float:
    if not isinstance(precision, int) or abs(precision) > MAX_ROUND_DIGITS:
        raise BudgetExceededError(f"round() takes a precision of at most {MAX_ROUND_DIGITS} digits")
    return do_round(value, precision, method)  # type: ignore[arg-type]


def _trim(value: Any, chars: str | None = None) -> str:
    if chars is not None and len(str(chars)) > MAX_TRIM_CHARS:
        raise BudgetExceededError(f"trim() takes at most {MAX_TRIM_CHARS} characters to remove")
    return str(value).strip(None if chars is None else str(chars))


@pass_eval_context
def _tojson(eval_ctx: EvalContext, value: Any, indent: int | None = None) -> Any:
    """Jinja's tojson without `indent` (which multiplies its output by the nesting)."""
    if indent is not None:
        raise SecurityError("tojson() takes no indent in templates")
    tojson: Callable[..., Any] = _JINJA_FILTERS["tojson"]
    return tojson(eval_ctx, value)


def _datetime(value: Any, fmt: str = "%Y-%m-%d %H:%M", tz: str | None = None) -> str:
    """An ISO 8601 instant (as contexts carry them) formatted, optionally in zone `tz`."""

    if len(str(fmt)) > MAX_DATE_FORMAT:  # strftime makes up to 12 times its format
        raise BudgetExceededError(
            f"datetime() takes a format of at most {MAX_DATE_FORMAT} characters"
        )
    instant = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if tz is not None:
        if instant.tzinfo is None:
            raise SecurityError(f"{value!r} has no offset to convert to {tz}")
        instant = instant.astimezone(zone(tz))
    return instant.strftime(str(fmt))


def _comparison_test(op: str) -> Callable[..., Any]:
    """==, <, in, ... as tests (`x is in l`, `select('==', 1)`), through metered_compare."""

    @pass_environment
    def test(environment: _Sandbox, value: Any, other: Any) -> Any:
        return environment.metered_compare(value, ((op, other),))

    return test


def _remainder_test(divisor: int | None, wanted: int) -> Callable[..., bool]:
    """odd, even and divisibleby, with `%` through the sandbox (a string's `%` would be
    formatting, which can build a huge string)."""

    @pass_environment
    def test(environment: _Sandbox, value: Any, num: int | None = divisor) -> bool:
        return bool(environment.call_binop(None, "%", value, num) == wanted)

    return test


_JINJA_FILTERS: dict[str, Callable[..., Any]] = dict(SandboxedEnvironment().filters)
_COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq, "ne": operator.ne, "gt": operator.gt, "gteq": operator.ge,
    "lt": operator.lt, "lteq": operator.le, "in": lambda a, b: a in b,
    "notin": lambda a, b: a not in b,
}  # fmt: skip


def _environment() -> _Sandbox:
    env = _Sandbox(
        undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True,
        finalize=_finalize,
    )  # fmt: skip
    filters: dict[str, Callable[..., Any]] = {
        name: f for name, f in env.filters.items() if name in ALLOWED_FILTERS
    }
    filters |= {"replace": _replace, "datetime": _datetime, "join": _join, "sum": _sum,
                "round": _round, "trim": _trim, "tojson": _tojson}  # fmt: skip
    env.filters = {
        name: _metered(f, reads_whole=name in READS_WHOLE, sized=True)
        for name, f in filters.items()
    }
    tests = cast(dict[str, Callable[..., Any]], dict(env.tests))
    tests |= {"odd": _remainder_test(2, 1), "even": _remainder_test(2, 0),
              "divisibleby": _remainder_test(None, 0)}  # fmt: skip
    tests |= {name: _comparison_test(op) for name, op in COMPARISON_TESTS.items()}
    env.tests = {
        name: _metered(f, reads_whole=name in TESTS_READING_WHOLE, sized=False)
        for name, f in tests.items()
    }
    env.globals = {"range": _safe_range}
    return env


_ENV = _environment()


# ------------------------------------------------------------------------ compiling


def _loop_depth(node: nodes.Node, depth: int = 0) -> int:
    here = depth + 1 if isinstance(node, nodes.For) else depth
    return max([here, *(_loop_depth(child, here) for child in node.iter_child_nodes())])


def _check_shape(tree: nodes.Template) -> None:
    for forbidden in FORBIDDEN_NODES:
        found = next(iter(tree.find_all(forbidden)), None)
        if found is not None:
            name = type(found).__name__.lower()
            raise SecurityError(f"{name} is not available in templates")
    for flt in tree.find_all(nodes.Filter):
        if flt.name not in _ENV.filters:
            raise SecurityError(f"no filter named {flt.name!r}")
    for loop in tree.find_all(nodes.For):
        if loop.recursive:
            raise SecurityError("recursive loops are not available in templates")
    if _loop_depth(tree) > 1:
        raise SecurityError("loops cannot be nested")


class _Constants:
    """The template's constant expressions (those that read no data), evaluated with the
    render's checks under the compile's meter: one that breaks the budget is refused when
    the template is written. Other errors are left for the render to report."""

    _SHAPES = (
        nodes.Const, nodes.List, nodes.Tuple, nodes.Dict, nodes.Concat, nodes.BinExpr,
        nodes.UnaryExpr, nodes.Filter, nodes.Test, nodes.Getitem, nodes.Slice,
        nodes.CondExpr, nodes.Call, nodes.Name, nodes.Keyword, nodes.Pair,
    )  # fmt: skip

    def __init__(self, tree: nodes.Template) -> None:
        self.tree = tree
        # `range` is the one global; a template that assigns the name shadows it.
        self.stored = {n.name for n in tree.find_all(nodes.Name) if n.ctx != "load"}
        self.known: dict[int, bool] = {}

    def check(self) -> None:
        self._walk(self.tree)

    def _walk(self, node: nodes.Node) -> None:
        for child in node.iter_child_nodes():
            if (
                isinstance(child, nodes.Expr)
                and not isinstance(child, nodes.Const | nodes.Name)
                and self._constant(child)
            ):
                try:
                    self._value(child)
                except BudgetExceededError as exc:
                    raise BudgetExceededError(f"{exc} (in a constant expression)") from exc
                except Exception:  # the render reports it, if it gets there
                    pass
            else:
                self._walk(child)

    def _constant(self, node: nodes.Node) -> bool:
        known = self.known.get(id(node))
        if known is None:
            known = self.known[id(node)] = self._is_constant(node)
        return known

    def _is_constant(self, node: nodes.Node) -> bool:
        if isinstance(node, nodes.Name):
            return node.ctx == "load" and node.name == "range" and "range" not in self.stored
        if isinstance(node, nodes.And | nodes.Or) or not isinstance(node, self._SHAPES):
            return False
        if isinstance(node, nodes.Filter | nodes.Test | nodes.Call):
            if node.dyn_args is not None or node.dyn_kwargs is not None:
                return False
            if isinstance(node, nodes.Filter | nodes.Test):
                if node.node is None:  # a {% filter %} block's
                    return False
                func = _function(node)
                if func is None or _pass_arg(func) == "context":
                    return False
        if isinstance(node, nodes.CondExpr) and node.expr2 is None:
            return False
        return all(self._constant(c) for c in node.iter_child_nodes())

    def _value(self, node: nodes.Node) -> Any:
        meter = current()
        if isinstance(node, nodes.Const):
            return node.value
        if isinstance(node, nodes.Name):
            return _safe_range
        if isinstance(node, nodes.List | nodes.Tuple):
            items = [self._value(i) for i in node.items]
            return meter.built_value(items if isinstance(node, nodes.List) else tuple(items))
        if isinstance(node, nodes.Dict):
            return meter.built_value({self._value(p.key): self._value(p.value) for p in node.items})
        if isinstance(node, nodes.Concat):
            return _ENV.metered_concat(str_join, tuple(self._value(n) for n in node.nodes))
        if isinstance(node, nodes.BinExpr):
            left, right = self._value(node.left), self._value(node.right)
            return _ENV.call_binop(None, node.operator, left, right)
        if isinstance(node, nodes.UnaryExpr):
            operator = "not " if isinstance(node, nodes.Not) else node.operator
            return _ENV.call_unop(None, operator, self._value(node.node))
        if isinstance(node, nodes.Getitem):
            return _ENV.getitem(self._value(node.node), self._value(node.arg))
        if isinstance(node, nodes.Slice):
            parts = (node.start, node.stop, node.step)
            return slice(*(None if p is None else self._value(p) for p in parts))
        if isinstance(node, nodes.CondExpr):
            chosen = node.expr1 if self._value(node.test) else node.expr2
            assert chosen is not None  # _is_constant: a CondExpr with an else
            return self._value(chosen)
        return self._apply(node)

    def _apply(self, node: nodes.Node) -> Any:
        """A constant call: range(...), a filter or a test."""
        if isinstance(node, nodes.Call):
            current().tick()
            return self._call(_safe_range, node, [])
        assert isinstance(node, nodes.Filter | nodes.Test)
        assert node.node is not None
        func = _function(node)
        assert func is not None
        passed: list[Any] = []
        if _pass_arg(func) == "eval_context":
            passed = [EvalContext(_ENV)]
        elif _pass_arg(func) == "environment":
            passed = [_ENV]
        return self._call(func, node, [*passed, self._value(node.node)])

    def _call(self, func: Callable[..., Any], node: Any, first: list[Any]) -> Any:
        args = [*first, *(self._value(a) for a in node.args)]
        kwargs = {k.key: self._value(k.value) for k in node.kwargs}
        return func(*args, **kwargs)


def _function(node: nodes.Filter | nodes.Test) -> Callable[..., Any] | None:
    table = _ENV.filters if isinstance(node, nodes.Filter) else _ENV.tests
    return cast(dict[str, Callable[..., Any]], table).get(node.name)


@lru_cache(maxsize=1024)
def _compile(source: str) -> Template:
    """Under a meter, for the constant expressions' evaluation (compile_string's)."""
    tree = _ENV.parse(source)
    _check_shape(tree)
    _Constants(tree).check()
    return _ENV.from_string(tree)


def compile_string(source: str, field: str) -> Template:
    """One template string, compiled, or InvalidTemplateError naming `field`. Its constant
    expressions are evaluated under the meter under way (a JsonTemplate's, shared by all
    its strings), or its own."""
    if len(source) > MAX_TEMPLATE_CHARS:
        raise InvalidTemplateError(
            f"{field}: the template is longer than {MAX_TEMPLATE_CHARS} characters", field=field
        )
    if not metering_active():
        with metering():
            return compile_string(source, field)
    try:
        return _compile(source)
    except TemplateSyntaxError as exc:
        raise InvalidTemplateError(
            f"{field}: the template does not compile: {exc.message} (line {exc.lineno})",
            field=field,
        ) from exc
    except (SecurityError, TemplateError) as exc:
        raise InvalidTemplateError(f"{field}: {exc}", field=field) from exc
    except (RecursionError, SyntaxError, MemoryError) as exc:  # Python's own parser's limits
        raise InvalidTemplateError(
            f"{field}: the template is nested too deeply", field=field
        ) from exc


# ------------------------------------------------------------------------- rendering


def render_string(template: Template, context: Mapping[str, Any], field: str) -> str:
    """A compiled template rendered, or RenderError naming `field` and the problem. Runs
    under the meter of the render under way (JsonTemplate.render), or its own."""
    if not metering_active():
        with metering():
            return render_string(template, context, field)
    meter = current()
    try:
        chunks = []
        total = 0
        for chunk in template.generate(dict(context)):
            total += len(chunk)
            if total > MAX_OUTPUT_CHARS:
                raise _OutputTooLargeError
            # An output chunk: one operation and its characters (meter.tick and
            # meter.charge, inlined: a template yields many chunks).
            meter.operations -= 1
            meter.built -= len(chunk)
            if meter.operations < 0 or meter.built < 0:
                meter.check()
                meter.charge(0)
            chunks.append(chunk)
        return "".join(chunks)
    except _OutputTooLargeError as exc:
        raise RenderError(
            f"{field}: the rendered text is longer than {MAX_OUTPUT_CHARS} characters",
            field=field,
        ) from exc
    except TemplateError as exc:  # UndefinedError, SecurityError, BudgetExceededError, ...
        raise RenderError(f"{field}: {exc.message or exc}", field=field) from exc
    except TickworkError as exc:  # an unknown zone in datetime(...)
        raise RenderError(f"{field}: {exc.message}", field=field) from exc
    except Exception as exc:
        raise RenderError(f"{field}: {type(exc).__name__}: {exc}", field=field) from exc


class JsonTemplate:
    """A JSON value whose strings are templates (an action's payload, a target key), compiled
    once. `render` gives the same shape with every string rendered from the context."""

    def __init__(self, source: Any, field: str) -> None:
        self.source = source
        self.field = field
        with metering():  # the constant expressions of all its strings: one budget
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

    def render(self, context: Mapping[str, Any], budget: RenderBudget | None = None) -> Any:
        """The rendered value; RenderError (naming the field) if any string fails. All its
        strings together are one render (one meter); `budget`, if given, is shared with
        other renders and this one fails at once if it is spent."""
        meter, token = start_metering(budget)
        try:
            why = budget.spent() if budget is not None else None
            if why is not None:
                raise RenderError(f"{self.field}: not rendered: {why}", field=self.field)
            return self._render(self._compiled, context, self.field)
        finally:
            stop_metering(meter, token)

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
