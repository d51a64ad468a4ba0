"""Digests as values (no I/O): the `digest` a rule's action may carry, its window, and what
a digest's template sees.

A digest collects the events of one (rule, recipient, target, key) into one action:

- `{"seconds": 600}`: a fixed window, ending that long after the first item;
- `{"until": "08:00"}`: until the next such wall time in the recipient's zone (else the
  workspace's), e.g. a morning summary;
- `{"quiet_seconds": 60, "max_seconds": 900}`: debounce, a sliding window that ends once no
  item came for `quiet_seconds`, and at the latest `max_seconds` after the first.

The action's template sees the latest event's context as usual, and `items` (each item's
event as the template would have seen it alone), `count`, `first`, `last` and `digest`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any
from uuid import UUID

from tickwork.platform.errors import ConflictError, InputError, InvalidTimeError
from tickwork.platform.wallclock import parse_clock, resolve_wall_time, zone

# One digest holds at most this many items; the next one opens the next digest, so a
# flood still makes messages of a bounded size.
MAX_ITEMS = 200
# ... and at most this much of their data (JSON), since every item re-renders it whole.
MAX_ITEM_BYTES = 1024 * 1024
MAX_WINDOW_SECONDS = 7 * 86400
MAX_QUIET_SECONDS = 86400
MAX_KEY_TEMPLATE = 500
MAX_KEY = 200
MAX_ITEM_KEY = 200
STATUSES = ("open", "closed", "flushed", "cancelled")
# The source of digests shared by every rule and drip step of a workspace (source_id: the
# workspace) whose digest names the same key and window for the same recipient, target and
# action type.
SHARED_SOURCE = "shared"
# ... and the source of the action a shared digest sends (no one rule's or step's).
SHARED_ACTION_SOURCE = "digest"


class DigestError(InputError):
    """A digest that is not one (a window of the wrong shape, a key too long)."""

    code = "invalid_digest"


class DigestNotOpenError(ConflictError):
    """A flush or cancel of a digest whose action is no longer waiting."""

    code = "digest_not_open"


@dataclass(frozen=True)
class Window:
    """Exactly one of: `seconds` (fixed), `until` (a wall time), or `quiet_seconds` with
    `max_seconds` (debounce)."""

    seconds: int | None = None
    until: time | None = None
    quiet_seconds: int | None = None
    max_seconds: int | None = None

    @property
    def sliding(self) -> bool:
        return self.quiet_seconds is not None

    def as_json(self) -> dict[str, Any]:
        if self.seconds is not None:
            return {"seconds": self.seconds}
        if self.until is not None:
            return {"until": self.until.isoformat(timespec="minutes")}
        return {"quiet_seconds": self.quiet_seconds, "max_seconds": self.max_seconds}

    def closes_at(self, first_at: datetime, timezone: str) -> datetime:
        """When a digest whose first item came at `first_at` ends (debounce: after that
        first item alone)."""
        if self.seconds is not None:
            return first_at + timedelta(seconds=self.seconds)
        if self.until is not None:
            return next_wall_time(first_at, self.until, timezone)
        assert self.quiet_seconds is not None
        return first_at + timedelta(seconds=self.quiet_seconds)

    def moved(self, opened_at: datetime, last_at: datetime) -> datetime:
        """Debounce: the end after an item at `last_at`, never past opened_at + max."""
        assert self.quiet_seconds is not None
        assert self.max_seconds is not None
        return min(
            last_at + timedelta(seconds=self.quiet_seconds),
            opened_at + timedelta(seconds=self.max_seconds),
        )


def next_wall_time(after: datetime, clock: time, timezone: str) -> datetime:
    """The first instant after `after` whose wall time in `timezone` is `clock` (a time
    that does not exist that day is read by the wall-clock module's rule)."""
    tz = zone(timezone)
    day: date = after.astimezone(tz).date()
    for offset in range(3):
        candidate = resolve_wall_time(day + timedelta(days=offset), clock, tz)
        if candidate > after:
            return candidate
    raise AssertionError("a wall time recurs within three days")  # pragma: no cover


@dataclass(frozen=True)
class DigestSpec:
    """What a rule's action or a drip step says to collect: the key (a template; default
    none, so one digest per recipient and target) and the window. `shared`: the digest is
    the recipient's for this key and window, which every rule and step naming them joins
    (a step's always is); else it is the rule's own."""

    window: Window
    key: str | None = None
    shared: bool = False

    def as_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"window": self.window.as_json()}
        if self.key is not None:
            found["key"] = self.key
        if self.shared:
            found["shared"] = True
        return found


