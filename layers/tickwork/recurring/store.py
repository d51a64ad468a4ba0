"""Recurring schedules: a rule in recurring_schedules, its occurrences in scheduled_actions.

    active ──pause──▶ paused ──resume──▶ active
      │                 │
      └──────end────────┴──▶ ended     (also when the rule has no occurrence left)
    active ── N failed occurrences in a row (a trigger counts them) ──▶ paused, with why

Occurrences are materialized as ordinary queued rows (source 'recurring') up to
`recurring_window_days` ahead: by the hourly expander, and at once on create, edit and
resume, so a first occurrence minutes away fires on time. An occurrence that fell due while
the schedule was paused (or not expanded) fires late only if it is within the schedule's
catch-up window, and at most one of them: never a burst. The others are skipped and
counted. An edit cancels the future queued rows and materializes the new definition;
published, failed and cancelled rows stay as history. Run-now is a one-off row (source
'run_now') linked to the schedule; it does not move the next regular occurrence.

Each function that changes a schedule holds its row lock for the whole change, so an edit,
a pause and an expansion of one schedule never interleave, and every status change is one
conditional UPDATE naming the status it expects.

`queues`: given, the rows a call creates that are due within the tick's look-ahead are
handed to their queue when the call returns. Pass it only when the call is not inside a
transaction of the caller's (the rows must be committed first); otherwise hand
`ScheduleResult.created` to `enqueue_soon` after committing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, Final, Literal, LiteralString, NamedTuple, TypeVar
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from tickwork import connections, quotas
from tickwork.actions import scheduling as actions
from tickwork.actions.model import PAYLOAD_MAX_BYTES, Action, NewAction, check_tags, payload_size
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection
from tickwork.platform.errors import ConflictError, InputError, NotFoundError
from tickwork.platform.queues.enqueue import enqueue_soon
from tickwork.platform.queues.port import QueuePort
from tickwork.platform.sql import query
from tickwork.platform.wallclock import require_aware, zone
from tickwork.providers.catalog import check_payload_for
from tickwork.quotas import Limits
from tickwork.recipients.model import Recipient
from tickwork.recipients.policy import TimezoneFrom, placed, require_recipient
from tickwork.recurring.recurrence import (
    EXPANSION_BUDGET,
    Occurrence,
    Recurrence,
    Rule,
    bounded,
    plan,
    validate,
)
from tickwork.rules.templating import InvalidTemplateError, JsonTemplate, RenderError

ScheduleStatus = Literal["active", "paused", "ended"]

# Mirror the CHECK constraints of recurring_schedules.
MAX_CATCH_UP_SECONDS = 86400
MAX_FAILURES_LIMIT = 1000
PREVIEW_COUNT = 5
MAX_LIST_LIMIT = 500

_INSERT = query("insert_schedule")
_GET = query("get_schedule")
_LOCK = query("lock_schedule")
_LIST = query("list_schedules")
_UPDATE_DEFINITION = query("update_schedule_definition")
_RECORD_EXPANSION = query("record_expansion")
_PAUSE = query("pause_schedule")
_PAUSE_OF_PARENT = query("pause_schedules_of_parent")
_RESUME = query("resume_schedule")
_END = query("end_schedule")
_LOCK_TO_EXPAND = query("lock_schedule_to_expand")
_CANCEL_FUTURE = query("cancel_future_occurrences")
_CANCEL_UNDUE = query("cancel_undue_rows")
_INSERT_OCCURRENCES = query("insert_occurrences")

INFRASTRUCTURE_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)


class ScheduleCursor(NamedTuple):
    """Where a page of `list_schedules` ended: pass it as `after` for the next page."""

    created_at: datetime
    id: UUID


@dataclass(frozen=True, slots=True)
class Schedule:
    """One row of recurring_schedules, column for column."""

    id: UUID
    workspace_id: UUID
    created_by: str | None
    action_type: str
    target_key: str
    thing_id: str | None
    payload_template: dict[str, Any]
    rrule: str
    dtstart: datetime  # naive: a wall time in `timezone`
    timezone: str
    until: datetime | None
    status: ScheduleStatus
    paused_reason: str | None
    paused_at: datetime | None
    ended_reason: str | None
    ended_at: datetime | None
    revision: int
    last_materialized_through: datetime
    expansion_anchor: datetime | None
    consecutive_failures: int
    max_failures_before_pause: int
    catch_up_window_seconds: int
    skipped_occurrences: int
    created_at: datetime
    updated_at: datetime
    connection_id: UUID | None = None  # the workspace connection its occurrences send through
    recipient_id: str | None = None  # its occurrences are messages to this recipient
    transactional: bool = False  # exempt from the recipient's quiet hours and caps
    timezone_from: TimezoneFrom | None = None  # where `timezone` came from
    render_payload: bool = False  # the payload is a template rendered per occurrence
    occurrence_count: int = 0  # occurrences of the rule up to last_materialized_through
    tags: tuple[str, ...] = ()  # labels its occurrences carry (copied at expansion)

    @property
    def recurrence(self) -> Recurrence:
        return Recurrence(self.rrule, self.dtstart, self.timezone, self.until)

    @property
    def cursor(self) -> ScheduleCursor:
        return ScheduleCursor(self.created_at, self.id)


def schedule_from_row(row: Mapping[str, Any]) -> Schedule:
    values = {name: row[name] for name in Schedule.__dataclass_fields__ if name != "tags"}
    return Schedule(**values, tags=tuple(row.get("tags") or ()))


class Unset(Enum):
    """A field a PATCH leaves as it is (None, where allowed, clears it)."""

    UNSET = "unset"


UNSET: Final = Unset.UNSET


@dataclass(frozen=True)
class NewSchedule:
    action_type: str
    target_key: str
    rrule: str
    timezone: str
    # A wall time in `timezone`, without an offset; default: now there, to the minute.
    dtstart: datetime | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    thing_id: str | None = None
    until: datetime | None = None  # an instant; nothing fires after it
    catch_up_window_seconds: int | None = None  # default: settings.recurring_catch_up_seconds
    max_failures_before_pause: int | None = None  # default: settings.recurring_max_failures
    created_by: str | None = None
    connection_id: UUID | None = None
    recipient_id: str | None = None
    transactional: bool = False
    timezone_from: TimezoneFrom | None = None
    render_payload: bool = False
    tags: tuple[str, ...] = ()  # labels its occurrences carry


@dataclass(frozen=True)
class ScheduleChanges:
    """An edit with PATCH semantics: UNSET fields stay as they are."""

    rrule: str | Unset = UNSET
    dtstart: datetime | Unset = UNSET
    timezone: str | Unset = UNSET
    until: datetime | Unset | None = UNSET
    payload: dict[str, Any] | Unset = UNSET
    target_key: str | Unset = UNSET
    thing_id: str | Unset | None = UNSET
    catch_up_window_seconds: int | Unset = UNSET
    max_failures_before_pause: int | Unset = UNSET
    # Its zone stays as stored (send `timezone` to change it too).
    recipient_id: str | Unset | None = UNSET
    transactional: bool | Unset = UNSET
    render_payload: bool | Unset = UNSET


@dataclass(frozen=True)
class ScheduleResult:
    """What a lifecycle call did to a schedule and its rows."""

    schedule: Schedule
    changed: bool = True  # False: it was already in the asked-for state, nothing written
    created: tuple[UUID, ...] = ()  # occurrence rows materialized
    cancelled: tuple[UUID, ...] = ()  # queued occurrence rows cancelled
    skipped: int = 0  # missed occurrences skipped by the catch-up policy
    conflicts: int = 0  # occurrences that already had a row


# ----------------------------------------------------------------------------- validation


@dataclass(frozen=True)
class _Definition:
    """Everything an edit may change, as stored."""

    target_key: str
    thing_id: str | None
    payload: dict[str, Any]
    rrule: str
    dtstart: datetime
    timezone: str
    until: datetime | None
    catch_up_window_seconds: int
    max_failures_before_pause: int
    recipient_id: str | None = None
    transactional: bool = False
    render_payload: bool = False

    # Fields whose change moves the queued rows (the rest are policies).
    MOVING = (
        "target_key", "thing_id", "payload", "rrule", "dtstart", "timezone", "until",
        "recipient_id", "transactional", "render_payload",
    )  # fmt: skip

    @property
    def recurrence(self) -> Recurrence:
        return Recurrence(self.rrule, self.dtstart, self.timezone, self.until)

    def moves_rows_from(self, other: _Definition) -> bool:
        return any(getattr(self, name) != getattr(other, name) for name in self.MOVING)


def _check_policy(catch_up: int, max_failures: int) -> None:
    if isinstance(catch_up, bool) or not isinstance(catch_up, int):
        raise InputError("catch_up_window_seconds must be a whole number of seconds")
    if not 0 <= catch_up <= MAX_CATCH_UP_SECONDS:
        raise InputError(
            f"catch_up_window_seconds must be from 0 to {MAX_CATCH_UP_SECONDS} (one day):"
            " an occurrence missed by more than a day never fires late",
            field="catch_up_window_seconds",
        )
    if isinstance(max_failures, bool) or not isinstance(max_failures, int):
        raise InputError("max_failures_before_pause must be a whole number")
    if not 1 <= max_failures <= MAX_FAILURES_LIMIT:
        raise InputError(
            f"max_failures_before_pause must be from 1 to {MAX_FAILURES_LIMIT}",
            field="max_failures_before_pause",
        )


def occurrence_context(at: datetime, index: int, timezone: str) -> dict[str, Any]:
    """What a schedule's payload template sees of one occurrence: its 1-based index in the
    rule (from dtstart), its local date and time in the schedule's zone, the instant the
    rule gave (UTC, before any quiet hours move its row) and the zone."""
    local = at.astimezone(zone(timezone))
    return {
        "occurrence": {
            "index": index,
            "local_date": local.date().isoformat(),
            "local_time": local.strftime("%H:%M:%S"),
            "scheduled_at": at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "timezone": timezone,
        }
    }


def _render(template: JsonTemplate, context: dict[str, Any]) -> dict[str, Any]:
    """The payload of one occurrence. A render that fails is the template's problem:
    `invalid_template` (at create, a 422; at expansion, the expander pauses the schedule
    and says why)."""
    try:
        rendered = template.render(context)
    except RenderError as exc:
        raise InvalidTemplateError(
            f"the payload cannot be rendered for an occurrence: {exc.message}", field=exc.field
        ) from exc
    assert isinstance(rendered, dict)  # the template is a JSON object, and keeps its shape
    size = payload_size(rendered)
    if size > PAYLOAD_MAX_BYTES:
        raise InvalidTemplateError(
            f"an occurrence's rendered payload is {size} bytes; the limit is"
            f" {PAYLOAD_MAX_BYTES} bytes",
            field="payload",
        )
    return rendered


def _validate(
    action_type: str,
    definition: _Definition,
    settings: Settings,
    now: datetime,
    connection_id: UUID | None = None,
    *,
    render_payload: bool = False,
) -> Rule:
    """Check a definition against every rule a person can act on; nothing is written."""
    payload = definition.payload
    if render_payload:
        # Compiled (a template that does not compile is refused here), then rendered for a
        # sample occurrence, so a misspelt field is refused now rather than at expansion.
        sample = occurrence_context(now, 1, str(zone(definition.timezone).key))
        payload = _render(JsonTemplate(definition.payload, "payload"), sample)
    # The template is checked as the action it makes (type, target, thing, payload size);
    # its time is that of the checks, not of an occurrence.
    actions.validate(
        NewAction(
            action_type=action_type,
            target_key=definition.target_key,
            publish_at=now,
            payload=payload,
            thing_id=definition.thing_id,
            connection_id=connection_id,
        ),
        settings,
        now,
    )
    _check_policy(definition.catch_up_window_seconds, definition.max_failures_before_pause)
    return validate(
        definition.recurrence,
        now,
        min_interval_seconds=settings.recurring_min_interval_seconds,
        horizon_days=settings.max_horizon_days,
        max_past_days=settings.recurring_max_past_days,
    )


def validate_recurrence(recurrence: Recurrence, settings: Settings, now: datetime) -> Rule:
    """Check a rule, start, zone and end alone (a dry run); raises what create would."""
    return validate(
        recurrence,
        require_aware(now, field="now"),
        min_interval_seconds=settings.recurring_min_interval_seconds,
        horizon_days=settings.max_horizon_days,
        max_past_days=settings.recurring_max_past_days,
    )


def preview_occurrences(
    schedule: Schedule | Recurrence, now: datetime, count: int = PREVIEW_COUNT
) -> list[Occurrence]:
    """The next `count` occurrences after `now` by the rule (for an ended schedule, none).
    A paused schedule shows what would fire once resumed."""
    if isinstance(schedule, Schedule):
        if schedule.status == "ended":
            return []
        anchor = schedule.expansion_anchor
        rule = Rule(schedule.recurrence)
    else:
        anchor = None
        rule = Rule(schedule)
    return bounded(lambda: rule.upcoming(now, count, anchor=anchor), EXPANSION_BUDGET)


# ------------------------------------------------------------------------------- storage


@contextmanager
def _integrity_errors() -> Iterator[None]:
    try:
        yield
    except psycopg.errors.ForeignKeyViolation as exc:
        raise NotFoundError("the workspace does not exist") from exc
    except psycopg.errors.CheckViolation as exc:
        raise InputError(
            f"the schedule breaks a rule: {exc.diag.constraint_name or exc.diag.message_primary}"
        ) from exc
    except psycopg.DataError as exc:
        # Values Postgres cannot store: NUL characters in text or JSON, out-of-range numbers.
        raise InputError(f"a value cannot be stored: {exc}") from exc


def _fetch(conn: Connection, sql: LiteralString, params: dict[str, Any]) -> Schedule | None:
    with _integrity_errors(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(sql, params).fetchone()
    return schedule_from_row(row) if row is not None else None


def _not_found(schedule_id: UUID) -> NotFoundError:
    return NotFoundError(f"recurring schedule {schedule_id} not found")


def _lock(conn: Connection, workspace_id: UUID, schedule_id: UUID) -> Schedule:
    found = _fetch(conn, _LOCK, {"id": schedule_id, "workspace_id": workspace_id})
    if found is None:
        raise _not_found(schedule_id)
    return found


def _transitioned(found: Schedule | None, schedule: Schedule, action: str) -> Schedule:
    if found is None:  # pragma: no cover - the row is locked, so its status cannot move
        raise ConflictError(
            f"recurring schedule {schedule.id} changed while it was being {action}; try again"
        )
    return found


def _ended(schedule: Schedule, action: str) -> ConflictError:
    return ConflictError(
        f"recurring schedule {schedule.id} has ended and cannot be {action};"
        " create a new schedule instead",
        details={"status": schedule.status},
    )


def _cancel_future(conn: Connection, schedule_id: UUID, now: datetime) -> list[UUID]:
    """Cancel the schedule's queued occurrences after `now` (an edit)."""
    rows = conn.execute(_CANCEL_FUTURE, {"id": schedule_id, "now": now}).fetchall()
    return [row[0] for row in rows]


