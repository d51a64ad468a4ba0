"""The reconciler: keeps scheduled_actions in step with schedule intents
(docs/intents.md).

For one intent it compares what is desired, one (action type, target) at the intent's
instant, with every row of the thing in any status, and acts one row at a time:

- missing active row → insert, unless the **terminal-history gate** holds: a (thing,
  target) with a published or failed row, or one cancelled by someone other than the
  reconciler, is never inserted again (the 2026-05-01 triple-publish);
- active row at another instant (or with another payload) → cancel + insert with
  `rescheduled_from` lineage, never an in-place edit;
- active row no longer desired (target removed, intent unscheduled) → cancel, but never a
  row younger than `reconcile_min_age_seconds` (**age gate**) and never a row minted by an
  explicit user action — retry, send-now, the API (**terminal-parent gate**);
- rows a provider may have seen (`submitted`, or any attempt made) are never touched.

Which cancellations count as terminal history: the playbook's reconciler edits publish_at in
place and deletes orphans, leaving no trace; we cancel instead, to keep the audit trail. A
row the reconciler cancelled — `superseded` by a move (its successor links back through
`rescheduled_from`) or `withdrawn` because the intent stopped wanting it — stands for that
edit or delete, so it does not block a later insert for the same target. It never reached a
provider (only rows with no attempt are cancelled), so inserting again cannot send twice.
Published, failed and user-cancelled rows always block, and the database's publish guard
refuses a second active row for a published (thing, target) whatever the code does.

Every intent is worked on under its row lock: the cron takes it with SKIP LOCKED, so
concurrent reconcilers split the work; the API's writes hold it while they reconcile. Rows
are changed in id order (as the dispatcher's batch claim locks them), each change in its
own savepoint, so a 23505 from the uniqueness index or the publish guard drops only that
row and is counted.
"""

from __future__ import annotations

import time as monotonic_clock
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any, Literal
from uuid import UUID

import psycopg
from psycopg import pq
from psycopg.rows import dict_row

from tickwork.actions import scheduling as actions
from tickwork.actions.model import ACTIVE, Action, NewAction, action_from_row
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection
from tickwork.platform.errors import ConflictError, InputError, UnknownActionTypeError
from tickwork.platform.observability import emit, logger
from tickwork.platform.queues.enqueue import enqueue_soon
from tickwork.platform.queues.port import QueuePort
from tickwork.platform.sql import query
from tickwork.platform.wallclock import require_aware, resolve_wall_time, zone
from tickwork.recipients.policy import zone_for

_CANDIDATES = query("intents_to_reconcile")
_LOCK = query("lock_intent")
_TRY_LOCK = query("try_lock_intent")
_CLOCK = query("workspace_clock")
_THING_ACTIONS = query("thing_actions")
_CANCEL = query("cancel_for_intent")
_MARK = query("mark_intent_reconciled")

IntentState = Literal["scheduled", "unscheduled"]

# scheduled_actions.source of the rows the reconciler mints (and so owns).
INTENT_SOURCE = "intent"
# Sources of rows minted by an explicit user action: the terminal-parent gate keeps them.
USER_ACTION_SOURCES = frozenset({"api", "send_now"})
# error_code of a row the reconciler cancelled, by reason.
WITHDRAWN = "withdrawn"
SUPERSEDED = "superseded"

Gate = Literal["terminal_history", "age", "user_action", "other_source", "in_flight", "past"]
GATES: tuple[Gate, ...] = (
    "terminal_history",
    "age",
    "user_action",
    "other_source",
    "in_flight",
    "past",
)

Key = tuple[str, str]  # (action_type, target_key)


@dataclass(frozen=True, slots=True)
class Intent:
    """One row of schedule_intents, column for column."""

    workspace_id: UUID
    thing_id: str
    action_type: str
    targets: tuple[str, ...]
    wall_date: date | None
    wall_time: time | None
    timezone: str | None
    publish_at: datetime | None
    payload: dict[str, Any]
    state: IntentState
    version: int
    reconciled_version: int
    reconciled_at: datetime | None
    recheck_at: datetime | None
    updated_by: str | None
    created_at: datetime
    updated_at: datetime
    recipient_id: str | None = None  # its rows are messages to this recipient
    transactional: bool = False  # exempt from the recipient's quiet hours and caps

    def instant(self, workspace_timezone: str) -> datetime:
        """The UTC instant the intent asks for; a wall time with no zone of its own is read
        in `workspace_timezone`: the default zone (`default_zone`: the recipient's, when
        there is a recipient, else the workspace's), by wallclock's gap/overlap rule."""
        if self.publish_at is not None:
            return require_aware(self.publish_at)
        # The table's CHECK: no publish_at means a wall date and time.
        assert self.wall_date is not None
        assert self.wall_time is not None
        return resolve_wall_time(
            self.wall_date, self.wall_time, zone(self.timezone or workspace_timezone)
        )


