"""Scheduled actions and their state machine (playbook §3).

    queued ──▶ submitted ──▶ published
      │            ├───────▶ failed ──(admin retry)──▶ queued
      │            └───────▶ queued   (never reached the provider, or a provable transient)
      └──────────────────▶ cancelled

Every transition is one conditional UPDATE naming the status it expects. A transition asked
of a row in another state changes nothing and returns the row as it is, so callers can say
why (`Transition.changed` is False); only a missing row comes back as `action=None`.
Reschedule is cancel + insert with lineage; `publish_at` is never edited in place.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, make_dataclass
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any, Literal, NamedTuple, TypeVar, cast
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from tickwork.config import Settings
from tickwork.db import Connection, storable
from tickwork.errors import (
    ConflictError,
    IdempotencyKeyReusedError,
    InputError,
    NotFoundError,
    PastTimeError,
    PayloadTooLargeError,
    UnknownActionTypeError,
    UnknownTargetError,
)
from tickwork.sql import query
from tickwork.wallclock import require_aware

Status = Literal["queued", "submitted", "published", "failed", "cancelled"]
ACTIVE: frozenset[str] = frozenset({"queued", "submitted"})
TERMINAL: frozenset[str] = frozenset({"published", "failed", "cancelled"})

# Mirrors the CHECK constraint on scheduled_actions.payload (bytes of its JSON text).
PAYLOAD_MAX_BYTES = 65536
MAX_KEY_LENGTH = 200

_INSERT = query("insert_action")
_GET = query("get_action")
_GET_BY_DEDUPE_KEY = query("get_action_by_dedupe_key")
_CANCEL = query("cancel_action")
_RETRY = query("retry_action")
_CLAIM = query("claim_actions")
_FINALIZE = query("finalize_actions")


@dataclass(frozen=True, slots=True)
class Claimed:
    """What a dispatcher, its providers and the admission policies read of a row: the claim
    returns these columns alone. A claimed wave is the hot path, where loading a row's
    history and bookkeeping columns as well cost more than the claim's own update."""

    id: UUID
    workspace_id: UUID
    action_type: str
    thing_id: str | None
    target_key: str
    payload: dict[str, Any]
    publish_at: datetime
    status: Status
    attempt_count: int
    manual_retries: int
    next_attempt_at: datetime | None
    source: str
    connection_id: UUID | None  # the workspace connection it is sent through
    recipient_id: str | None
    transactional: bool

    @property
    def due_at(self) -> datetime:
        """When the row is next due: a backoff or retry time if set, else publish_at."""
        return self.next_attempt_at or self.publish_at


RowT = TypeVar("RowT", bound=Claimed)

# A frozen dataclass's __init__ sets each field through object.__setattr__, at several
# times the cost of a plain one: for a claimed wave, more than the claim's statement. A
# claimed row is built as a plain twin with the same slots, then made a Claimed (the same
# layout, so Python allows the class change); from then on it is as frozen as any other.
_ClaimedTwin = make_dataclass(
    "_ClaimedTwin", list(Claimed.__dataclass_fields__), slots=True, eq=False, match_args=False
)


def claimed_of(values: Sequence[Any]) -> Claimed:
    """A Claimed of its fields' values, in field order."""
    row = _ClaimedTwin(*values)
    row.__class__ = Claimed
    return cast(Claimed, row)


@dataclass(frozen=True, slots=True)
class Action(Claimed):
    """One row of scheduled_actions, column for column."""

    created_by: str | None
    error_code: str | None
    last_error: str | None
    enqueued_at: datetime | None
    provider_id: str | None
    submitted_at: datetime | None
    finished_at: datetime | None
    dedupe_key: str | None
    rescheduled_from: UUID | None
    recurring_schedule_id: UUID | None
    created_at: datetime
    updated_at: datetime
    original_publish_at: datetime | None = None
    timezone: str | None = None  # the zone of the wall time it was scheduled at, if any