def _cancel_undue(conn: Connection, schedule_id: UUID, now: datetime) -> list[UUID]:
    """Cancel the schedule's queued rows not yet due, retries included (pause, end)."""
    rows = conn.execute(_CANCEL_UNDUE, {"id": schedule_id, "now": now}).fetchall()
    return [row[0] for row in rows]


@dataclass(frozen=True)
class _Expansion:
    schedule: Schedule
    created: list[UUID]
    skipped: int
    conflicts: int


def materialize(
    conn: Connection, schedule: Schedule, rule: Rule, settings: Settings, now: datetime,
    limits: Limits,
) -> _Expansion:  # fmt: skip
    """Materialize occurrences after the schedule's `last_materialized_through` up to
    now + window, with the catch-up policy for those already past, within the workspace's
    `limits`. Caller holds the lock."""
    horizon = now + timedelta(days=settings.recurring_window_days)
    through = schedule.last_materialized_through
    if schedule.status != "active" or through >= horizon:
        return _Expansion(schedule, [], 0, 0)
    planned = bounded(
        lambda: plan(
            rule,
            through=through,
            now=now,
            horizon=horizon,
            catch_up=timedelta(seconds=schedule.catch_up_window_seconds),
            anchor=schedule.expansion_anchor,
        ),
        EXPANSION_BUDGET,
    )
    quotas.check_window_rows(len(planned.fire), settings.recurring_window_days, limits)
    created: list[UUID] = []
    if planned.fire:
        rows = conn.execute(
            _INSERT_OCCURRENCES, _occurrence_rows(conn, schedule, planned.fire, planned.skipped)
        ).fetchall()
        created = [row[0] for row in rows]
    recorded = _fetch(
        conn,
        _RECORD_EXPANSION,
        {
            "id": schedule.id,
            "through": horizon,
            "anchor": planned.anchor,
            "skipped": len(planned.skipped),
            "occurrences": len(planned.fire) + len(planned.skipped),
            "expected_through": through,
        },
    )
    return _Expansion(
        _transitioned(recorded, schedule, "expanded"),
        created,
        len(planned.skipped),
        len(planned.fire) - len(created),
    )


