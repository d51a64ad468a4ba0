"""Schedule intents: what an app declares it wants for one of its things, the source of truth
the reconciler keeps scheduled_actions in step with.

An intent belongs to a workspace and names a thing by the app's own id (`thing_id`,
scoped to the workspace: another workspace's thing of the same id is a different thing,
invisible here). It says which action type, which targets, when (a wall date and time in a
zone, the workspace's zone if none is given, or a UTC instant), with what payload, and
whether it is `scheduled` or `unscheduled`. Every change bumps its `version`.

Writing an intent validates it (nothing is written on a bad one), stores it and reconciles
the thing at once, in one transaction; the reconciler cron is the safety net.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any, LiteralString, TypedDict, cast
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from tickwork.actions.model import ACTIVE, MAX_KEY_LENGTH, PAYLOAD_MAX_BYTES, Action, payload_size
from tickwork.intents import reconcile
from tickwork.intents.reconcile import Intent, IntentState, ReconcileSummary, intent_from_row
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection
from tickwork.platform.errors import (
    InputError,
    InvalidTimeError,
    InvalidTimezoneError,
    NotFoundError,
    PastTimeError,
    PayloadTooLargeError,
    UnknownActionTypeError,
    UnknownTargetError,
)
from tickwork.platform.queues.port import QueuePort
from tickwork.platform.sql import query
from tickwork.platform.wallclock import (
    parse_clock,
    parse_date,
    require_aware,
    resolve_wall_time,
    zone,
)
from tickwork.recipients.model import check_recipient_id
from tickwork.recipients.policy import TimezoneFrom, zone_for

_GET = query("get_intent")
_WORKSPACE_TIMEZONE = query("workspace_timezone")
_INSERT = query("insert_intent")
_UPDATE = query("update_intent")
_UNSCHEDULE = query("unschedule_intent")

MAX_TARGETS = 100  # mirrors schedule_intents_targets_count
STATES: frozenset[str] = frozenset({"scheduled", "unscheduled"})


@dataclass(frozen=True)
class IntentInput:
    """An intent as a caller declares it. Give either `wall_date` + `wall_time` (with
    `timezone`, or none for the workspace's zone) or `publish_at`; strings are parsed."""

    action_type: str
    targets: Collection[str]
    wall_date: date | str | None = None
    wall_time: time | str | None = None
    timezone: str | None = None
    publish_at: datetime | str | None = None
    payload: Mapping[str, Any] = field(default_factory=dict)
    state: str = "scheduled"
    recipient_id: str | None = None
    transactional: bool = False


@dataclass(frozen=True)
class ValidIntent:
    """An intent that passed validation, in the form it is stored."""

    action_type: str
    targets: tuple[str, ...]
    wall_date: date | None
    wall_time: time | None
    timezone: str | None
    publish_at: datetime | None
    payload: dict[str, Any]
    state: IntentState
    recipient_id: str | None = None
    transactional: bool = False

    def same_as(self, stored: Intent) -> bool:
        return (
            self.action_type == stored.action_type
            and self.targets == stored.targets
            and self.wall_date == stored.wall_date
            and self.wall_time == stored.wall_time
            and self.timezone == stored.timezone
            and self.publish_at == stored.publish_at
            and self.payload == stored.payload
            and self.state == stored.state
            and self.recipient_id == stored.recipient_id
            and self.transactional == stored.transactional
        )


@dataclass(frozen=True)
class IntentView:
    """An intent with every row of its thing (any status, oldest first) and the instant it
    resolves to now (None if its zone can no longer be read); for a wall time, the zone it
    is read in and where that zone came from."""

    intent: Intent
    actions: list[Action]
    instant: datetime | None
    zone: str | None = None
    timezone_from: TimezoneFrom | None = None

    @property
    def active(self) -> list[Action]:
        """The rows the intent currently maps to: queued or submitted."""
        return [a for a in self.actions if a.status in ACTIVE]


@dataclass(frozen=True)
class IntentResult(IntentView):
    """What a write did: whether it created the intent or changed it, and what reconciling
    the thing at once did."""

    created: bool = False
    changed: bool = False
    reconciled: ReconcileSummary = field(default_factory=ReconcileSummary)


# ---------------------------------------------------------------------------- validation


def _check_key(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{name} must be a non-empty string", field=name)
    if len(value) > MAX_KEY_LENGTH:
        raise InputError(f"{name} is longer than {MAX_KEY_LENGTH} characters", field=name)
    return value


def _targets(given: object, action_type: str, settings: Settings) -> tuple[str, ...]:
    if isinstance(given, str) or not isinstance(given, Collection):
        raise InputError("targets must be a list of target names", field="targets")
    targets = tuple(sorted({_check_key(t, "targets") for t in given}))
    if not targets:
        raise InputError("targets must name at least one target", field="targets")
    if len(targets) > MAX_TARGETS:
        raise InputError(f"targets names more than {MAX_TARGETS} targets", field="targets")
    config = settings.action_type(action_type)
    if config is not None and config.targets is not None:
        unknown = [t for t in targets if t not in config.targets]
        if unknown:
            raise UnknownTargetError(
                f"{', '.join(map(repr, unknown))} {'is' if len(unknown) == 1 else 'are'} not"
                f" a target of {action_type}; allowed: {', '.join(sorted(config.targets))}",
                field="targets",
                details={"unknown": unknown, "allowed": sorted(config.targets)},
            )
    return targets


def _instant(value: datetime | str) -> datetime:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError as exc:
            raise InvalidTimeError(
                f"publish_at {value!r} is not an ISO 8601 date and time", field="publish_at"
            ) from exc
    return require_aware(value)


def _when(
    given: IntentInput, workspace_timezone: str
) -> tuple[date | None, time | None, str | None, datetime | None, datetime]:
    """(wall_date, wall_time, timezone, publish_at, the instant they resolve to)."""
    has_wall = given.wall_date is not None or given.wall_time is not None
    if has_wall and given.publish_at is not None:
        raise InvalidTimeError(
            "give either date and time or publish_at, not both", field="publish_at"
        )
    if given.publish_at is not None:
        if given.timezone is not None:
            raise InvalidTimezoneError(
                "timezone applies to a wall date and time, not to publish_at", field="timezone"
            )
        instant = _instant(given.publish_at)
        return None, None, None, instant, instant
    if given.wall_date is None or given.wall_time is None:
        missing = "date" if given.wall_date is None else "time"
        raise InvalidTimeError(
            f"{missing} is required: give a date and time, or publish_at", field=missing
        )
    wall_date, wall_time = parse_date(given.wall_date), parse_clock(given.wall_time)
    tz = zone(given.timezone if given.timezone is not None else workspace_timezone)
    return wall_date, wall_time, given.timezone, None, resolve_wall_time(wall_date, wall_time, tz)


def _check_window(instant: datetime, is_instant: bool, settings: Settings, now: datetime) -> None:
    if instant < now - timedelta(seconds=settings.past_grace_seconds):
        raise PastTimeError(
            f"the intent's time {instant.isoformat()} is in the past; choose a future time",
            field="publish_at" if is_instant else "time",
        )
    if instant > now + timedelta(days=settings.max_horizon_days):
        raise InputError(
            f"the intent's time {instant.isoformat()} is more than"
            f" {settings.max_horizon_days} days ahead",
            field="publish_at" if is_instant else "date",
        )


def validate_intent(
    given: IntentInput, settings: Settings, workspace_timezone: str, now: datetime
) -> ValidIntent:
    """Check a declared intent against the rules a person can act on (pure: no I/O).
    `workspace_timezone`: the zone a wall time without one is read in (the recipient's,
    when the intent has one; else the workspace's)."""
    if given.recipient_id is not None:
        check_recipient_id(given.recipient_id)
    if settings.action_type(given.action_type) is None:
        known = ", ".join(sorted(settings.action_types))
        raise UnknownActionTypeError(
            f"unknown action_type {given.action_type!r}; known types: {known}",
            field="action_type",
        )
    targets = _targets(given.targets, given.action_type, settings)
    if given.state not in STATES:
        raise InputError("state must be 'scheduled' or 'unscheduled'", field="state")
    state = cast(IntentState, given.state)

    wall_date, wall_time, timezone, publish_at, instant = _when(given, workspace_timezone)
    if state == "scheduled":
        # An intent being unscheduled may keep a time that has passed.
        _check_window(instant, publish_at is not None, settings, now)

    if not isinstance(given.payload, Mapping):
        raise InputError("payload must be a JSON object", field="payload")
    payload = dict(given.payload)
    size = payload_size(payload)
    if size > PAYLOAD_MAX_BYTES:
        raise PayloadTooLargeError(
            f"payload is {size} bytes; the limit is {PAYLOAD_MAX_BYTES} bytes",
            field="payload",
            details={"limit": PAYLOAD_MAX_BYTES, "size": size},
        )
    # Stored as Postgres will give it back (e.g. no NaN, keys as strings).
    payload = json.loads(json.dumps(payload))
    return ValidIntent(
        action_type=given.action_type,
        targets=targets,
        wall_date=wall_date,
        wall_time=wall_time,
        timezone=timezone,
        publish_at=publish_at,
        payload=payload,
        state=state,
        recipient_id=given.recipient_id,
        transactional=bool(given.transactional),
    )


# -------------------------------------------------------------------------- database


@contextmanager
def _database_rules() -> Iterator[None]:
    """The database's own checks, should they ever disagree with ours, as domain errors."""
    try:
        yield
    except psycopg.errors.InvalidParameterValue as exc:  # tickwork_check_timezone
        raise InvalidTimezoneError(exc.diag.message_primary or "unknown time zone") from exc
    except psycopg.errors.CheckViolation as exc:
        raise InputError(
            f"the intent breaks a rule: {exc.diag.constraint_name or exc.diag.message_primary}"
        ) from exc
    except psycopg.DataError as exc:
        # Values Postgres cannot store: NUL characters in text or JSON, out-of-range numbers.
        raise InputError(f"a value cannot be stored: {exc}") from exc


def _workspace_timezone(conn: Connection, workspace_id: UUID) -> str:
    row = conn.execute(_WORKSPACE_TIMEZONE, {"workspace_id": workspace_id}).fetchone()
    if row is None:
        raise NotFoundError("the workspace does not exist")
    return str(row[0])


def _one(conn: Connection, sql: LiteralString, params: dict[str, Any]) -> Intent | None:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(sql, params).fetchone()
    return intent_from_row(row) if row else None


def _reread(conn: Connection, intent: Intent) -> Intent:
    """The intent as stored now, with the reconciler's bookkeeping."""
    found = _one(conn, _GET, {"workspace_id": intent.workspace_id, "thing_id": intent.thing_id})
    assert found is not None  # locked by the caller
    return found


class _Reading(TypedDict):
    instant: datetime | None
    zone: str | None
    timezone_from: TimezoneFrom | None


def _view(conn: Connection, intent: Intent, workspace_timezone: str) -> _Reading:
    """The instant the intent means now, the zone its wall time is read in and where that
    zone came from; the instant None when the zone can no longer be read (a recipient
    deleted, a zone gone from tzdata)."""
    if intent.publish_at is not None:
        return _Reading(instant=require_aware(intent.publish_at), zone=None, timezone_from=None)
    try:
        zone_name, origin = zone_for(
            conn, intent.workspace_id, given=intent.timezone, recipient_id=intent.recipient_id,
            workspace_zone=workspace_timezone,
        )  # fmt: skip
        return _Reading(instant=intent.instant(zone_name), zone=zone_name, timezone_from=origin)
    except InputError:
        return _Reading(instant=None, zone=None, timezone_from=None)


def write_intent(
    conn: Connection,
    workspace_id: UUID,
    thing_id: str,
    valid: ValidIntent,
    *,
    updated_by: str | None = None,
) -> tuple[Intent, bool, bool]:
    """Store a validated intent without reconciling it, holding its row lock in the caller's
    transaction. Returns (intent, created, changed)."""
    params = {
        "workspace_id": workspace_id,
        "thing_id": thing_id,
        "action_type": valid.action_type,
        "targets": list(valid.targets),
        "wall_date": valid.wall_date,
        "wall_time": valid.wall_time,
        "timezone": valid.timezone,
        "publish_at": valid.publish_at,
        "payload": Jsonb(valid.payload),
        "state": valid.state,
        "updated_by": updated_by,
        "recipient_id": valid.recipient_id,
        "transactional": valid.transactional,
    }
    current = reconcile.lock_intent(conn, workspace_id, thing_id)
    if current is None:
        created = _one(conn, _INSERT, params)
        if created is not None:
            return created, True, True
        # Declared concurrently by someone else first: theirs is now the current version.
        current = reconcile.lock_intent(conn, workspace_id, thing_id)
        assert current is not None
    if valid.same_as(current):
        return current, False, False
    updated = _one(conn, _UPDATE, params)
    assert updated is not None  # locked above
    return updated, False, True


def declare_intent(
    conn: Connection,
    workspace_id: UUID,
    thing_id: str,
    intent: IntentInput,
    settings: Settings,
    now: datetime,
    *,
    updated_by: str | None = None,
    queues: QueuePort | None = None,
) -> IntentResult:
    """Declare or change the intent for a thing and reconcile the thing at once.

    Raises InputError (and its kinds: UnknownActionTypeError, UnknownTargetError,
    InvalidTimezoneError, InvalidTimeError, PastTimeError, PayloadTooLargeError) for a bad
    intent and NotFoundError for an unknown workspace; then nothing is written. Declaring
    the same intent again changes nothing (its version stays). With `queues`, rows due
    within the tick's look-ahead are handed to their queue at once."""
    thing_id = _check_key(thing_id, "thing_id")
    # The transaction rolls back before a database refusal becomes a domain error.
    with _database_rules(), conn.transaction():
        workspace_timezone = _workspace_timezone(conn, workspace_id)
        # A wall time with no zone is read in the recipient's (an unknown one is refused
        # here, before anything is written), else the workspace's.
        default_zone, _ = zone_for(
            conn, workspace_id, given=None, recipient_id=intent.recipient_id,
            workspace_zone=workspace_timezone,
        )  # fmt: skip
        valid = validate_intent(intent, settings, default_zone, now)
        stored, created, changed = write_intent(
            conn, workspace_id, thing_id, valid, updated_by=updated_by
        )
        summary, inserted = reconcile.reconcile_locked(conn, stored, settings)
        result = IntentResult(
            intent=_reread(conn, stored),
            actions=reconcile.thing_actions(conn, workspace_id, thing_id),
            **_view(conn, stored, workspace_timezone),
            created=created,
            changed=changed,
            reconciled=summary,
        )
    reconcile.enqueue_inserted(conn, queues, inserted, settings)
    return result


def unschedule_intent(
    conn: Connection,
    workspace_id: UUID,
    thing_id: str,
    settings: Settings,
    *,
    updated_by: str | None = None,
) -> IntentResult:
    """Set the thing's intent to `unscheduled` and reconcile at once: its queued rows are
    cancelled, subject to the age and terminal-parent gates. NotFoundError when the
    workspace has no intent for this thing."""
    thing_id = _check_key(thing_id, "thing_id")
    with _database_rules(), conn.transaction():
        workspace_timezone = _workspace_timezone(conn, workspace_id)
        current = reconcile.lock_intent(conn, workspace_id, thing_id)
        if current is None:
            raise NotFoundError(f"no schedule intent for thing {thing_id!r} in this workspace")
        changed = current.state != "unscheduled"
        if changed:
            params = {"workspace_id": workspace_id, "thing_id": thing_id,
                      "updated_by": updated_by}  # fmt: skip
            updated = _one(conn, _UNSCHEDULE, params)
            assert updated is not None  # locked above
            current = updated
        summary, _ = reconcile.reconcile_locked(conn, current, settings)
        return IntentResult(
            intent=_reread(conn, current),
            actions=reconcile.thing_actions(conn, workspace_id, thing_id),
            **_view(conn, current, workspace_timezone),
            changed=changed,
            reconciled=summary,
        )


def get_intent(conn: Connection, workspace_id: UUID, thing_id: str) -> IntentView | None:
    """The thing's intent with every row of the thing, or None if the workspace has none."""
    with _database_rules(), conn.transaction():
        intent = _one(conn, _GET, {"workspace_id": workspace_id, "thing_id": thing_id})
        if intent is None:
            return None
        return IntentView(
            intent=intent,
            actions=reconcile.thing_actions(conn, workspace_id, thing_id),
            **_view(conn, intent, _workspace_timezone(conn, workspace_id)),
        )