def action_from_row(row: Mapping[str, Any]) -> Action:
    return Action(**{name: row[name] for name in Action.__dataclass_fields__})


@dataclass(frozen=True)
class NewAction:
    action_type: str
    target_key: str
    publish_at: datetime
    payload: dict[str, Any] = field(default_factory=dict)
    thing_id: str | None = None
    dedupe_key: str | None = None
    source: str = "api"
    created_by: str | None = None
    rescheduled_from: UUID | None = None
    recurring_schedule_id: UUID | None = None
    connection_id: UUID | None = None
    # A message to a recipient: their quiet hours and caps apply unless transactional.
    recipient_id: str | None = None
    transactional: bool = False
    original_publish_at: datetime | None = None
    timezone: str | None = None


@dataclass(frozen=True)
class Scheduled:
    action: Action
    created: bool  # False when an earlier request with the same dedupe key made the row


@dataclass(frozen=True)
class Transition:
    """What a transition did: `changed` and the row after, or the row untouched and why not."""

    changed: bool
    action: Action | None

    @property
    def found(self) -> bool:
        return self.action is not None


# ---------------------------------------------------------------------------- validation


def payload_size(payload: Mapping[str, Any]) -> int:
    """Bytes of the payload as Postgres measures jsonb::text (a space after ':' and ',')."""
    try:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(", ", ": "))
    except (TypeError, ValueError) as exc:
        raise InputError(f"payload is not plain JSON: {exc}", field="payload") from exc
    return len(text.encode("utf-8"))


def _check_key(value: str | None, name: str, *, required: bool) -> None:
    if value is None:
        if required:
            raise InputError(f"{name} is required", field=name)
        return
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{name} must be a non-empty string", field=name)
    if len(value) > MAX_KEY_LENGTH:
        raise InputError(f"{name} is longer than {MAX_KEY_LENGTH} characters", field=name)


def validate(new: NewAction, settings: Settings, now: datetime) -> NewAction:
    """Check a new action against the rules a person can act on; returns it with UTC time."""
    action_type = settings.action_type(new.action_type)
    if action_type is None:
        known = ", ".join(sorted(settings.action_types))
        raise UnknownActionTypeError(
            f"unknown action_type {new.action_type!r}; known types: {known}", field="action_type"
        )
    _check_key(new.target_key, "target_key", required=True)
    if action_type.targets is not None and new.target_key not in action_type.targets:
        allowed = ", ".join(sorted(action_type.targets))
        raise UnknownTargetError(
            f"target_key {new.target_key!r} is not a target of {new.action_type};"
            f" allowed: {allowed}",
            field="target_key",
        )
    _check_key(new.thing_id, "thing_id", required=False)
    _check_key(new.dedupe_key, "dedupe_key", required=False)
    if not isinstance(new.payload, dict):
        raise InputError("payload must be a JSON object", field="payload")
    size = payload_size(new.payload)
    if size > PAYLOAD_MAX_BYTES:
        raise PayloadTooLargeError(
            f"payload is {size} bytes; the limit is {PAYLOAD_MAX_BYTES} bytes",
            field="payload",
            details={"limit": PAYLOAD_MAX_BYTES, "size": size},
        )
    publish_at = require_aware(new.publish_at)
    earliest = now - timedelta(seconds=settings.past_grace_seconds)
    if publish_at < earliest:
        raise PastTimeError(
            f"publish_at {publish_at.isoformat()} is in the past; schedule a future time"
            " or use send-now",
            field="publish_at",
        )
    if publish_at > now + timedelta(days=settings.max_horizon_days):
        raise InputError(
            f"publish_at {publish_at.isoformat()} is more than {settings.max_horizon_days}"
            " days ahead",
            field="publish_at",
        )
    from tickwork.providers.catalog import check_payload

    check_payload(action_type.provider, new.payload, has_connection=new.connection_id is not None)
    if new.publish_at is publish_at:
        return new
    return NewAction(**{**_fields(new), "publish_at": publish_at})