def _seconds(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise DigestError(
            f"{name} must be a whole number of seconds from {low} to {high}", field=name
        )
    return value


def parse_window(raw: Any, where: str) -> Window:
    if not isinstance(raw, Mapping):
        raise DigestError(
            f'{where} must be an object: {{"seconds": 600}}, {{"until": "08:00"}} or'
            ' {"quiet_seconds": 60, "max_seconds": 900}',
            field=where,
        )
    given = set(raw)
    if given == {"seconds"}:
        return Window(seconds=_seconds(raw["seconds"], f"{where}.seconds", 1, MAX_WINDOW_SECONDS))
    if given == {"until"}:
        try:
            clock = parse_clock(raw["until"])
        except InvalidTimeError as exc:
            raise DigestError(
                f"{where}.until must be a wall time such as '08:00'", field=f"{where}.until"
            ) from exc
        return Window(until=clock)
    if given == {"quiet_seconds", "max_seconds"}:
        quiet = _seconds(raw["quiet_seconds"], f"{where}.quiet_seconds", 1, MAX_QUIET_SECONDS)
        most = _seconds(raw["max_seconds"], f"{where}.max_seconds", quiet, MAX_WINDOW_SECONDS)
        return Window(quiet_seconds=quiet, max_seconds=most)
    raise DigestError(
        f"{where} must have exactly one of: seconds; until; quiet_seconds and max_seconds"
        f" (got {', '.join(sorted(map(str, given))) or 'nothing'})",
        field=where,
    )


def parse_spec(raw: Any, where: str = "action.digest") -> DigestSpec:
    """A digest as written (JSON): refused with a DigestError naming the field."""
    if not isinstance(raw, Mapping):
        raise DigestError(f"{where} must be an object with a window", field=where)
    unknown = set(raw) - {"key", "window", "shared"}
    if unknown:
        raise DigestError(
            f"{where} has unknown fields: {', '.join(sorted(map(str, unknown)))}", field=where
        )
    if "window" not in raw:
        raise DigestError(f"{where}.window is required", field=f"{where}.window")
    key = raw.get("key")
    if key is not None and (not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_TEMPLATE):
        raise DigestError(
            f"{where}.key must be a template of 1 to {MAX_KEY_TEMPLATE} characters",
            field=f"{where}.key",
        )
    shared = raw.get("shared", False)
    if not isinstance(shared, bool):
        raise DigestError(f"{where}.shared must be true or false", field=f"{where}.shared")
    return DigestSpec(parse_window(raw["window"], f"{where}.window"), key, shared)


def group_key(recipient_id: str | None, target_key: str, key: str, *more: str) -> str:
    """What one open digest is per, as a fixed-length hash (`more`: what else keeps a
    shared digest's groups apart, its action type and window)."""
    raw = json.dumps([recipient_id, target_key, key, *more], separators=(",", ":"))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def item_key(given: str | None, content: Any) -> str:
    """An item's key: the event's own id when it has one, else a hash of the event (the
    same event delivered twice hashes the same)."""
    if given is not None:
        if len(given) <= MAX_ITEM_KEY:
            return given
        return "id~" + hashlib.sha256(given.encode("utf-8")).hexdigest()
    raw = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256~" + hashlib.sha256(raw.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Item:
    """One event collected: its key, what the template sees of it, when it happened."""

    key: str
    data: dict[str, Any]
    occurred_at: datetime

    @property
    def size(self) -> int:
        return len(json.dumps(self.data, separators=(",", ":"), default=str).encode("utf-8"))


@dataclass(frozen=True, slots=True)
class Digest:
    """One row of digests, column for column."""

    id: UUID
    workspace_id: UUID
    source: str
    source_id: UUID
    recipient_id: str | None
    target_key: str
    digest_key: str
    group_key: str
    status: str
    time_window: dict[str, Any]
    opened_at: datetime
    closes_at: datetime
    last_item_at: datetime | None
    item_count: int
    item_bytes: int
    action_id: UUID | None
    finished_at: datetime | None
    created_at: datetime
    updated_at: datetime


def digest_from_row(row: Mapping[str, Any]) -> Digest:
    return Digest(**{name: row[name] for name in Digest.__dataclass_fields__})


def template_view(digest: Digest, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a digest adds to its action's template context."""
    return {
        "items": list(items),
        "count": len(items),
        "first": items[0] if items else None,
        "last": items[-1] if items else None,
        "digest": {
            "id": str(digest.id),
            "key": digest.digest_key,
            "window": digest.time_window,
            "opened_at": digest.opened_at.isoformat(),
            "closes_at": digest.closes_at.isoformat(),
        },
    }