def _occurrence_rows(
    conn: Connection, schedule: Schedule, fire: Sequence[Occurrence], skipped: Sequence[Occurrence]
) -> dict[str, Any]:
    """The parameters of insert_occurrences: per occurrence its time, placed by the
    recipient's quiet hours as a one-off's is (the time the rule gave kept when it moved),
    and its payload rendered when the schedule renders it (null: the template as it is)."""
    recipient: Recipient | None = None
    if schedule.recipient_id is not None:
        recipient = require_recipient(conn, schedule.workspace_id, schedule.recipient_id)
    publish_ats: list[datetime] = []
    originals: list[datetime | None] = []
    for occurrence in fire:
        if recipient is None:
            publish_ats.append(occurrence.at)
            originals.append(None)
            continue
        at, original = placed(occurrence.at, recipient, transactional=schedule.transactional)
        publish_ats.append(at)
        originals.append(original)
    payloads: list[Jsonb] | None = None
    if schedule.render_payload:
        template = JsonTemplate(schedule.payload_template, "payload")
        # Skipped occurrences count: an index is the occurrence's place in the rule.
        ordered = sorted([*fire, *skipped], key=lambda o: o.at)
        index = {o.at: schedule.occurrence_count + i for i, o in enumerate(ordered, start=1)}
        payloads = [
            Jsonb(_render(template, occurrence_context(o.at, index[o.at], schedule.timezone)))
            for o in fire
        ]
    return {
        "id": schedule.id,
        "publish_ats": publish_ats,
        "original_publish_ats": originals,
        "payloads": payloads,
    }


