"""Per-workspace quotas: how much one workspace may hold, make and call.

- active actions (queued or submitted rows), checked by the writes that add rows, after
  they wrote them and before they commit, so one check covers every way in;
- recurring schedules not ended, checked before a schedule is created;
- rows one schedule may materialize in its window, checked as it is materialized (a rule
  too dense is refused on create, edit and resume; the expander pauses a stored one);
- API requests per minute, counted per workspace in the database, so every API Lambda
  shares one count;
- rules not deleted, checked as a rule is created;
- actions one event may make: an event whose rules would make more is refused whole
  before anything is written, and a rule that would give one event type more enabled
  rules than that is refused on create and edit;
- recipients, checked as one is created;
- actions the API's requests create per minute, counted in the database in the request's
  transaction before it commits. Rows the crons make (the expander's occurrences, the
  reconciler's intents and drip steps) are neither counted nor refused: their sources were
  checked when written, and a cron's row is never lost to a quota;
- suppression-list entries, checked as one is added through the API. Entries a person or a
  provider asked for (an unsubscribe link, a bounce, a complaint, a STOP reply) are counted
  but never refused: consent is never lost to a quota;
- digests collecting (open, their action still queued), checked after an API event opened
  one, before it commits (an event that would pass the quota is refused whole).

Each refusal says what the limit is, where the workspace stands, and what to do.
Settings hold the stack's defaults (`quota_*`); an operator overrides any of them for one
workspace (`workspaces.limits`, set with `tickwork workspace limits`). 0 turns a quota off.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from typing import Any, LiteralString
from uuid import UUID

from psycopg.types.json import Jsonb

from tickwork.platform.config import Settings
from tickwork.platform.db import Connection
from tickwork.platform.errors import InputError, NotFoundError, QuotaExceededError, RateLimitedError
from tickwork.platform.sql import query

_COUNT_ACTIVE = query("count_active_actions")
_COUNT_SCHEDULES = query("count_live_schedules")
_COUNT_REQUEST = query("count_api_request")
_COUNT_CREATED = query("count_actions_created")
_COUNT_RULES = query("count_rules")
_COUNT_EVENT_RULES = query("count_event_rules")
_COUNT_RECIPIENTS = query("count_recipients")
_COUNT_SUPPRESSIONS = query("count_suppressions")
_COUNT_DIGESTS = query("count_open_digests")
_WORKSPACE_LIMITS = query("workspace_limits")
_SET_LIMITS = query("set_workspace_limits")

RATE_WINDOW_SECONDS = 60
# The largest limit an operator may set (the column's check says the same).
MAX_LIMIT = 2**31 - 1
_MORE = "; an operator can raise the workspace's limit"


@dataclass(frozen=True, slots=True)
class Limits:
    """A workspace's quotas: those its operator set, else the stack's defaults (0: off)."""

    active_actions: int
    recurring_schedules: int
    schedule_window_rows: int
    api_requests_per_minute: int
    rules: int
    recipients: int
    actions_per_event: int
    actions_per_minute: int
    suppressions: int
    digests: int
    # The quotas set for this workspace (the others are the stack's defaults).
    overridden: frozenset[str] = frozenset()

    @classmethod
    def of(cls, settings: Settings, overrides: Mapping[str, Any] | None = None) -> Limits:
        """`overrides` as stored; a name no longer known is left out."""
        given = {k: int(v) for k, v in (overrides or {}).items() if k in QUOTA_NAMES}
        values: dict[str, Any] = {
            name: given.get(name, getattr(settings, f"quota_{name}")) for name in QUOTA_NAMES
        }
        return cls(**values, overridden=frozenset(given))

    def as_dict(self) -> dict[str, int]:
        return {name: int(getattr(self, name)) for name in QUOTA_NAMES}


QUOTA_NAMES: tuple[str, ...] = tuple(f.name for f in fields(Limits) if f.name != "overridden")


def _count(conn: Connection, sql: LiteralString, params: dict[str, Any]) -> int:
    row = conn.execute(sql, params).fetchone()
    return int(row[0]) if row else 0


# ------------------------------------------------------------------ what an operator sets


def workspace_limits(conn: Connection, workspace_id: UUID, settings: Settings) -> Limits:
    """A workspace's limits, read on their own (the API has them from the membership)."""
    row = conn.execute(_WORKSPACE_LIMITS, {"workspace_id": workspace_id}).fetchone()
    if row is None:
        raise NotFoundError(f"no workspace {workspace_id}")
    return Limits.of(settings, row[0])