def default_zone(conn: Connection, intent: Intent, workspace_timezone: str) -> str:
    """The zone the intent's wall time is read in when it gives none: its recipient's (an
    unknown recipient is `unknown_recipient`), else the workspace's. Looked up only when
    it matters, so an unscheduled intent whose recipient is gone still withdraws its rows."""
    if intent.state != "scheduled" or intent.wall_date is None or intent.timezone is not None:
        return workspace_timezone
    zone_name, _ = zone_for(
        conn, intent.workspace_id, given=None, recipient_id=intent.recipient_id,
        workspace_zone=workspace_timezone,
    )  # fmt: skip
    return zone_name


def intent_from_row(row: Mapping[str, Any]) -> Intent:
    values = {name: row[name] for name in Intent.__dataclass_fields__}
    values["targets"] = tuple(values["targets"])
    return Intent(**values)


# ------------------------------------------------------------------------------ summary


@dataclass
class ReconcileSummary:
    """What one or more passes did. `skipped` counts actions a gate stopped, by gate."""

    intents: int = 0
    inserted: int = 0
    moved: int = 0
    cancelled: int = 0
    skipped: dict[Gate, int] = field(default_factory=lambda: dict.fromkeys(GATES, 0))
    # Inserts refused by the uniqueness index or the publish guard (23505), each dropped alone.
    conflicts: int = 0
    # Intents or rows the configuration no longer allows (action type or target removed).
    invalid: int = 0
    # Intents another reconciler held (the cron skips them; the holder reconciles them).
    busy: int = 0
    # Intents whose pass was rolled back (deadlock, serialization); retried next run.
    errors: int = 0
    elapsed_seconds: float = 0.0

    def skip(self, gate: Gate, count: int = 1) -> None:
        self.skipped[gate] += count

    def add(self, other: ReconcileSummary) -> None:
        self.intents += other.intents
        self.inserted += other.inserted
        self.moved += other.moved
        self.cancelled += other.cancelled
        for gate in GATES:
            self.skipped[gate] += other.skipped[gate]
        self.conflicts += other.conflicts
        self.invalid += other.invalid
        self.busy += other.busy
        self.errors += other.errors

    def as_dict(self) -> dict[str, Any]:
        return {
            "intents": self.intents,
            "inserted": self.inserted,
            "moved": self.moved,
            "cancelled": self.cancelled,
            "skipped": dict(self.skipped),
            "conflicts": self.conflicts,
            "invalid": self.invalid,
            "busy": self.busy,
            "errors": self.errors,
            "elapsed_seconds": round(self.elapsed_seconds, 3),
        }


# --------------------------------------------------------------------- planning (pure)


@dataclass(frozen=True, slots=True)
class Desired:
    action_type: str
    target_key: str
    publish_at: datetime
    payload: dict[str, Any]
    recipient_id: str | None = None
    transactional: bool = False

    @property
    def key(self) -> Key:
        return (self.action_type, self.target_key)


@dataclass(frozen=True, slots=True)
class Insert:
    desired: Desired


@dataclass(frozen=True, slots=True)
class Move:
    row: Action
    desired: Desired


@dataclass(frozen=True, slots=True)
class Withdraw:
    row: Action


Step = Insert | Move | Withdraw


@dataclass
class Plan:
    # Changes to existing rows in id order, then inserts.
    steps: list[Step] = field(default_factory=list)
    skipped: dict[Gate, int] = field(default_factory=lambda: dict.fromkeys(GATES, 0))
    # Active rows the reconciler owns before the plan runs.
    owned_active: int = 0
    # When the age gate lets the earliest deferred cancel happen.
    recheck_at: datetime | None = None


def desired_actions(intent: Intent, workspace_timezone: str, settings: Settings) -> list[Desired]:
    """What the intent asks for now: one action per target, or nothing when unscheduled.
    Raises InputError when the configuration or the zone database no longer allows it."""
    if intent.state != "scheduled":
        return []
    if settings.action_type(intent.action_type) is None:
        raise UnknownActionTypeError(
            f"action type {intent.action_type!r} is no longer configured", field="action_type"
        )
    instant = intent.instant(workspace_timezone)
    return [
        Desired(
            intent.action_type,
            target,
            instant,
            intent.payload,
            intent.recipient_id,
            intent.transactional,
        )
        for target in sorted(intent.targets)
    ]


