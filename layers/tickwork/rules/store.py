"""Rules: create, read, list, edit, delete, and what each change does to their actions.

- Disabling or deleting a rule cancels its pending actions (`withdrawn`); sent ones stay.
- Creating or enabling a time rule makes its actions for the entities that already have
  its reference date; editing its trigger (reference, offset) moves its pending actions:
  cancel + insert with lineage, under a new key. Edits of the template, target or
  conditions apply to the actions made from then on; pending ones keep what they were
  rendered with.
- Deleted rules stay in the table (hidden), so the actions they made keep their rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from tickwork import quotas
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection, storable
from tickwork.platform.errors import InputError, NotFoundError
from tickwork.platform.sql import query
from tickwork.quotas import Limits
from tickwork.rules.entities import load_entity
from tickwork.rules.metering import MANY_RENDERS, RenderBudget
from tickwork.rules.model import (
    WITHDRAWN,
    ActionTemplate,
    ProduceResult,
    Rule,
    RuleInput,
    Trigger,
    rule_from_row,
    validate_rule,
)
from tickwork.rules.produce import emit_metrics, rule_rows, sync_entity, withdraw

_INSERT = query("insert_rule")
_GET = query("get_rule")
_LOCK = query("lock_rule")
_LIST = query("list_rules")
_UPDATE = query("update_rule")
_DELETE = query("delete_rule")
_LIVE_OF_RULE = query("live_rule_actions")
_ENTITIES_FOR_RULE = query("entities_for_rule")
_LIVE_OF_ENTITY = query("live_entity_actions")


@dataclass(frozen=True)
class RuleResult:
    rule: Rule
    result: ProduceResult = field(default_factory=ProduceResult)


@dataclass(frozen=True)
class RuleCursor:
    created_at: datetime
    id: UUID


def _not_found(rule_id: UUID) -> NotFoundError:
    return NotFoundError(f"no rule {rule_id} in this workspace")


def _params(valid: RuleInput) -> dict[str, Any]:
    t, a = valid.trigger, valid.action
    return {
        "name": valid.name, "enabled": valid.enabled, "trigger_type": t.type,
        "event_type": t.event_type, "entity_type": t.entity_type, "reference": t.reference,
        "offset_seconds": t.offset_seconds, "conditions": Jsonb(valid.conditions),
        "action_type": a.action_type, "target_key": a.target_key,
        "payload_template": Jsonb(a.payload), "recipient_template": a.recipient_id,
        "transactional": a.transactional, "load": Jsonb(valid.load),
        "digest": Jsonb(a.digest) if a.digest is not None else None,
        "rate_limit": Jsonb(a.limit) if a.limit is not None else None,
    }  # fmt: skip


def _write(conn: Connection, sql: Any, params: dict[str, Any]) -> Rule | None:
    try:
        with storable(), conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(sql, params).fetchone()
    except psycopg.errors.CheckViolation as exc:
        raise InputError(f"the rule breaks a rule: {exc.diag.constraint_name}") from exc
    return rule_from_row(row) if row else None


def _fired_by(rule: Rule) -> str | None:
    """The event type an enabled event rule fires on (None for any other rule)."""
    if rule.trigger_type == "event" and rule.enabled and rule.deleted_at is None:
        return rule.event_type
    return None


def _sync(
    conn: Connection, rule: Rule, settings: Settings, now: datetime, user: str | None
) -> ProduceResult:
    """Bring the rule's actions in step with it (see the module's doc)."""
    result = ProduceResult()
    active = rule.enabled and rule.deleted_at is None
    if not active or rule.trigger_type == "event":
        if not active:
            for row in rule_rows(conn, _LIVE_OF_RULE, {"workspace_id": rule.workspace_id,
                                                       "rule_id": rule.id}):  # fmt: skip
                withdraw(conn, row, WITHDRAWN, result)
        return result
    params = {"workspace_id": rule.workspace_id, "rule_id": rule.id,
              "entity_type": rule.entity_type, "reference": rule.reference}  # fmt: skip
    with conn.cursor(row_factory=dict_row) as cur:
        entities = cur.execute(_ENTITIES_FOR_RULE, params).fetchall()
    # Rendered for every entity of its type: one budget for them all, so writing a rule
    # costs a bounded time (entities past it fail with the reason, as a render would).
    budget = RenderBudget.of("this rule's templates in this request", MANY_RENDERS)
    for found in entities:
        entity = load_entity(conn, rule.workspace_id, found)
        key = {"workspace_id": rule.workspace_id, "entity_type": entity.entity_type,
               "entity_id": entity.entity_id}  # fmt: skip
        live = [r for r in rule_rows(conn, _LIVE_OF_ENTITY, key) if r.rule_id == rule.id]
        result.add(
            sync_entity(conn, rule.workspace_id, entity.state(), [rule], live, settings, now,
                        user, budget)
        )  # fmt: skip
    return result


def create_rule(
    conn: Connection,
    workspace_id: UUID,
    given: RuleInput,
    settings: Settings,
    now: datetime,
    *,
    created_by: str | None = None,
    limits: Limits | None = None,
) -> RuleResult:
    """`limits`: the workspace's quotas (default: the stack's, from `settings`)."""
    valid = validate_rule(given, settings)
    with conn.transaction():
        rule = _write(
            conn, _INSERT, _params(valid) | {"workspace_id": workspace_id, "created_by": created_by}
        )
        assert rule is not None
        quotas.check_rules(
            conn, workspace_id, limits or Limits.of(settings), new=True,
            event_type=_fired_by(rule),
        )  # fmt: skip
        result = _sync(conn, rule, settings, now, created_by)
    emit_metrics("rule", result)
    return RuleResult(rule, result)


def get_rule(conn: Connection, workspace_id: UUID, rule_id: UUID) -> Rule:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_GET, {"id": rule_id, "workspace_id": workspace_id}).fetchone()
    if row is None:
        raise _not_found(rule_id)
    return rule_from_row(row)


def list_rules(
    conn: Connection,
    workspace_id: UUID,
    *,
    limit: int,
    enabled: bool | None = None,
    trigger_type: str | None = None,
    after: RuleCursor | None = None,
) -> list[Rule]:
    params = {
        "workspace_id": workspace_id, "enabled": enabled, "trigger_type": trigger_type,
        "after_created_at": after.created_at if after else None,
        "after_id": after.id if after else None, "limit": limit,
    }  # fmt: skip
    with conn.cursor(row_factory=dict_row) as cur:
        return [rule_from_row(r) for r in cur.execute(_LIST, params).fetchall()]


@dataclass(frozen=True)
class RuleChanges:
    """An edit: only the fields given (not None) change."""

    name: str | None = None
    enabled: bool | None = None
    trigger: Trigger | None = None
    conditions: list[dict[str, Any]] | None = None
    action: ActionTemplate | None = None
    load: dict[str, Any] | None = None


def edit_rule(
    conn: Connection,
    workspace_id: UUID,
    rule_id: UUID,
    changes: RuleChanges,
    settings: Settings,
    now: datetime,
    *,
    edited_by: str | None = None,
    limits: Limits | None = None,
) -> RuleResult:
    """`limits`: the workspace's quotas (default: the stack's, from `settings`)."""
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_LOCK, {"id": rule_id, "workspace_id": workspace_id}).fetchone()
        if row is None:
            raise _not_found(rule_id)
        current = rule_from_row(row)
        merged = RuleInput(
            name=current.name, trigger=current.trigger, action=current.action,
            conditions=current.conditions, enabled=current.enabled, load=current.load,
        )  # fmt: skip
        merged = replace(merged, **{k: v for k, v in vars(changes).items() if v is not None})
        if merged.trigger.type != current.trigger_type:
            raise InputError(
                f"trigger.type of a rule stays {current.trigger_type!r}; create another rule",
                field="trigger.type",
            )
        valid = validate_rule(merged, settings)
        rule = _write(conn, _UPDATE, _params(valid) | {"id": rule_id, "workspace_id": workspace_id})
        assert rule is not None
        fired_by = _fired_by(rule)
        if fired_by is not None and fired_by != _fired_by(current):
            # Enabled, or moved to another event type: one more rule on `fired_by`.
            quotas.check_rules(
                conn, workspace_id, limits or Limits.of(settings), new=False,
                event_type=fired_by,
            )  # fmt: skip
        result = _sync(conn, rule, settings, now, edited_by)
    emit_metrics("rule", result)
    return RuleResult(rule, result)


def delete_rule(
    conn: Connection, workspace_id: UUID, rule_id: UUID, settings: Settings, now: datetime
) -> RuleResult:
    key = {"id": rule_id, "workspace_id": workspace_id}
    with conn.transaction():
        if conn.execute(_LOCK, key).fetchone() is None:
            raise _not_found(rule_id)
        rule = _write(conn, _DELETE, key)
        assert rule is not None
        result = _sync(conn, rule, settings, now, None)
    emit_metrics("rule", result)
    return RuleResult(rule, result)