def set_limits(
    conn: Connection,
    workspace_id: UUID,
    settings: Settings,
    given: Mapping[str, int],
    reset: Collection[str] = (),
) -> Limits:
    """Set quotas for one workspace (`given`) and put others back to the stack's defaults
    (`reset`); returns the workspace's limits as they now are. For operators: the API's role
    cannot write them."""
    for name in [*given, *reset]:
        if name not in QUOTA_NAMES:
            raise InputError(
                f"{name!r} is not a quota; quotas: {', '.join(QUOTA_NAMES)}", field=name
            )
    for name, value in given.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LIMIT:
            raise InputError(
                f"{name} must be a whole number from 0 (no limit) to {MAX_LIMIT}", field=name
            )
    both = sorted(set(given) & set(reset))
    if both:
        raise InputError(f"{', '.join(both)}: set or reset, not both", field=both[0])
    row = conn.execute(
        _SET_LIMITS,
        {"workspace_id": workspace_id, "set": Jsonb(dict(given)), "reset": list(reset)},
    ).fetchone()
    if row is None:
        raise NotFoundError(f"no workspace {workspace_id}")
    return Limits.of(settings, row[0])


# ----------------------------------------------------------------------------- holdings


def check_active_actions(conn: Connection, workspace_id: UUID, limits: Limits) -> None:
    """After a write that added active rows, in its transaction: refuse (and so roll back)
    if the workspace now holds more than its quota."""
    limit = limits.active_actions
    if limit == 0:
        return
    held = _count(conn, _COUNT_ACTIVE, {"workspace_id": workspace_id, "cap": limit + 1})
    if held > limit:
        raise QuotaExceededError(
            f"the workspace would hold more than {limit} active (queued or submitted)"
            " actions, its quota; cancel some or wait for them to fire",
            details={"quota": "active_actions", "limit": limit},
        )


def check_new_schedule(conn: Connection, workspace_id: UUID, limits: Limits) -> None:
    """Before a recurring schedule is created: refuse one over the workspace's quota."""
    limit = limits.recurring_schedules
    if limit == 0:
        return
    held = _count(conn, _COUNT_SCHEDULES, {"workspace_id": workspace_id})
    if held >= limit:
        raise QuotaExceededError(
            f"the workspace has {held} recurring schedules that have not ended, its quota is"
            f" {limit}; end one first",
            field="rrule",
            details={"quota": "recurring_schedules", "limit": limit, "held": held},
        )


def check_window_rows(rows: int, window_days: int, limits: Limits) -> None:
    """Refuse a schedule that would materialize more than its quota of rows at once."""
    limit = limits.schedule_window_rows
    if limit and rows > limit:
        raise QuotaExceededError(
            f"the rule makes {rows} occurrences in the next {window_days} days; a schedule"
            f" may make at most {limit} in that window: fire less often",
            field="rrule",
            details={"quota": "schedule_window_rows", "limit": limit, "rows": rows},
        )


def check_rules(
    conn: Connection, workspace_id: UUID, limits: Limits, *, new: bool, event_type: str | None
) -> None:
    """After a rule was written, in its transaction: refuse (and so roll back) a `new` rule
    over the workspace's quota of rules, and an enabled event rule that gives its
    `event_type` more enabled rules than one event may make actions."""
    if new and limits.rules:
        held = _count(conn, _COUNT_RULES, {"workspace_id": workspace_id})
        if held > limits.rules:
            raise QuotaExceededError(
                f"the workspace would have {held} rules; its quota is {limits.rules}: delete"
                f" one it no longer needs first{_MORE}",
                details={"quota": "rules", "limit": limits.rules, "held": held - 1},
            )
    limit = limits.actions_per_event
    if event_type is not None and limit:
        held = _count(
            conn, _COUNT_EVENT_RULES, {"workspace_id": workspace_id, "event_type": event_type}
        )
        if held > limit:
            raise QuotaExceededError(
                f"event type {event_type!r} would have {held} enabled rules; one event may"
                f" make at most {limit} actions, the workspace's quota, so an event type may"
                f" have at most {limit} enabled rules: disable one first{_MORE}",
                field="trigger.event_type",
                details={"quota": "actions_per_event", "limit": limit, "held": held - 1},
            )


def check_event_actions(firing: int, event_type: str, limits: Limits) -> None:
    """Before an event makes anything: refuse it whole when its rules would make more
    actions than one event may."""
    limit = limits.actions_per_event
    if limit and firing > limit:
        raise QuotaExceededError(
            f"this {event_type!r} event would make {firing} actions (one per enabled rule"
            f" whose conditions hold); one event may make at most {limit}, the workspace's"
            f" quota: nothing was made. Disable some of those rules or narrow their"
            f" conditions{_MORE}",
            field="type",
            details={"quota": "actions_per_event", "limit": limit, "actions": firing},
        )