def matches(row: Action, want: Desired) -> bool:
    """Whether an active row is what the intent wants: asked for at its instant (quiet hours
    may have moved the row; it was asked for at its original time), with its payload and
    recipient."""
    return (
        (row.original_publish_at or row.publish_at) == want.publish_at
        and row.payload == want.payload
        and row.recipient_id == want.recipient_id
        and row.transactional == want.transactional
    )


def owned(row: Action) -> bool:
    """A row the reconciler minted and nobody has retried since."""
    return row.source == INTENT_SOURCE and row.manual_retries == 0


def protecting_gate(row: Action) -> Gate | None:
    """The gate that keeps the reconciler's hands off an active row, if any."""
    if row.status != "queued":
        return "in_flight"  # submitted: a dispatcher is calling its provider
    if row.manual_retries > 0 or row.source in USER_ACTION_SOURCES:
        return "user_action"
    if row.attempt_count > 0:
        return "in_flight"  # back in queued after a transient error: a provider may have seen it
    if row.source != INTENT_SOURCE:
        return "other_source"  # a recurring schedule's, a rule's, a drip's: theirs to manage
    return None


def is_terminal_history(row: Action, successors: frozenset[UUID]) -> bool:
    """Whether `row` forbids inserting its (thing, target) again (see the module's doc)."""
    if row.status in ("published", "failed"):
        return True
    if row.status == "cancelled":
        return row.error_code != WITHDRAWN and row.id not in successors
    return False


def decide(
    want: Desired | None,
    active: Action | None,
    history: Sequence[Action],
    successors: frozenset[UUID],
    now: datetime,
    settings: Settings,
) -> Step | Gate | None:
    """For one (action type, target) of a thing: the step to take, the gate that stops it,
    or None when the rows already match the intent."""
    earliest = now - timedelta(seconds=settings.past_grace_seconds)
    if want is not None and active is None:
        if any(is_terminal_history(r, successors) for r in history):
            return "terminal_history"
        if want.publish_at < earliest:
            return "past"  # never create a row in the past
        return Insert(want)
    if active is None:
        return None
    if want is not None and matches(active, want):
        return None
    gate = protecting_gate(active)
    if gate is not None:
        return gate
    if want is not None:
        if want.publish_at < earliest:
            return "past"  # leave it to fire (or expire) rather than lose it
        return Move(active, want)
    if active.created_at > now - timedelta(seconds=settings.reconcile_min_age_seconds):
        return "age"
    return Withdraw(active)


def plan_thing(
    intent: Intent,
    workspace_timezone: str,
    rows: Sequence[Action],
    now: datetime,
    settings: Settings,
) -> Plan:
    """Decide, without I/O, what to do with one thing's rows; `now` is the database's time."""
    desired = {d.key: d for d in desired_actions(intent, workspace_timezone, settings)}
    by_key: dict[Key, list[Action]] = defaultdict(list)
    for row in rows:
        by_key[(row.action_type, row.target_key)].append(row)
    successors = frozenset(r.rescheduled_from for r in rows if r.rescheduled_from is not None)
    min_age = timedelta(seconds=settings.reconcile_min_age_seconds)

    plan = Plan()
    changes: list[Move | Withdraw] = []
    inserts: list[Insert] = []
    active_keys = {key for key, group in by_key.items() if any(r.status in ACTIVE for r in group)}
    for key in sorted(desired.keys() | active_keys):
        group = by_key.get(key, [])
        active = next((r for r in group if r.status in ACTIVE), None)
        if active is not None and owned(active):
            plan.owned_active += 1
        outcome = decide(desired.get(key), active, group, successors, now, settings)
        if isinstance(outcome, Insert):
            inserts.append(outcome)
        elif isinstance(outcome, Move | Withdraw):
            changes.append(outcome)
        elif outcome is not None:
            plan.skipped[outcome] += 1
            if outcome == "age" and active is not None:
                ripe = active.created_at + min_age
                plan.recheck_at = ripe if plan.recheck_at is None else min(plan.recheck_at, ripe)
    # Rows in id order, as the dispatcher's batch claim locks them: no deadlock between us.
    changes.sort(key=lambda step: step.row.id)
    plan.steps = [*changes, *inserts]
    return plan


# --------------------------------------------------------------------------- applying