def occurrences_through(rule: Rule, through: datetime) -> int:
    """How many occurrences the rule has at or before `through`, from dtstart: where the
    index of the next one starts (walked once, when a rendering schedule is made or its
    rule changes; expansions then count on)."""
    start = rule.resolve(rule.dtstart) - timedelta(seconds=1)
    if through <= start:
        return 0
    window = bounded(lambda: rule.between(start, through), EXPANSION_BUDGET)
    return len(window.occurrences)


def lock_to_expand(conn: Connection, schedule_id: UUID, horizon: datetime) -> Schedule | None:
    """The schedule locked for the expander, if it is still active and short of `horizon`
    (another expander may have taken it since the batch was read)."""
    return _fetch(conn, _LOCK_TO_EXPAND, {"id": schedule_id, "horizon": horizon})


def pause_unexpandable(conn: Connection, schedule: Schedule, why: str, now: datetime) -> None:
    """Pause a schedule whose stored rule no longer expands (a zone gone from tzdata, a
    search too costly), visibly, and cancel its rows not yet due."""
    _fetch(conn, _PAUSE, {"id": schedule.id, "reason": f"cannot expand: {why}", "now": now})
    _cancel_undue(conn, schedule.id, now)


def _enqueue(
    conn: Connection, queues: QueuePort | None, ids: Sequence[UUID], settings: Settings
) -> None:
    """Hand rows due within the tick's look-ahead to their queue now, so an occurrence
    minutes away fires on time rather than at the next tick. Only after the rows are
    committed: a dispatcher must be able to see them."""
    if queues is not None and ids:
        enqueue_soon(conn, queues, ids, settings)