def _fields(new: NewAction) -> dict[str, Any]:
    return {name: getattr(new, name) for name in NewAction.__dataclass_fields__}


# ----------------------------------------------------------------------- database errors

_CONFLICT_MESSAGES = {
    "ux_scheduled_actions_active_thing_target": (
        "an active action already exists for this thing_id and target_key; cancel or"
        " reschedule it instead"
    ),
    "scheduled_actions_publish_guard": (
        "this thing_id and target_key were already published; it will not be sent again"
    ),
    "ux_scheduled_actions_dedupe": "an action with this idempotency key already exists",
}


@contextmanager
def integrity_errors() -> Iterator[None]:
    """Turn constraint violations into domain errors the API can explain."""
    try:
        with storable():
            yield
    except psycopg.errors.UniqueViolation as exc:
        constraint = exc.diag.constraint_name or ""
        message = _CONFLICT_MESSAGES.get(constraint, "the action conflicts with an existing one")
        raise ConflictError(message, details={"constraint": constraint}) from exc
    except psycopg.errors.ForeignKeyViolation as exc:
        raise NotFoundError("the workspace or referenced action does not exist") from exc
    except psycopg.errors.CheckViolation as exc:
        raise InputError(
            f"the action breaks a rule: {exc.diag.constraint_name or exc.diag.message_primary}"
        ) from exc


# ------------------------------------------------------------------------- transitions


def _insert(conn: Connection, workspace_id: UUID, new: NewAction) -> Scheduled:
    if new.recipient_id is not None:
        from tickwork.recipients.policy import at_creation

        new = at_creation(conn, workspace_id, new)
    params = _fields(new) | {"workspace_id": workspace_id, "payload": Jsonb(new.payload)}
    with integrity_errors(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_INSERT, params).fetchone()
        if row is not None:
            return Scheduled(action_from_row(row), created=True)
        # The dedupe key was taken: the first request's row is the answer.
        row = cur.execute(
            _GET_BY_DEDUPE_KEY, {"workspace_id": workspace_id, "dedupe_key": new.dedupe_key}
        ).fetchone()
    if row is None:  # pragma: no cover - the conflicting row was deleted in between
        raise ConflictError("the idempotency key was taken by a row that no longer exists")
    return Scheduled(action_from_row(row), created=False)


def schedule(
    conn: Connection, workspace_id: UUID, new: NewAction, settings: Settings, now: datetime
) -> Scheduled:
    """Insert a queued action after validating it. Same dedupe key → the first row."""
    checked = validate(new, settings, now)
    if checked.connection_id is not None:
        from tickwork import connections
        from tickwork.providers.catalog import check_payload_for

        provider = settings.action_types[checked.action_type].provider
        found = connections.require_usable(conn, workspace_id, checked.connection_id, provider)
        check_payload_for(provider, checked.payload, found.settings)
    return _insert(conn, workspace_id, checked)


def schedule_once(
    conn: Connection, workspace_id: UUID, new: NewAction, settings: Settings, now: datetime
) -> Scheduled:
    """`schedule`, where a repeated dedupe (idempotency) key returns the first row only if
    the request is the same; the key reused for a different action is refused.

    The key is looked up first: a retried request gets the first result whatever happened
    to the action since (published, so the publish guard would refuse a new row; or its
    time passed, so validation would)."""
    first = _by_dedupe_key(conn, workspace_id, new.dedupe_key)
    if first is not None:
        result = Scheduled(first, created=False)
    else:
        result = schedule(conn, workspace_id, new, settings, now)
    if not result.created and not same_request(result.action, new):
        raise IdempotencyKeyReusedError(
            "this Idempotency-Key was already used for a different action; use a new key",
            details={"action_id": str(result.action.id)},
        )
    return result


