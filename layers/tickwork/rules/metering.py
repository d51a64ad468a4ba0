"""What one render of a tenant's template may use, and what several renders may use together.

The sandbox (tickwork.rules.templating) counts and sizes every operation a template
performs through a `Meter`, the one of the render under way:

- **operations**: every arithmetic operation, `~`, filter, test, lookup, call, loop
  iteration and output chunk counts one, so the number of steps of a render is bounded
  whatever the template's shape (and tests can assert on counts, not on clocks);
- **sizes**: a value a template builds (a string, a list, a dict) may hold at most
  `MAX_VALUE` characters or items, checked before it is built where the size can be
  computed (`*`, `+`, `~`, join, replace, a filter that reads its whole input) and right
  after in any case; an integer at most `MAX_INT_DIGITS` digits, estimated from the
  operands' bit lengths before `*` or `**` runs;
- **built**: the sizes of everything a render builds or turns into text add up against
  `MAX_BUILT`, so many medium values cannot add up to unbounded memory or time (work that
  builds nothing, such as a comparison, counts one more operation per 1,024 characters or
  items it may read);
- **CPU time**: the thread's CPU time (`time.thread_time`), a backstop: each operation is
  bounded by the sizes above, so the clock is read every 16 operations and after any
  operation on a large value, not on every one (reading it costs a tenth of a small
  operation).

A `RenderBudget` is shared by the renders of one unit of work (the rules of one event,
the steps one enrollment makes, a workspace's steps in one advance pass): each render
takes at most its own limits and what the shared budget has left, and a render that
starts when it is spent fails at once. A breach is a `BudgetExceededError` (a Jinja
`SecurityError`), which the renderer turns into a RenderError naming the field.

The bounds are constants, not settings: they are far above what a notification template
uses (a template is at most 10,000 characters and renders at most 64 KiB; a normal one
uses tens of operations and well under a millisecond) and exist only to bound a hostile
or broken one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from time import thread_time
from typing import Any

from jinja2.exceptions import SecurityError

MAX_OPERATIONS = 20_000
MAX_CPU_SECONDS = 0.05
MAX_BUILT = 1_048_576
MAX_VALUE = 262_144
# Python's own limit for turning an int into text (sys.int_info.default_max_str_digits).
MAX_INT_DIGITS = 4_300
MAX_INT_BITS = int(MAX_INT_DIGITS * math.log2(10))

# How many renders' worth the renders of one unit of work share: an event's matching
# rules, the time rules of one entity write and the steps one enrollment makes share a
# few (a normal one uses a tiny fraction of one); a rule written over all the entities of
# its type and a workspace's steps in one advance pass share more.
FEW_RENDERS = 5
MANY_RENDERS = 20

# An operation that handles at least this many characters or items reads the CPU clock at
# once; the others read it every CPU_CHECK_EVERY + 1 operations.
_LARGE = 4096
# Work that builds nothing counts one operation per this many characters or items read.
WORK_PER_OPERATION = 1024
CPU_CHECK_EVERY = 15  # a mask: every 16th operation


class BudgetExceededError(SecurityError):
    """A template used more than its budget, or would exceed a bound (a value's size, a
    number's digits, range(), a filter's argument)."""


@dataclass
class RenderBudget:
    """What several renders may use together, counting down; each render also keeps its
    own limits. `label` names the unit of work in messages ("the templates of this event")."""

    label: str
    operations: int
    built: int
    cpu_seconds: float
    limits: tuple[int, int, float] = field(init=False)

    def __post_init__(self) -> None:
        self.limits = (self.operations, self.built, self.cpu_seconds)

    @classmethod
    def of(cls, label: str, renders: int) -> RenderBudget:
        """`renders` renders' worth."""
        return cls(label, MAX_OPERATIONS * renders, MAX_BUILT * renders,
                   MAX_CPU_SECONDS * renders)  # fmt: skip

    def spent(self) -> str | None:
        """Why no render may start any more, or None."""
        ops, built, cpu = self.limits
        if self.operations <= 0:
            return f"{self.label} used more than {_n(ops)} operations together"
        if self.built <= 0:
            return f"{self.label} built more than {_n(built)} characters and items together"
        if self.cpu_seconds <= 0:
            return f"{self.label} used more than {cpu:g} s of CPU time together"
        return None


def _n(value: float) -> str:
    return f"{int(value):,}"