# ---------------------------------------------------------------------------- lifecycle


def create_schedule(
    conn: Connection,
    workspace_id: UUID,
    new: NewSchedule,
    settings: Settings,
    now: datetime,
    *,
    queues: QueuePort | None = None,
    limits: Limits | None = None,
) -> ScheduleResult:
    """Validate and store a schedule, and materialize its first window of occurrences.
    Occurrences before `now` are not missed ones: nothing is caught up at creation.
    `limits`: the workspace's quotas (default: the stack's, from `settings`)."""
    now = require_aware(now, field="now")
    tz = zone(new.timezone)
    dtstart = new.dtstart
    if dtstart is None:
        dtstart = now.astimezone(tz).replace(tzinfo=None, second=0, microsecond=0)
    definition = _Definition(
        target_key=new.target_key,
        thing_id=new.thing_id,
        payload=new.payload,
        rrule=new.rrule,
        dtstart=dtstart,
        timezone=new.timezone,
        until=new.until,
        catch_up_window_seconds=(
            settings.recurring_catch_up_seconds
            if new.catch_up_window_seconds is None
            else new.catch_up_window_seconds
        ),
        max_failures_before_pause=(
            settings.recurring_max_failures
            if new.max_failures_before_pause is None
            else new.max_failures_before_pause
        ),
    )
    rule = _validate(
        new.action_type, definition, settings, now, new.connection_id,
        render_payload=new.render_payload,
    )  # fmt: skip
    tags = check_tags(new.tags)
    with conn.transaction():
        if new.recipient_id is not None:
            require_recipient(conn, workspace_id, new.recipient_id)
        if new.connection_id is not None:
            provider = settings.action_types[new.action_type].provider
            found = connections.require_usable(conn, workspace_id, new.connection_id, provider)
            check_payload_for(provider, definition.payload, found.settings)
        inserted = _fetch(
            conn,
            _INSERT,
            {
                "workspace_id": workspace_id,
                "created_by": new.created_by,
                "action_type": new.action_type,
                "target_key": definition.target_key,
                "thing_id": definition.thing_id,
                "payload_template": Jsonb(definition.payload),
                "rrule": definition.rrule,
                "dtstart": rule.dtstart,
                "timezone": definition.timezone,
                "until": rule.until,
                "last_materialized_through": now,
                "max_failures_before_pause": definition.max_failures_before_pause,
                "catch_up_window_seconds": definition.catch_up_window_seconds,
                "connection_id": new.connection_id,
                "recipient_id": new.recipient_id,
                "transactional": new.transactional,
                "timezone_from": new.timezone_from,
                "render_payload": new.render_payload,
                "occurrence_count": (occurrences_through(rule, now) if new.render_payload else 0),
                "tags": list(tags),
            },
        )
        assert inserted is not None
        expansion = materialize(conn, inserted, rule, settings, now, limits or Limits.of(settings))
    _enqueue(conn, queues, expansion.created, settings)
    return ScheduleResult(
        expansion.schedule,
        created=tuple(expansion.created),
        skipped=expansion.skipped,
        conflicts=expansion.conflicts,
    )