def _by_dedupe_key(conn: Connection, workspace_id: UUID, key: str | None) -> Action | None:
    if key is None:
        return None
    with storable(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            _GET_BY_DEDUPE_KEY, {"workspace_id": workspace_id, "dedupe_key": key}
        ).fetchone()
    return action_from_row(row) if row else None


def same_request(existing: Action, new: NewAction) -> bool:
    return (
        existing.action_type == new.action_type
        and existing.target_key == new.target_key
        and existing.thing_id == new.thing_id
        and existing.payload == new.payload
        # quiet hours may have moved the first row: it was asked for at its original time
        and (existing.original_publish_at or existing.publish_at) == require_aware(new.publish_at)
        and existing.recipient_id == new.recipient_id
        and existing.connection_id == new.connection_id
    )


def expect(
    transition: Transition, action_id: UUID, verb: str, from_status: str, *, done: str | None = None
) -> Action:
    """The row a transition changed, or the reason it did not: NotFoundError for a row that
    is not there (or another workspace's), ConflictError naming the status it is in.
    A row already in `done` (cancelling a cancelled row) counts as success."""
    action = transition.action
    if action is None:
        raise NotFoundError(f"no action {action_id} in this workspace")
    if transition.changed or action.status == done:
        return action
    raise ConflictError(
        f"only {from_status} actions can be {verb}; this one is {action.status}",
        details={"status": action.status},
    )


def expect_retried(transition: Transition, action_id: UUID) -> Action:
    """`expect` for retry, which also refuses a failed row that used up its retries."""
    action = transition.action
    if action is not None and not transition.changed and action.status == "failed":
        raise ConflictError(
            f"this action was retried {action.manual_retries} times, the most allowed",
            details={"manual_retries": action.manual_retries},
        )
    return expect(transition, action_id, "retried", "failed")


def get(conn: Connection, workspace_id: UUID, action_id: UUID) -> Action | None:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_GET, {"id": action_id, "workspace_id": workspace_id}).fetchone()
    return action_from_row(row) if row else None