class Meter:
    """The counters of one render (or of one compile's evaluation of constants)."""

    __slots__ = ("_budget", "_limits", "_start", "_whose", "built", "deadline", "operations")

    def __init__(self, budget: RenderBudget | None = None) -> None:
        self._budget = budget
        ops, built, cpu = MAX_OPERATIONS, MAX_BUILT, MAX_CPU_SECONDS
        # Whose limit each one is, for the messages: this render's, or the shared budget's
        # (named with its total).
        self._whose: tuple[tuple[str, float], ...] = (
            ("the template", ops), ("the template", built), ("the template", cpu),
        )  # fmt: skip
        if budget is not None:
            left = (budget.operations, budget.built, budget.cpu_seconds)
            self._whose = tuple(
                (budget.label, total) if remaining < own else mine
                for remaining, own, total, mine in zip(
                    left, (ops, built, cpu), budget.limits, self._whose, strict=True
                )
            )
            ops = max(0, min(ops, budget.operations))
            built = max(0, min(built, budget.built))
            cpu = max(0.0, min(cpu, budget.cpu_seconds))
        self._limits = (ops, built, cpu)
        self.operations = ops
        self.built = built
        self._start = thread_time()
        self.deadline = self._start + cpu

    # -- counting

    def tick(self) -> None:
        """One operation."""
        self.operations -= 1
        if self.operations < 0 or not self.operations & CPU_CHECK_EVERY:
            self.check()

    def check(self) -> None:
        if self.operations < 0:
            raise BudgetExceededError(self._breach(0, "operations"))
        if thread_time() > self.deadline:
            raise BudgetExceededError(self._breach(2, "s of CPU time"))

    def charge(self, units: int) -> None:
        """Characters or items built (or read whole) by an operation."""
        self.built -= units
        if self.built < 0:
            raise BudgetExceededError(self._breach(1, "characters and items", verb="built"))
        if units >= _LARGE:  # a large value: the clock is worth reading now
            self.check()

    def work(self, units: int, what: str) -> None:
        """Work that builds nothing (a comparison reading its sides), computed before it
        runs: at most MAX_VALUE characters or items, and one more operation per
        WORK_PER_OPERATION of them, the clock read when it is large."""
        if units > MAX_VALUE:
            raise BudgetExceededError(
                f"the template would make {what} of more than {_n(MAX_VALUE)} characters or items"
            )
        if units >= WORK_PER_OPERATION:
            self.operations -= units // WORK_PER_OPERATION
            self.check()

    def _breach(self, index: int, unit: str, verb: str = "used") -> str:
        whose, limit = self._whose[index]
        amount = f"{limit:g}" if index == 2 else _n(limit)
        together = "" if whose == "the template" else " together"
        return f"{whose} {verb} more than {amount} {unit}{together}"

    # -- sizes

    def bound(self, size: int) -> None:
        if size > MAX_VALUE:
            raise BudgetExceededError(
                f"the template would make a value of more than {_n(MAX_VALUE)} characters or items"
            )

    def built_value(self, value: Any) -> Any:
        """A value an operation made: its size bounded and charged. Returns it."""
        if isinstance(value, str | list | tuple | dict):
            size = len(value)
            if size > MAX_VALUE:
                self.bound(size)
            self.charge(size)
        elif isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            raise _too_many_digits()
        return value

    def read_whole(self, value: Any) -> None:
        """A value an operation is about to turn into text (or walk entirely): its full
        size, shared parts counted each time, is bounded and charged before it runs."""
        size = len(value) if isinstance(value, str) else deep_size(value, MAX_VALUE)
        if size > MAX_VALUE:
            self.bound(size)
        self.charge(size)

    # -- integers

    def check_int_op(self, operator: str, left: Any, right: Any) -> None:
        """Refuse `left operator right` on integers (both ints) if its result could exceed
        MAX_INT_BITS, before computing it."""
        lb, rb = left.bit_length(), right.bit_length()
        if operator == "*":
            bits = lb + rb
        elif operator == "**":
            if right < 0 or left in (0, 1, -1):
                return
            bits = lb * right if right <= MAX_INT_BITS else MAX_INT_BITS + 1
        elif operator in ("+", "-"):
            bits = max(lb, rb) + 1
        else:  # /, //, %: no larger than the operands
            return
        if bits > MAX_INT_BITS:
            raise _too_many_digits()

    # -- settling

    def used(self) -> tuple[int, int, float]:
        """Operations, characters and items, CPU seconds used so far (at most the limits:
        what went past one was refused)."""
        ops, built, _ = self._limits
        return (
            ops - max(self.operations, 0),
            built - max(self.built, 0),
            thread_time() - self._start,
        )

    def settle(self) -> None:
        """Take what this render used from the shared budget."""
        if self._budget is None:
            return
        ops, built, cpu = self.used()
        self._budget.operations -= ops
        self._budget.built -= built
        self._budget.cpu_seconds -= cpu


def _too_many_digits() -> BudgetExceededError:
    return BudgetExceededError(
        f"the template would make a number of more than {_n(MAX_INT_DIGITS)} digits"
    )


def deep_size(value: Any, limit: int) -> int:
    """About how many characters `value` takes as text (a container's parts each time they
    appear), counting stops soon after `limit`: the walk costs at most about `limit` steps."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, list | tuple):
            total += 2 + 2 * len(item)
            if total > limit:
                return total
            stack.extend(item)
        elif isinstance(item, dict | Mapping):
            total += 2 + 4 * len(item)
            if total > limit:
                return total
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, bool) or item is None:
            total += 5
        elif isinstance(item, int):
            total += item.bit_length() * 77 // 256 + 1  # log10(2) ~ 77/256
        else:
            total += 24
        if total > limit:
            return total
    return total


_CURRENT: ContextVar[Meter | None] = ContextVar("tickwork_template_meter", default=None)


def current() -> Meter:
    """The meter of the render (or compile) under way on this thread."""
    meter = _CURRENT.get()
    if meter is None:  # a template operation outside `metering`: refused, never unbounded
        raise BudgetExceededError("a template ran outside a metered render")
    return meter


def metering_active() -> bool:
    return _CURRENT.get() is not None


@contextmanager
def metering(budget: RenderBudget | None = None) -> Iterator[Meter]:
    """A fresh meter for the operations run inside, settled into `budget` at the end."""
    meter, token = start(budget)
    try:
        yield meter
    finally:
        stop(meter, token)


def start(budget: RenderBudget | None = None) -> tuple[Meter, Token[Meter | None]]:
    """`metering` without a context manager's cost, for the render path: call `stop`."""
    meter = Meter(budget)
    return meter, _CURRENT.set(meter)


def stop(meter: Meter, token: Token[Meter | None]) -> None:
    _CURRENT.reset(token)
    meter.settle()