_T = TypeVar("_T")


def _pick(change: _T | Unset, current: _T) -> _T:
    return current if isinstance(change, Unset) else change


def _merge(current: Schedule, changes: ScheduleChanges) -> _Definition:
    return _Definition(
        target_key=_pick(changes.target_key, current.target_key),
        thing_id=_pick(changes.thing_id, current.thing_id),
        payload=_pick(changes.payload, current.payload_template),
        rrule=_pick(changes.rrule, current.rrule),
        dtstart=_pick(changes.dtstart, current.dtstart),
        timezone=_pick(changes.timezone, current.timezone),
        until=_pick(changes.until, current.until),
        catch_up_window_seconds=_pick(
            changes.catch_up_window_seconds, current.catch_up_window_seconds
        ),
        max_failures_before_pause=_pick(
            changes.max_failures_before_pause, current.max_failures_before_pause
        ),
        recipient_id=_pick(changes.recipient_id, current.recipient_id),
        transactional=_pick(changes.transactional, current.transactional),
        render_payload=_pick(changes.render_payload, current.render_payload),
    )


def _definition_of(schedule: Schedule) -> _Definition:
    return _merge(schedule, ScheduleChanges())


def edit_schedule(
    conn: Connection,
    workspace_id: UUID,
    schedule_id: UUID,
    changes: ScheduleChanges,
    settings: Settings,
    now: datetime,
    *,
    queues: QueuePort | None = None,
    limits: Limits | None = None,
) -> ScheduleResult:
    """Change a schedule (PATCH semantics). When the rule, time, zone, until, target, thing
    or payload change, the future queued rows are cancelled and the new definition is
    materialized from now; rows already published, failed or cancelled stay as they are.
    A paused schedule only stores the change. An ended one cannot be edited."""
    now = require_aware(now, field="now")
    with conn.transaction():
        current = _lock(conn, workspace_id, schedule_id)
        if current.status == "ended":
            raise _ended(current, "edited")
        before = _definition_of(current)
        after = _merge(current, changes)
        if after == before:
            return ScheduleResult(current, changed=False)
        rule = _validate(
            current.action_type, after, settings, now, current.connection_id,
            render_payload=after.render_payload,
        )  # fmt: skip
        if after.recipient_id is not None and after.recipient_id != before.recipient_id:
            require_recipient(conn, workspace_id, after.recipient_id)
        moves = after.moves_rows_from(before)
        through = current.last_materialized_through
        count = current.occurrence_count
        if moves:
            through = min(through, now)
            count = occurrences_through(rule, through) if after.render_payload else 0
        updated = _fetch(
            conn,
            _UPDATE_DEFINITION,
            {
                "id": current.id,
                "expected_status": current.status,
                "target_key": after.target_key,
                "thing_id": after.thing_id,
                "payload_template": Jsonb(after.payload),
                "rrule": after.rrule,
                "dtstart": rule.dtstart,
                "timezone": after.timezone,
                "until": rule.until,
                "max_failures_before_pause": after.max_failures_before_pause,
                "catch_up_window_seconds": after.catch_up_window_seconds,
                "last_materialized_through": through,
                # An anchor is a wall time of the old definition: useless for the new one.
                "expansion_anchor": None if moves else current.expansion_anchor,
                "occurrence_count": count,
                "recipient_id": after.recipient_id,
                "transactional": after.transactional,
                "render_payload": after.render_payload,
                # A zone sent is a zone given; otherwise it stays where it came from.
                "timezone_from": (
                    current.timezone_from if isinstance(changes.timezone, Unset) else "given"
                ),
            },
        )
        schedule = _transitioned(updated, current, "edited")
        cancelled = _cancel_future(conn, schedule.id, now) if moves else []
        expansion = materialize(conn, schedule, rule, settings, now, limits or Limits.of(settings))
    _enqueue(conn, queues, expansion.created, settings)
    return ScheduleResult(
        expansion.schedule,
        created=tuple(expansion.created),
        cancelled=tuple(cancelled),
        skipped=expansion.skipped,
        conflicts=expansion.conflicts,
    )