def lock_intent(
    conn: Connection, workspace_id: UUID, thing_id: str, *, skip_locked: bool = False
) -> Intent | None:
    """Lock the intent's row for the open transaction; None if missing (or, with
    `skip_locked`, held by someone else)."""
    sql = _TRY_LOCK if skip_locked else _LOCK
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(sql, {"workspace_id": workspace_id, "thing_id": thing_id}).fetchone()
    return intent_from_row(row) if row else None


def thing_actions(conn: Connection, workspace_id: UUID, thing_id: str) -> list[Action]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            _THING_ACTIONS, {"workspace_id": workspace_id, "thing_id": thing_id}
        ).fetchall()
    return [action_from_row(row) for row in rows]


def _cancel(conn: Connection, row: Action, reason: str, min_age: int) -> bool:
    message = {
        WITHDRAWN: "cancelled by the reconciler: the schedule intent no longer wants it",
        SUPERSEDED: "cancelled by the reconciler: replaced by a row at the intent's new time",
    }[reason]
    found = conn.execute(
        _CANCEL,
        {"id": row.id, "workspace_id": row.workspace_id, "reason": reason,
         "message": message, "min_age": min_age},
    ).fetchone()  # fmt: skip
    return found is not None


def _new_action(intent: Intent, want: Desired, rescheduled_from: UUID | None) -> NewAction:
    return NewAction(
        action_type=want.action_type,
        target_key=want.target_key,
        publish_at=want.publish_at,
        payload=want.payload,
        thing_id=intent.thing_id,
        source=INTENT_SOURCE,
        created_by=intent.updated_by,
        rescheduled_from=rescheduled_from,
        recipient_id=want.recipient_id,
        transactional=want.transactional,
    )


def _apply(
    conn: Connection,
    intent: Intent,
    plan: Plan,
    settings: Settings,
    now: datetime,
    summary: ReconcileSummary,
) -> list[UUID]:
    """Carry out a plan, one row per savepoint; returns the ids of the rows inserted."""
    inserted: list[UUID] = []
    for step in plan.steps:
        if isinstance(step, Withdraw):
            if _cancel(conn, step.row, WITHDRAWN, settings.reconcile_min_age_seconds):
                summary.cancelled += 1
            else:
                summary.skip("in_flight")  # claimed (or changed) since it was read
            continue
        try:
            with conn.transaction():
                lineage = None
                if isinstance(step, Move):
                    if not _cancel(conn, step.row, SUPERSEDED, 0):
                        summary.skip("in_flight")
                        continue
                    lineage = step.row.id
                new = _new_action(intent, step.desired, lineage)
                created = actions.schedule(conn, intent.workspace_id, new, settings, now)
        except ConflictError as exc:
            summary.conflicts += 1
            logger.info(
                "reconcile conflict",
                extra={"thing_id": intent.thing_id, "target_key": step.desired.target_key,
                       "constraint": exc.details.get("constraint")},
            )  # fmt: skip
            continue
        except InputError as exc:
            summary.invalid += 1
            logger.warning(
                "reconcile refused a row",
                extra={"thing_id": intent.thing_id, "target_key": step.desired.target_key,
                       "reason": exc.message},
            )  # fmt: skip
            continue
        inserted.append(created.action.id)
        if isinstance(step, Move):
            summary.moved += 1
        else:
            summary.inserted += 1
    return inserted


def reconcile_locked(
    conn: Connection, intent: Intent, settings: Settings
) -> tuple[ReconcileSummary, list[UUID]]:
    """Reconcile one intent whose row the caller holds locked in an open transaction.
    Returns the summary and the ids of the rows inserted (to enqueue after commit)."""
    summary = ReconcileSummary(intents=1)
    clock = conn.execute(_CLOCK, {"workspace_id": intent.workspace_id}).fetchone()
    assert clock is not None  # the intent's foreign key keeps its workspace
    now, workspace_timezone = clock
    rows = thing_actions(conn, intent.workspace_id, intent.thing_id)
    inserted: list[UUID] = []
    sweep_at = now + timedelta(seconds=settings.reconcile_sweep_seconds)
    try:
        zone_name = default_zone(conn, intent, workspace_timezone)
        plan = plan_thing(intent, zone_name, rows, now, settings)
    except InputError as exc:
        summary.invalid += 1
        logger.warning(
            "intent cannot be reconciled",
            extra={"workspace_id": str(intent.workspace_id), "thing_id": intent.thing_id,
                   "reason": exc.message},
        )  # fmt: skip
        recheck_at: datetime | None = sweep_at
    else:
        for gate in GATES:
            summary.skip(gate, plan.skipped[gate])
        inserted = _apply(conn, intent, plan, settings, now, summary)
        # Owned rows still active (moves replace one by one) or a refused insert: look again
        # after the sweep interval. Otherwise nothing is left to do until the intent changes.
        live = plan.owned_active - summary.cancelled + summary.inserted > 0
        live = live or summary.conflicts > 0 or summary.invalid > 0
        candidates = [t for t in (plan.recheck_at, sweep_at if live else None) if t is not None]
        recheck_at = min(candidates) if candidates else None
    conn.execute(
        _MARK,
        {"workspace_id": intent.workspace_id, "thing_id": intent.thing_id,
         "version": intent.version, "recheck_at": recheck_at},
    )  # fmt: skip
    return summary, inserted


