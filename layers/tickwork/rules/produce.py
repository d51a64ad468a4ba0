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

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from tickwork.actions import model, scheduling, store
from tickwork.actions.model import Action, NewAction, action_from_row
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection
from tickwork.platform.errors import ConflictError, InputError
from tickwork.platform.observability import emit, logger
from tickwork.platform.sql import query
from tickwork.platform.wallclock import zone
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
    ProduceResult,
    Rule,
    Skipped,
    time_key,
    with_generation,
)
from tickwork.rules.templating import RenderError

_KEY_HISTORY = query("key_history")
_INSERT_LEDGER = query("insert_rule_action")
_RECORD_ERROR = query("record_rule_error")

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
        payload = compiled.payload.render(firing.context, budget)
        recipient = (
            compiled.recipient.render(firing.context, budget) if compiled.recipient else None
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
        with conn.transaction():
            scheduled = scheduling.schedule(conn, workspace_id, new, settings, now)
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