def pause_schedule(
    conn: Connection,
    workspace_id: UUID,
    schedule_id: UUID,
    now: datetime,
    *,
    reason: str | None = None,
) -> ScheduleResult:
    """active → paused: queued rows not yet due are cancelled (one already due may still
    fire) and nothing more is materialized until a resume. Pausing a paused schedule
    changes nothing."""
    now = require_aware(now, field="now")
    with conn.transaction():
        current = _lock(conn, workspace_id, schedule_id)
        if current.status == "paused":
            return ScheduleResult(current, changed=False)
        if current.status == "ended":
            raise _ended(current, "paused")
        paused = _fetch(
            conn, _PAUSE, {"id": current.id, "reason": reason or "paused by request", "now": now}
        )
        schedule = _transitioned(paused, current, "paused")
        cancelled = _cancel_undue(conn, schedule.id, now)
    return ScheduleResult(schedule, cancelled=tuple(cancelled))


def pause_of_parent(
    conn: Connection, workspace_id: UUID, *, tag: str | None, recipient_id: str | None,
    action_type: str | None, target_key: str | None, thing_id: str | None, actor: str,
    now: datetime, limit: int,
) -> list[UUID]:  # fmt: skip
    """active → paused for at most `limit` active schedules that carry `tag`, or send to
    `recipient_id` (one of them), and match the other filters: what a bulk cancel of the
    tag or recipient by `actor` calls, so that no schedule makes the occurrences it cancels
    again; the reason says so. Their queued rows are left to the cancel, which takes them
    all. The ids paused; a second call pauses none of them again."""
    if (tag is None) == (recipient_id is None):
        raise ValueError("pause the schedules of one tag or one recipient")
    now = require_aware(now, field="now")
    what = f"tagged {tag}" if tag is not None else f"for recipient {recipient_id}"
    reason = f"a bulk cancel by {actor} of everything {what}"
    params = {
        "workspace_id": workspace_id, "tag": tag, "recipient_id": recipient_id,
        "action_type": action_type, "target_key": target_key, "thing_id": thing_id,
        "reason": reason, "now": now, "limit": limit,
    }  # fmt: skip
    return [row[0] for row in conn.execute(_PAUSE_OF_PARENT, params).fetchall()]


