"""Conditions on a rule's context: `{"path": "context.booking.status", "op": "eq",
"value": "confirmed"}`. Every condition of a rule must hold for it to fire.

A path is dotted keys (and list indexes) into the context snapshot, starting at one of its
roots. A field the context does not have makes a condition false, except `missing` (true)
and `exists` (false); a comparison of values that cannot be ordered (a number with a
string) is false too, and the reason says so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tickwork.platform.errors import InputError

OPS = ("eq", "ne", "in", "not_in", "exists", "missing", "gt", "gte", "lt", "lte", "contains")
ORDERED = frozenset({"gt", "gte", "lt", "lte"})
MAX_CONDITIONS = 20
MAX_LIST = 100
_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_-]+){0,15}$")
_MISSING = object()


class InvalidConditionError(InputError):
    code = "invalid_condition"


@dataclass(frozen=True)
class Condition:
    path: str
    op: str
    value: Any = None

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"path": self.path, "op": self.op}
        if self.op not in ("exists", "missing"):
            body["value"] = self.value
        return body


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def parse_conditions(raw: Any, roots: frozenset[str], field: str = "conditions") -> list[Condition]:
    """Conditions as written, checked that they can be evaluated; InvalidConditionError
    naming the field (e.g. `conditions.1.value`) when one cannot."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidConditionError(f"{field} must be a list of conditions", field=field)
    if len(raw) > MAX_CONDITIONS:
        raise InvalidConditionError(f"{field}: at most {MAX_CONDITIONS} conditions", field=field)
    return [_parse_one(item, roots, f"{field}[{i}]") for i, item in enumerate(raw)]


def _parse_one(item: Any, roots: frozenset[str], field: str) -> Condition:
    if not isinstance(item, Mapping):
        raise InvalidConditionError(f"{field} must be an object with path and op", field=field)
    unknown = set(item) - {"path", "op", "value"}
    if unknown:
        raise InvalidConditionError(
            f"{field}: unknown keys {sorted(unknown)}", field=f"{field}.{sorted(unknown)[0]}"
        )
    path, op = item.get("path"), item.get("op")
    if not isinstance(path, str) or not _PATH.match(path):
        raise InvalidConditionError(
            f"{field}.path must be dotted keys such as 'context.booking.status'",
            field=f"{field}.path",
        )
    root = path.split(".", 1)[0]
    if root not in roots:
        raise InvalidConditionError(
            f"{field}.path starts at {root!r}, which the context does not have; it has"
            f" {', '.join(sorted(roots))}",
            field=f"{field}.path",
        )
    if op not in OPS:
        raise InvalidConditionError(
            f"{field}.op {op!r} is not one of {', '.join(OPS)}", field=f"{field}.op"
        )
    value = item.get("value")
    _check_value(op, value, f"{field}.value")
    return Condition(path, op, value)


def _check_value(op: str, value: Any, where: str) -> None:
    if op in ("exists", "missing"):
        if value is not None:
            raise InvalidConditionError(f"{where}: {op} takes no value", field=where)
    elif op in ("in", "not_in"):
        if not isinstance(value, list) or len(value) > MAX_LIST or not all(map(_scalar, value)):
            raise InvalidConditionError(
                f"{where}: {op} needs a list of at most {MAX_LIST} plain values", field=where
            )
    elif op in ORDERED:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise InvalidConditionError(
                f"{where}: {op} compares with a number or a string", field=where
            )
    elif not _scalar(value):
        raise InvalidConditionError(f"{where}: {op} compares with a plain value", field=where)


def lookup(context: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path, or `_MISSING`."""
    here: Any = context
    for part in path.split("."):
        if isinstance(here, Mapping) and part in here:
            here = here[part]
        elif isinstance(here, list) and part.isdigit() and int(part) < len(here):
            here = here[int(part)]
        else:
            return _MISSING
    return here


def _comparable(a: Any, b: Any) -> bool:
    numbers = int | float
    if isinstance(a, bool) or isinstance(b, bool):
        return False
    return (isinstance(a, numbers) and isinstance(b, numbers)) or (
        isinstance(a, str) and isinstance(b, str)
    )


def holds(condition: Condition, context: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether the condition holds on the context, and why not when it does not."""
    found = lookup(context, condition.path)
    op, want = condition.op, condition.value
    if op == "exists":
        return found is not _MISSING, f"{condition.path} is missing"
    if op == "missing":
        return found is _MISSING, f"{condition.path} is present"
    if found is _MISSING:
        return False, f"{condition.path} is missing"
    shown = repr(found)[:80]
    if op == "eq":
        return found == want, f"{condition.path} is {shown}, not {want!r}"
    if op == "ne":
        return found != want, f"{condition.path} is {want!r}"
    if op == "in":
        return found in want, f"{condition.path} is {shown}, not one of {want!r}"[:200]
    if op == "not_in":
        return found not in want, f"{condition.path} is {shown}"
    if op == "contains":
        if isinstance(found, str) and isinstance(want, str):
            return want in found, f"{condition.path} does not contain {want!r}"
        if isinstance(found, list):
            return want in found, f"{condition.path} does not contain {want!r}"
        return False, f"{condition.path} is {type(found).__name__}, not a string or a list"
    if not _comparable(found, want):
        return False, f"{condition.path} is {shown}, which cannot be compared with {want!r}"
    result = {
        "gt": found > want,
        "gte": found >= want,
        "lt": found < want,
        "lte": found <= want,
    }[op]
    return result, f"{condition.path} is {shown}, not {op} {want!r}"


def first_failing(conditions: Sequence[Condition], context: Mapping[str, Any]) -> str | None:
    """The reason the first condition that does not hold fails, or None if all hold."""
    for condition in conditions:
        ok, why = holds(condition, context)
        if not ok:
            return why
    return None