def _transition(conn: Connection, sql: Any, params: dict[str, Any]) -> Transition:
    with integrity_errors(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(sql, params).fetchone()
    if row is None:
        return Transition(changed=False, action=None)
    return Transition(changed=bool(row["changed"]), action=action_from_row(row))


def cancel(
    conn: Connection,
    workspace_id: UUID,
    action_id: UUID,
    *,
    reason: str | None = None,
    message: str | None = None,
) -> Transition:
    """queued → cancelled. Unchanged (with the row) when it is past queued. A producer
    cancelling a row it made names why (`reason` becomes the row's error_code)."""
    params = {"id": action_id, "workspace_id": workspace_id, "reason": reason, "message": message}
    return _transition(conn, _CANCEL, params)


def retry(conn: Connection, workspace_id: UUID, action_id: UUID, settings: Settings) -> Transition:
    """failed → queued on the same row, at most `max_manual_retries` times; due at once."""
    return _transition(
        conn,
        _RETRY,
        {
            "id": action_id,
            "workspace_id": workspace_id,
            "max_manual_retries": settings.max_manual_retries,
        },
    )


def reschedule(
    conn: Connection,
    workspace_id: UUID,
    action_id: UUID,
    publish_at: datetime,
    settings: Settings,
    now: datetime,
    *,
    source: str | None = None,
    created_by: str | None = None,
    timezone: str | None = None,
) -> tuple[Transition, Action | None]:
    """Cancel a queued row and insert its replacement at `publish_at`, in one transaction.
    `timezone`: the zone of the wall time it moves to (else the old row's is kept).

    Returns the cancel transition and the new row (None when the old row was not queued:
    then nothing was written)."""
    with conn.transaction():
        cancelled = cancel(conn, workspace_id, action_id)
        if not cancelled.changed or cancelled.action is None:
            return cancelled, None
        old = cancelled.action
        replacement = NewAction(
            action_type=old.action_type,
            target_key=old.target_key,
            publish_at=publish_at,
            payload=old.payload,
            thing_id=old.thing_id,
            source=source or old.source,
            created_by=created_by or old.created_by,
            rescheduled_from=old.id,
            recurring_schedule_id=old.recurring_schedule_id,
            connection_id=old.connection_id,
            recipient_id=old.recipient_id,
            transactional=old.transactional,
            timezone=old.timezone if timezone is None else timezone,
        )
        scheduled = schedule(conn, workspace_id, replacement, settings, now)
    return cancelled, scheduled.action


def claim(
    conn: Connection,
    action_type: str,
    ids: Sequence[UUID],
    *,
    early_tolerance: float = 0.0,
    max_lateness: float | None = None,
    reclaim_after: float | None = None,
) -> list[Claimed]:
    """queued → submitted for every id that is queued, due (allowing `early_tolerance` seconds
    of clock skew) and not later than `max_lateness`; one statement for the batch. With
    `reclaim_after`, also a row left `submitted` longer than that by a claimer that died
    (only for providers that deduplicate: the call may be made a second time)."""
    if not ids:
        return []
    params = {
        "ids": uuid_array(ids),
        "action_type": action_type,
        "early_tolerance": early_tolerance,
        "max_lateness": max_lateness,
        "reclaim_after": reclaim_after,
    }
    # Binary results: a claimed wave's timestamps and ids load in a third less time.
    with conn.cursor(binary=True) as cur:
        rows = cur.execute(_CLAIM, params).fetchall()
        claimed = rows_as(Claimed, cur, rows)
    # Drip steps and messages to recipients pass their policies (fire-time conditions,
    # exits, quiet hours, caps) before any provider sees them; other rows pay nothing.
    if any(a.recipient_id is not None or a.source == "sequence" for a in claimed):
        from tickwork.admission import admit

        claimed = admit(conn, claimed)
    return claimed


def rows_as(kind: type[RowT], cur: psycopg.Cursor[Any], rows: list[Any]) -> list[RowT]:
    """Rows fetched as tuples, as Actions or Claimed: a claimed wave is the hot path, where
    building each row through a dict (class_row) costs more than the statement."""
    if not rows:
        return []
    assert cur.description is not None
    names = [column.name for column in cur.description]
    pick = itemgetter(*(names.index(name) for name in kind.__dataclass_fields__))
    if kind is Claimed:
        return cast(list[RowT], [claimed_of(pick(row)) for row in rows])
    return [kind(*pick(row)) for row in rows]


# Arrays sent as one Postgres array literal: psycopg dumps a list element by element in
# Python, which costs more than the finalize statement itself for a wave of a thousand.
def uuid_array(values: Iterable[UUID | str]) -> str:
    """Ids as the text of a uuid[]; an id given as text is parsed first, so nothing but a
    uuid can reach the literal."""
    return (
        "{" + ",".join([v.hex if isinstance(v, UUID) else UUID(str(v)).hex for v in values]) + "}"
    )


def text_array(values: Iterable[str | None]) -> str:
    return (
        "{"
        + ",".join(
            [
                "NULL"
                if value is None
                else '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
                for value in values
            ]
        )
        + "}"
    )


AttemptOutcome = Literal["delivered", "rejected", "transient", "ambiguous", "stuck"]


@dataclass(frozen=True, slots=True)
class Attempt:
    """A provider call that did not deliver, for the ledger (action_attempts): written with
    its outcome. A delivery needs none: the row it publishes records it."""

    number: int  # the row's attempt_count after its claim
    started: float  # epoch seconds
    finished: float
    outcome: AttemptOutcome
    code: str | None = None  # the provider's refusal code, if it gave one
    excerpt: str | None = None  # sanitized: no secrets, no receiver's body


class Finalization(NamedTuple):
    """Where a submitted row goes next (and, when the provider was called, the call). A
    tuple, not a dataclass: a dispatcher builds one per row it sends."""

    action_id: UUID
    status: Literal["published", "failed", "queued"]
    provider_id: str | None = None
    error_code: str | None = None
    last_error: str | None = None
    next_attempt_at: datetime | None = None
    attempt_delta: int = 0
    attempt: Attempt | None = None


def published(action_id: UUID, provider_id: str | None) -> Finalization:
    return Finalization(action_id, "published", provider_id)


def failed(action_id: UUID, error_code: str, message: str) -> Finalization:
    return Finalization(action_id, "failed", error_code=error_code, last_error=message)


def requeued(action_id: UUID, next_attempt_at: datetime, message: str) -> Finalization:
    """Back to queued after a transient error that provably did not deliver."""
    return Finalization(action_id, "queued", last_error=message, next_attempt_at=next_attempt_at)


def reverted(action_id: UUID, next_attempt_at: datetime | None, message: str) -> Finalization:
    """Undo a claim that never reached the provider: the attempt is not counted."""
    return Finalization(
        action_id, "queued", last_error=message, next_attempt_at=next_attempt_at, attempt_delta=-1
    )


# Text a provider put in an outcome is stored bounded, and without the NUL characters
# Postgres refuses, so one receiver's odd answer cannot make the batch's finalize fail.
MAX_OUTCOME_TEXT = 2000


def _outcome_text(value: str | None) -> str | None:
    if value is None:
        return None
    return value.replace("\x00", "")[:MAX_OUTCOME_TEXT]


def finalize(
    conn: Connection, outcomes: Sequence[Finalization], *, ledger: bool = True
) -> dict[UUID, str]:
    """Apply outcomes to submitted rows in one statement; returns id → new status for the rows
    that were still submitted (a row recovered as stuck meanwhile is left as it is). The
    calls go to the ledger (`ledger`: also a delivery written late)."""
    if not outcomes:
        return {}
    columns = {
        "ids": uuid_array(o.action_id for o in outcomes),
        "statuses": text_array(o.status for o in outcomes),
        "provider_ids": text_array(_outcome_text(o.provider_id) for o in outcomes),
        "error_codes": text_array(o.error_code for o in outcomes),
        "last_errors": text_array(_outcome_text(o.last_error) for o in outcomes),
        "next_attempt_ats": [o.next_attempt_at for o in outcomes],
        "attempt_deltas": "{" + ",".join([str(o.attempt_delta) for o in outcomes]) + "}",
    }
    columns |= attempt_columns(outcomes, ledger)
    rows = conn.execute(_FINALIZE, columns).fetchall()
    return {row[0]: row[1] for row in rows}


# The ledger's excerpt is bounded as its CHECK says.
MAX_EXCERPT = 300


def attempt_columns(outcomes: Sequence[Finalization], ledger: bool = True) -> dict[str, Any]:
    """The finalize's ledger parameters (text literals, as the other columns): the calls
    that did not deliver; none for a wave that delivered (its rows record their calls)."""
    calls = [(o.action_id, o.attempt) for o in outcomes if o.attempt is not None]
    return {
        "ledger": ledger,
        "attempt_ids": uuid_array(i for i, _ in calls),
        "attempt_numbers": "{" + ",".join([str(a.number) for _, a in calls]) + "}",
        "attempt_outcomes": text_array(a.outcome for _, a in calls),
        "attempt_started": "{" + ",".join([repr(a.started) for _, a in calls]) + "}",
        "attempt_latencies": "{"
        + ",".join([str(round((a.finished - a.started) * 1000)) for _, a in calls])
        + "}",
        "attempt_codes": text_array(_bounded(a.code, 100) for _, a in calls),
        "attempt_excerpts": text_array(_bounded(a.excerpt, MAX_EXCERPT) for _, a in calls),
    }


def _bounded(value: str | None, limit: int) -> str | None:
    if value is None:
        return None
    return value.replace("\x00", "")[:limit]