def resume_schedule(
    conn: Connection,
    workspace_id: UUID,
    schedule_id: UUID,
    settings: Settings,
    now: datetime,
    *,
    queues: QueuePort | None = None,
    limits: Limits | None = None,
) -> ScheduleResult:
    """paused → active, with a fresh failure count; materializes from now. Occurrences
    missed while paused are skipped and counted, except the latest one if it is within the
    catch-up window (it fires at once). Resuming an active schedule changes nothing."""
    now = require_aware(now, field="now")
    with conn.transaction():
        current = _lock(conn, workspace_id, schedule_id)
        if current.status == "active":
            return ScheduleResult(current, changed=False)
        if current.status == "ended":
            raise _ended(current, "resumed")
        rule = Rule(current.recurrence)
        # A pause took back the occurrences queued after it (last_materialized_through
        # went back to the pause): count again up to there, so no index is given twice.
        count = None
        if current.render_payload:
            count = occurrences_through(rule, current.last_materialized_through)
        params = {"id": current.id, "occurrence_count": count}
        resumed = _transitioned(_fetch(conn, _RESUME, params), current, "resumed")
        expansion = materialize(conn, resumed, rule, settings, now, limits or Limits.of(settings))
    _enqueue(conn, queues, expansion.created, settings)
    return ScheduleResult(
        expansion.schedule,
        created=tuple(expansion.created),
        skipped=expansion.skipped,
        conflicts=expansion.conflicts,
    )


def end_schedule(
    conn: Connection,
    workspace_id: UUID,
    schedule_id: UUID,
    now: datetime,
    *,
    reason: str | None = None,
) -> ScheduleResult:
    """active | paused → ended, for good: queued rows not yet due are cancelled; history
    stays. Ending an ended schedule changes nothing."""
    now = require_aware(now, field="now")
    with conn.transaction():
        current = _lock(conn, workspace_id, schedule_id)
        if current.status == "ended":
            return ScheduleResult(current, changed=False)
        schedule = end_now(conn, current, reason or "ended by request", now)
        cancelled = _cancel_undue(conn, schedule.id, now)
    return ScheduleResult(schedule, cancelled=tuple(cancelled))


def end_now(conn: Connection, current: Schedule, reason: str, now: datetime) -> Schedule:
    params = {"id": current.id, "expected_status": current.status, "reason": reason, "now": now}
    return _transitioned(_fetch(conn, _END, params), current, "ended")


def run_now(
    conn: Connection,
    workspace_id: UUID,
    schedule_id: UUID,
    settings: Settings,
    now: datetime,
    *,
    queues: QueuePort | None = None,
    created_by: str | None = None,
) -> Action:
    """A one-off action from the schedule's template, due now and linked to the schedule
    (source 'run_now'). The regular occurrences are untouched: the next one fires as it
    would have. Allowed while active or paused."""
    now = require_aware(now, field="now")
    with conn.transaction():
        schedule = _lock(conn, workspace_id, schedule_id)
        if schedule.status == "ended":
            raise _ended(schedule, "run")
        payload = schedule.payload_template
        if schedule.render_payload:
            # Not an occurrence of the rule: rendered as one at now, with index 0.
            template = JsonTemplate(payload, "payload")
            payload = _render(template, occurrence_context(now, 0, schedule.timezone))
        scheduled = actions.schedule(
            conn,
            workspace_id,
            NewAction(
                action_type=schedule.action_type,
                target_key=schedule.target_key,
                publish_at=now,
                payload=payload,
                thing_id=schedule.thing_id,
                source="run_now",
                created_by=created_by or schedule.created_by,
                recurring_schedule_id=schedule.id,
                connection_id=schedule.connection_id,
                recipient_id=schedule.recipient_id,
                transactional=schedule.transactional,
                tags=schedule.tags,
            ),
            settings,
            now,
        )
    _enqueue(conn, queues, [scheduled.action.id], settings)
    return scheduled.action


def get_schedule(conn: Connection, workspace_id: UUID, schedule_id: UUID) -> Schedule:
    found = _fetch(conn, _GET, {"id": schedule_id, "workspace_id": workspace_id})
    if found is None:
        raise _not_found(schedule_id)
    return found


def list_schedules(
    conn: Connection,
    workspace_id: UUID,
    *,
    status: ScheduleStatus | None = None,
    action_type: str | None = None,
    limit: int = 50,
    after: ScheduleCursor | None = None,
) -> list[Schedule]:
    """A page of the workspace's schedules in (created_at, id) order; pass the last one's
    `cursor` as `after` for the next page."""
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise InputError(f"limit must be from 1 to {MAX_LIST_LIMIT}", field="limit")
    params = {
        "workspace_id": workspace_id,
        "status": status,
        "action_type": action_type,
        "limit": limit,
        "after_created_at": after.created_at if after else None,
        "after_id": after.id if after else None,
    }
    with conn.cursor(row_factory=dict_row) as cur:
        return [schedule_from_row(row) for row in cur.execute(_LIST, params).fetchall()]