def check_recipients(conn: Connection, workspace_id: UUID, limits: Limits) -> None:
    """After a recipient was created, in its transaction: refuse (and so roll back) one
    over the workspace's quota."""
    limit = limits.recipients
    if limit == 0:
        return
    held = _count(conn, _COUNT_RECIPIENTS, {"workspace_id": workspace_id, "cap": limit + 1})
    if held > limit:
        raise QuotaExceededError(
            f"the workspace would have more than {limit} recipients, its quota; delete those"
            f" you no longer send to first{_MORE}",
            details={"quota": "recipients", "limit": limit},
        )


def check_suppressions(conn: Connection, workspace_id: UUID, limits: Limits) -> None:
    """After the API added an entry to the suppression list, in its transaction: refuse
    (and so roll back) one over the workspace's quota. Entries from links and providers'
    callbacks never call this."""
    limit = limits.suppressions
    if limit == 0:
        return
    held = _count(conn, _COUNT_SUPPRESSIONS, {"workspace_id": workspace_id, "cap": limit + 1})
    if held > limit:
        raise QuotaExceededError(
            f"the workspace's suppression list would have more than {limit} entries, its"
            f" quota; remove those no longer needed first{_MORE}",
            details={"quota": "suppressions", "limit": limit},
        )


def check_digests(
    conn: Connection, workspace_id: UUID, limits: Limits, created: Collection[UUID]
) -> None:
    """After an event made the actions `created`, in its transaction: when one of them is a
    new digest's, refuse (and so roll back the whole event) if the workspace now has more
    digests collecting than its quota."""
    limit = limits.digests
    if limit == 0 or not created:
        return
    held = _count(conn, _COUNT_DIGESTS, {"workspace_id": workspace_id, "cap": limit + 1,
                                         "created": list(created)})  # fmt: skip
    if held > limit:
        raise QuotaExceededError(
            f"this event would open a digest, and the workspace would have more than {limit}"
            " digests collecting, its quota: nothing was made. Flush or cancel open digests"
            f" (POST /v1/digests/{{id}}/flush), or use fewer digest keys{_MORE}",
            details={"quota": "digests", "limit": limit},
        )


# -------------------------------------------------------------------------------- rates


@dataclass(frozen=True)
class Usage:
    count: int  # requests, or actions, in the current window
    seconds_left: float


def _usage(conn: Connection, sql: LiteralString, params: dict[str, Any]) -> Usage:
    row = conn.execute(sql, params | {"window": RATE_WINDOW_SECONDS}).fetchone()
    assert row is not None  # an upsert returns its row
    return Usage(int(row[0]), float(row[1]))


def count_request(conn: Connection, workspace_id: UUID, limits: Limits) -> Usage | None:
    """Count one API request of the workspace; RateLimitedError when over the quota."""
    limit = limits.api_requests_per_minute
    if limit == 0:
        return None
    usage = _usage(conn, _COUNT_REQUEST, {"workspace_id": workspace_id})
    if usage.count > limit:
        wait = max(1, math.ceil(usage.seconds_left))
        raise RateLimitedError(
            f"the workspace made more than {limit} API requests this minute, its quota;"
            f" retry in {wait} s",
            retry_after_seconds=wait,
            details={"quota": "api_requests_per_minute", "limit": limit},
        )
    return usage


def count_actions_created(
    conn: Connection, workspace_id: UUID, made: int, limits: Limits
) -> Usage | None:
    """In a request's transaction, before it commits: count the `made` actions it created
    against the workspace's per-minute quota. Over it, RateLimitedError (429, or a 422
    QuotaExceededError when the request alone makes more than a minute's worth), and the
    transaction's rollback takes the rows and the count back."""
    limit = limits.actions_per_minute
    if limit == 0 or made == 0:
        return None
    if made > limit:
        raise QuotaExceededError(
            f"this request would create {made} actions at once; the workspace may create at"
            f" most {limit} a minute, its quota: nothing was made. Make fewer at a time{_MORE}",
            details={"quota": "actions_per_minute", "limit": limit, "actions": made},
        )
    usage = _usage(conn, _COUNT_CREATED, {"workspace_id": workspace_id, "made": made})
    if usage.count > limit:
        wait = max(1, math.ceil(usage.seconds_left))
        before = usage.count - made
        raise RateLimitedError(
            f"the workspace created {before} actions this minute and this request would"
            f" create {made} more; its quota is {limit} a minute: nothing was made, retry in"
            f" {wait} s",
            retry_after_seconds=wait,
            details={"quota": "actions_per_minute", "limit": limit, "created": before},
        )
    return usage