def enqueue_inserted(
    conn: Connection, queues: QueuePort | None, ids: Sequence[UUID], settings: Settings
) -> None:
    """Hand rows due within the look-ahead to their queue now, as the API does for rows it
    creates, so a row inserted a few seconds before it is due still fires on time. Only
    outside a transaction: a message must not arrive before its row is committed."""
    if queues is None or not ids:
        return
    if conn.info.transaction_status != pq.TransactionStatus.IDLE:
        return  # the tick sends them; it looks ahead further than the cron interval
    enqueue_soon(conn, queues, ids, settings)


def reconcile_thing(
    conn: Connection,
    workspace_id: UUID,
    thing_id: str,
    settings: Settings,
    *,
    queues: QueuePort | None = None,
) -> ReconcileSummary:
    """Reconcile one thing now, waiting for its lock if another reconciler holds it.
    A thing without an intent is left alone."""
    with conn.transaction():
        intent = lock_intent(conn, workspace_id, thing_id)
        if intent is None:
            return ReconcileSummary()
        summary, inserted = reconcile_locked(conn, intent, settings)
    enqueue_inserted(conn, queues, inserted, settings)
    return summary


def _reconcile_if_free(
    conn: Connection,
    workspace_id: UUID,
    thing_id: str,
    settings: Settings,
    queues: QueuePort | None,
) -> ReconcileSummary:
    try:
        with conn.transaction():
            intent = lock_intent(conn, workspace_id, thing_id, skip_locked=True)
            if intent is None:
                return ReconcileSummary(busy=1)
            summary, inserted = reconcile_locked(conn, intent, settings)
    except psycopg.errors.TransactionRollback as exc:
        # A deadlock or serialization failure rolled this thing back; it is still changed
        # (or due), so the next run takes it again.
        logger.warning(
            "reconcile rolled back",
            extra={"workspace_id": str(workspace_id), "thing_id": thing_id, "error": str(exc)},
        )
        return ReconcileSummary(errors=1)
    enqueue_inserted(conn, queues, inserted, settings)
    return summary


def reconcile_changed(
    conn: Connection,
    settings: Settings,
    *,
    queues: QueuePort | None = None,
    budget_seconds: float | None = None,
) -> ReconcileSummary:
    """The cron's pass: every intent changed since it was last reconciled, then every intent
    due for another look (an age-gated cancel ripe, its workspace's zone changed, or the
    periodic sweep of intents with live rows), until none is left or the budget is spent."""
    started = monotonic_clock.monotonic()
    deadline = started + (budget_seconds or settings.reconcile_budget_seconds)
    summary = ReconcileSummary()
    seen: set[tuple[UUID, str]] = set()
    while monotonic_clock.monotonic() < deadline:
        rows = conn.execute(_CANDIDATES, {"limit": settings.reconcile_batch_size}).fetchall()
        batch = [key for key in dict.fromkeys((r[0], r[1]) for r in rows) if key not in seen]
        if not batch:
            break
        for workspace_id, thing_id in batch:
            if monotonic_clock.monotonic() >= deadline:
                break
            seen.add((workspace_id, thing_id))
            summary.add(_reconcile_if_free(conn, workspace_id, thing_id, settings, queues))
    summary.elapsed_seconds = monotonic_clock.monotonic() - started
    return summary


def emit_metrics(summary: ReconcileSummary) -> None:
    emit(
        {
            "ReconcileIntents": summary.intents,
            "ReconcileInserted": summary.inserted,
            "ReconcileMoved": summary.moved,
            "ReconcileCancelled": summary.cancelled,
            "ReconcileConflicts": summary.conflicts,
            "ReconcileInvalid": summary.invalid,
            "ReconcileBusy": summary.busy,
            "ReconcileErrors": summary.errors,
        },
        seconds={"ReconcileElapsed": summary.elapsed_seconds},
        by=("ReconcileSkipped", "gate", {str(gate): n for gate, n in summary.skipped.items()}),
    )
