"""Making, moving and withdrawing the actions of rules, through tickwork.actions.

Every row is written by `actions.schedule` (so validation, the dedupe key and the publish
guard apply) and cancelled by `actions.cancel` with a reason; a move is that cancel and a
new row linked by `rescheduled_from`, never an edit. Gates, as for the reconciler:

- **terminal history**: a published or failed row for an idempotency key, or one a person
  cancelled, means that key is never made again. Rows the rules cancelled themselves
  (`superseded` by a move, `withdrawn`) stand for an edit or a delete of the app's data and
  never reached a provider, so a date moved away and back is made again (its dedupe key
  then carries a generation, `#2`);
- **user action**: a row an admin retried is left alone;
- **in flight**: a row past `queued` cannot be cancelled (the conditional UPDATE says so).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from tickwork.actions import model, scheduling, store
from tickwork.actions.model import Action, NewAction, action_from_row
from tickwork.digests.model import Item
from tickwork.digests.store import Added, Collect, add_item, collected
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection
from tickwork.platform.errors import ConflictError, InputError
from tickwork.platform.observability import emit, logger
from tickwork.platform.sql import query
from tickwork.platform.wallclock import zone
from tickwork.recipients.policy import zone_for
from tickwork.rules import unsubscribe_url
from tickwork.rules.conditions import first_failing
from tickwork.rules.metering import FEW_RENDERS, RenderBudget
from tickwork.rules.model import (
    PRODUCER_CANCELS,
    SOURCE,
    SUPERSEDED,
    WITHDRAWN,
    CompiledRule,
    Failed,
    Fired,
    KeyLimit,
    ProduceResult,
    Rule,
    Skipped,
    bounded_limit_key,
    time_key,
    with_generation,
)
from tickwork.rules.templating import RenderError

_KEY_HISTORY = query("key_history")
_INSERT_LEDGER = query("insert_rule_action")
_RECORD_ERROR = query("record_rule_error")
_TAKE_KEY = query("take_rule_key")
_TAKE_SHARED_KEY = query("take_shared_key")

# The digests a per-key limit collects its excess into (source_id: the rule), apart from
# those of a rule's own `digest` (source `rule`).
LIMIT_SOURCE = "limit"

Kind = Literal["event", "time"]

_CANCEL_MESSAGES = {
    SUPERSEDED: "cancelled by its rule: replaced by an action at the new time",
    WITHDRAWN: "cancelled by its rule: no longer wanted (date removed, entity deleted or"
    " rule disabled)",
}


@dataclass(frozen=True, slots=True)
class RuleRow:
    """A row a rule made, with its ledger entry."""

    action: Action
    rule_id: UUID
    reference: str | None
    reference_at: datetime | None
    idempotency_key: str


def rule_rows(conn: Connection, sql: Any, params: Mapping[str, Any]) -> list[RuleRow]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(sql, params).fetchall()
    return [
        RuleRow(action_from_row(r), r["rule_id"], r["reference"], r["reference_at"],
                r["idempotency_key"])
        for r in rows
    ]  # fmt: skip


@dataclass(frozen=True)
class Firing:
    """One rule about to make one action."""

    rule: CompiledRule
    kind: Kind
    idempotency_key: str
    context: dict[str, Any]
    publish_at: datetime
    entity_type: str | None = None
    entity_id: str | None = None
    reference: str | None = None
    reference_at: datetime | None = None
    rescheduled_from: UUID | None = None
    # Where a digest window's wall time (`until`) is read when the recipient has no zone.
    workspace_zone: str = "UTC"


def record_failure(conn: Connection, rule: Rule, message: str) -> None:
    conn.execute(_RECORD_ERROR, {"id": rule.id, "workspace_id": rule.workspace_id,
                                 "message": message[:2000]})  # fmt: skip


def _gate(history: Sequence[RuleRow], rule_id: UUID) -> Skipped | None:
    for row in history:
        a = row.action
        if a.status in model.ACTIVE:
            return Skipped(rule_id, "duplicate", "already made for this key", a.id)
    for row in history:
        a = row.action
        if a.status in ("published", "failed"):
            return Skipped(rule_id, "already_sent", f"already {a.status} for this key", a.id)
        if a.status == "cancelled" and a.error_code not in PRODUCER_CANCELS:
            return Skipped(rule_id, "cancelled", "cancelled by a person for this key", a.id)
    return None


def fire(
    conn: Connection,
    workspace_id: UUID,
    firing: Firing,
    settings: Settings,
    now: datetime,
    created_by: str | None,
    budget: RenderBudget | None = None,
) -> Fired | Skipped | Failed:
    """Make the action of one firing, or say why not; never raises for the rule's own
    problems (a condition, a template, a value the action type refuses). Its renders draw
    on `budget`, shared with the other firings of the same unit of work."""
    compiled, rule = firing.rule, firing.rule.rule
    why_not = first_failing(compiled.conditions, firing.context)
    if why_not is not None:
        return Skipped(rule.id, "conditions", why_not)
    history = rule_rows(
        conn, _KEY_HISTORY,
        {"workspace_id": workspace_id, "idempotency_key": firing.idempotency_key},
    )  # fmt: skip
    gated = _gate(history, rule.id)
    if gated is not None:
        return gated
    try:
        target = compiled.target.render(firing.context, budget)
        payload = unsubscribe_url.fill(
            compiled.payload.render(unsubscribe_url.context(firing.context), budget),
            settings, workspace_id, rule_id=rule.id,
        )  # fmt: skip
        recipient = (
            compiled.recipient.render(firing.context, budget) if compiled.recipient else None
        )
        limit_key = (
            compiled.limit_key.render(firing.context, budget) if compiled.limit_key else recipient
        )
    except RenderError as exc:
        record_failure(conn, rule, exc.message)
        return Failed(rule.id, rule.name, exc.field, exc.message)
    # The row's own key: the firing's, with a generation (`#2`) after the rules cancelled
    # earlier rows of it themselves. The answer gives this one, the ledger the firing's.
    dedupe_key = with_generation(firing.idempotency_key, len(history) + 1)
    new = NewAction(
        action_type=rule.action_type,
        target_key=target,
        publish_at=firing.publish_at,
        payload=payload,
        dedupe_key=dedupe_key,
        source=SOURCE,
        created_by=created_by,
        rescheduled_from=firing.rescheduled_from,
        recipient_id=recipient,
        transactional=rule.transactional,
    )
    try:
        with conn.transaction() as tx:
            held = _held(conn, workspace_id, firing, str(limit_key), new, settings, now, budget)
            if held is not None:
                return held  # dropped, collected into the key's digest, or failed doing so
            scheduled = scheduling.schedule(conn, workspace_id, new, settings, now)
            if not scheduled.created and compiled.limit is not None:
                raise psycopg.Rollback(tx)  # made before: the key's slot is given back
            if scheduled.created:
                conn.execute(
                    _INSERT_LEDGER,
                    {"action_id": scheduled.action.id, "workspace_id": workspace_id,
                     "rule_id": rule.id, "kind": firing.kind,
                     "idempotency_key": firing.idempotency_key,
                     "entity_type": firing.entity_type, "entity_id": firing.entity_id,
                     "reference": firing.reference, "reference_at": firing.reference_at,
                     "context": Jsonb(firing.context)},
                )  # fmt: skip
    except InputError as exc:
        # The rendered action is not one the action type accepts (a target not in its
        # list, a payload too large): the rule's problem with this context.
        field = str(exc.details.get("field") or "action")
        message = f"the rendered action was refused: {exc.message}"
        record_failure(conn, rule, message)
        return Failed(rule.id, rule.name, field, message)
    except ConflictError as exc:
        return Skipped(rule.id, "conflict", exc.message)
    if not scheduled.created:
        # A concurrent request made it first (its transaction committed before ours).
        return Skipped(rule.id, "duplicate", "already made for this key", scheduled.action.id)
    return Fired(rule.id, scheduled.action.id, scheduled.action.publish_at, dedupe_key,
                 firing.rescheduled_from)  # fmt: skip


def take_key(
    conn: Connection, workspace_id: UUID, rule_id: UUID | None, limit: KeyLimit, key: str,
    at: datetime,
) -> bool:  # fmt: skip
    """One of the key's `count` actions in its window, in the caller's transaction (so a
    firing that writes nothing takes nothing); False when the window has none left. A
    shared limit (and a drip step's, `rule_id` None) counts in the workspace's window for
    the key, a rule's own in the rule's."""
    params = {"workspace_id": workspace_id, "key": bounded_limit_key(key), "now": at,
              "per_seconds": limit.per_seconds, "count": limit.count}  # fmt: skip
    if limit.shared or rule_id is None:
        return conn.execute(_TAKE_SHARED_KEY, params).fetchone() is not None
    return conn.execute(_TAKE_KEY, params | {"rule_id": rule_id}).fetchone() is not None


class _NoRoom(Exception):
    """The key had no room left in its window."""


def _held(
    conn: Connection,
    workspace_id: UUID,
    firing: Firing,
    key: str,
    alone: NewAction,
    settings: Settings,
    now: datetime,
    budget: RenderBudget | None,
) -> Fired | Skipped | Failed | None:
    """What the rule's per-key limit makes of this firing: None when there is no limit or
    the key had room (its slot is taken: the caller makes the action), else the outcome:
    `rate_limited` (the excess dropped) or the firing collected into the key's digest."""
    limit, rule = firing.rule.limit, firing.rule.rule
    if limit is None:
        return None
    if limit.excess == "drop":
        try:
            with conn.transaction():
                if take_key(conn, workspace_id, rule.id, limit, key, firing.publish_at):
                    return None
                raise _NoRoom  # its savepoint rolled back: nothing of this firing is written
        except _NoRoom:
            pass
        return Skipped(
            rule.id, "rate_limited", f"its key already had {limit.words()} (the excess is dropped)"
        )
    try:
        added = _take_or_collect(
            conn, workspace_id, firing, limit, key, alone, settings, now, budget
        )
    except RenderError as exc:
        # The payload rendered again with the digest's items (`items`, `count`, ...); the
        # digest's savepoint has been rolled back, nothing of this firing is written.
        record_failure(conn, rule, exc.message)
        return Failed(rule.id, rule.name, exc.field, exc.message)
    if added is None or isinstance(added, Skipped):
        return added
    return _collected_outcome(conn, workspace_id, firing, limit, added)


def _take_or_collect(
    conn: Connection,
    workspace_id: UUID,
    firing: Firing,
    limit: KeyLimit,
    key: str,
    alone: NewAction,
    settings: Settings,
    now: datetime,
    budget: RenderBudget | None,
) -> Added | Skipped | None:
    """A firing under a limit whose excess goes into a digest: None when the key had room
    (its slot is taken, the caller makes the action alone), a duplicate of the one sent
    alone, else what adding the firing to the key's open digest did. A firing collected
    before is that digest's duplicate, even once the key has room again, so a repeat never
    sends alone what a digest has."""
    compiled, rule = firing.rule, firing.rule.rule
    assert limit.digest_window is not None
    timezone = firing.workspace_zone
    if limit.digest_window.until is not None:
        timezone, _ = zone_for(conn, workspace_id, given=None, recipient_id=alone.recipient_id,
                               workspace_zone=firing.workspace_zone)  # fmt: skip
    collect = Collect(
        workspace_id, LIMIT_SOURCE, rule.id, limit.digest_window, alone.target_key, key[:200],
        alone.recipient_id, timezone, rule.transactional,
    )  # fmt: skip
    event = firing.context.get("event", {})
    item = Item(
        firing.idempotency_key,
        {"context": firing.context.get("context"), "event": event},
        datetime.fromisoformat(event["occurred_at"]) if "occurred_at" in event else now,
    )
    earlier = collected(conn, collect, item.key)
    if earlier is not None:
        return earlier
    if take_key(conn, workspace_id, rule.id, limit, key, firing.publish_at):
        return None
    # The key's row lock waited for a concurrent delivery of this same firing that took
    # the last slot and has now committed its action: this one is its duplicate, not an
    # item (else the digest would send again what was sent alone).
    gated = _gate(rule_rows(conn, _KEY_HISTORY, {"workspace_id": workspace_id,
                                                 "idempotency_key": firing.idempotency_key}),
                  rule.id)  # fmt: skip
    if gated is not None:
        return gated

    def compose(view: dict[str, Any]) -> NewAction:
        payload = unsubscribe_url.fill(
            compiled.payload.render(unsubscribe_url.context(firing.context | view), budget),
            settings, workspace_id, rule_id=rule.id,
        )  # fmt: skip
        return NewAction(
            action_type=rule.action_type, target_key=alone.target_key, publish_at=now,
            payload=payload, source=SOURCE, created_by=alone.created_by,
            recipient_id=alone.recipient_id, transactional=rule.transactional,
        )  # fmt: skip

    return add_item(conn, collect, item, compose, settings, now)


def _collected_outcome(
    conn: Connection, workspace_id: UUID, firing: Firing, limit: KeyLimit, added: Added
) -> Fired | Skipped:
    """The result of a firing over its key's limit that went into a digest; the digest's
    action, when this firing opened it, is a ledger entry of the rule like any other."""
    rule = firing.rule.rule
    if added.outcome == "duplicate":
        return Skipped(rule.id, "duplicate", f"already in digest {added.digest_id}",
                       added.action_id)  # fmt: skip
    if added.outcome == "opened":
        assert added.action_id is not None
        assert added.publish_at is not None
        conn.execute(
            _INSERT_LEDGER,
            {"action_id": added.action_id, "workspace_id": workspace_id, "rule_id": rule.id,
             "kind": firing.kind, "idempotency_key": f"digest:{added.digest_id}",
             "entity_type": firing.entity_type, "entity_id": firing.entity_id,
             "reference": None, "reference_at": None, "context": Jsonb(firing.context)},
        )  # fmt: skip
        return Fired(rule.id, added.action_id, added.publish_at, f"digest:{added.digest_id}")
    return Skipped(
        rule.id, "digested",
        f"its key already had {limit.words()}: added to digest {added.digest_id}"
        f" ({added.count} items)",
        added.action_id,
    )  # fmt: skip


def withdraw(conn: Connection, row: RuleRow, reason: str, result: ProduceResult) -> bool:
    """Cancel a rule's row (`superseded` or `withdrawn`); False, with the reason in
    `result.skipped`, when a gate keeps it."""
    a = row.action
    if a.manual_retries > 0:
        result.skipped.append(
            Skipped(row.rule_id, "user_action", "retried by an admin: left alone", a.id)
        )
        return False
    done = store.cancel(conn, a.workspace_id, a.id, reason=reason, message=_CANCEL_MESSAGES[reason])
    if done.changed:
        result.cancelled.append(a.id)
        return True
    status = done.action.status if done.action else "gone"
    if status != "cancelled":
        result.skipped.append(
            Skipped(row.rule_id, "in_flight", f"could not cancel: the action is {status}", a.id)
        )
    return False


@dataclass(frozen=True)
class EntityState:
    """An entity as the time rules see it: its zone, dates and the context snapshot base."""

    entity_type: str
    entity_id: str
    timezone: str
    context: dict[str, Any]
    dates: dict[str, datetime]


def time_context(entity: EntityState, rule: Rule, fire_at: datetime) -> dict[str, Any]:

    tz = zone(entity.timezone)
    reference_at = entity.dates[str(rule.reference)]
    return {
        "context": entity.context,
        "entity": {"type": entity.entity_type, "id": entity.entity_id,
                   "timezone": entity.timezone},
        "reference": {"name": rule.reference, "at": reference_at.isoformat(),
                      "local": reference_at.astimezone(tz).isoformat()},
        "dates": {name: {"at": at.isoformat(), "local": at.astimezone(tz).isoformat()}
                  for name, at in entity.dates.items()},
        "fire_at": {"at": fire_at.isoformat(), "local": fire_at.astimezone(tz).isoformat()},
        "rule": {"id": str(rule.id), "name": rule.name},
    }  # fmt: skip


def sync_entity(
    conn: Connection,
    workspace_id: UUID,
    entity: EntityState | None,
    rules: Sequence[Rule],
    live: Sequence[RuleRow],
    settings: Settings,
    now: datetime,
    created_by: str | None,
    budget: RenderBudget | None = None,
) -> ProduceResult:
    """Bring one entity's rows of `rules` in step with its dates: rows at a date or offset
    that moved are cancelled and made again with lineage, rows no longer wanted are
    withdrawn, missing ones are made. `live` are the entity's active rows of the rules
    concerned (rows of rules not in `rules` are withdrawn). A row already made for the
    same key stays as it is, context and all: its snapshot is what it sends. The rules'
    renders share `budget` (by default, a few renders' worth for this entity)."""
    result = ProduceResult()
    if budget is None:
        budget = RenderBudget.of("the time rules of this entity", FEW_RENDERS)
    wanted: dict[UUID, tuple[Rule, datetime, datetime, str]] = {}
    for rule in rules:
        if entity is None or rule.entity_type != entity.entity_type:
            continue
        reference_at = entity.dates.get(str(rule.reference))
        if reference_at is None or rule.offset_seconds is None:
            continue
        fire_at = reference_at + timedelta(seconds=rule.offset_seconds)
        key = time_key(rule, entity.entity_type, entity.entity_id, reference_at)
        wanted[rule.id] = (rule, reference_at, fire_at, key)
    kept: set[UUID] = set()
    lineage: dict[UUID, UUID] = {}
    for row in sorted(live, key=lambda r: r.action.id):
        want = wanted.get(row.rule_id)
        if want is not None and row.idempotency_key == want[3] and row.action.publish_at == want[2]:
            kept.add(row.rule_id)
            result.skipped.append(
                Skipped(row.rule_id, "duplicate", "already scheduled", row.action.id)
            )
            continue
        reason = SUPERSEDED if want is not None else WITHDRAWN
        if withdraw(conn, row, reason, result) and want is not None:
            lineage[row.rule_id] = row.action.id
    earliest = now - timedelta(seconds=settings.past_grace_seconds)
    for rule_id, (rule, reference_at, fire_at, key) in wanted.items():
        if rule_id in kept or entity is None:
            continue
        if fire_at < earliest:
            result.skipped.append(
                Skipped(rule_id, "past", f"its time {fire_at.isoformat()} has passed")
            )
            continue
        try:
            compiled = rule.compiled()
        except InputError as exc:
            result.failed.append(Failed(rule.id, rule.name, exc.field or "rule", exc.message))
            continue
        firing = Firing(
            compiled, "time", key, time_context(entity, rule, fire_at), fire_at,
            entity_type=entity.entity_type, entity_id=entity.entity_id,
            reference=rule.reference, reference_at=reference_at,
            rescheduled_from=lineage.get(rule_id),
        )  # fmt: skip
        collect(result, fire(conn, workspace_id, firing, settings, now, created_by, budget))
    return result


def collect(result: ProduceResult, outcome: Fired | Skipped | Failed) -> None:
    if isinstance(outcome, Fired):
        result.created.append(outcome)
    elif isinstance(outcome, Skipped):
        result.skipped.append(outcome)
    else:
        result.failed.append(outcome)


def emit_metrics(kind: str, result: ProduceResult) -> None:
    """A producer's numbers as metrics (`Rules<Kind>...`), skips by reason."""
    prefix = f"Rules{kind.capitalize()}"
    emit(
        {
            f"{prefix}Created": len(result.created),
            f"{prefix}Cancelled": len(result.cancelled),
            f"{prefix}Failed": len(result.failed),
            f"{prefix}Duplicates": result.duplicates,
        },
        by=(f"{prefix}Skipped", "reason", _by_reason(result)),
    )
    if result.failed:
        logger.warning(
            "rules could not make their action",
            extra={"kind": kind, "failed": [
                {"rule_id": str(f.rule_id), "field": f.field, "message": f.message}
                for f in result.failed]},
        )  # fmt: skip


def _by_reason(result: ProduceResult) -> dict[str, int]:
    counts: dict[str, int] = {}
    for skipped in result.skipped:
        counts[skipped.reason] = counts.get(skipped.reason, 0) + 1
    return counts
