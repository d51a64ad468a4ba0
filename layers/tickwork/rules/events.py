"""Events: `{type, entities, context, occurred_at}` → one action, due now, for every
enabled rule on that event type whose conditions hold.

Each action's idempotency key is `{rule}:{type}:{entity ids}:{date}` (the date of
`occurred_at` in the workspace's zone), in scheduled_actions' unique dedupe column: the same
event twice in a day, or from two clients at once, makes one action per rule, and the
answer says the second was a duplicate; the next day makes a new one. A rule with a
`digest` collects its events into one action per window instead (tickwork.rules.digest).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from psycopg.rows import dict_row

from tickwork import quotas
from tickwork.actions.model import PAYLOAD_MAX_BYTES, payload_size
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection
from tickwork.platform.errors import InputError, PayloadTooLargeError
from tickwork.platform.sql import query
from tickwork.platform.wallclock import require_aware
from tickwork.quotas import Limits
from tickwork.rules import stored_context
from tickwork.rules.conditions import first_failing
from tickwork.rules.digest import collect_firing
from tickwork.rules.metering import FEW_RENDERS, RenderBudget
from tickwork.rules.model import (
    EVENT_TYPE,
    MAX_ENTITIES,
    ProduceResult,
    event_key,
    rule_from_row,
)
from tickwork.rules.produce import Firing, collect, emit_metrics, fire, record_failure
from tickwork.rules.stored_context import Prepared

_EVENT_RULES = query("event_rules")

# How far ahead of our clock an occurred_at may be (clock skew), and how old an event may be.
MAX_FUTURE = timedelta(minutes=5)
MAX_AGE = timedelta(days=30)
_ENTITY_KIND = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


@dataclass(frozen=True)
class EventInput:
    type: str
    entities: Mapping[str, str] = field(default_factory=dict)
    context: Mapping[str, Any] = field(default_factory=dict)
    occurred_at: datetime | None = None
    # The app's own id of the event: a digest counts a second delivery of it once.
    id: str | None = None


@dataclass(frozen=True)
class ValidEvent:
    type: str
    entities: dict[str, str]
    context: dict[str, Any]
    occurred_at: datetime
    id: str | None = None


def has_nul(value: Any) -> bool:
    """Whether a JSON value holds a NUL character anywhere (Postgres cannot store one)."""
    return "\\u0000" in json.dumps(value)


def validate_event(event: EventInput, now: datetime) -> ValidEvent:
    if not isinstance(event.type, str) or not EVENT_TYPE.match(event.type):
        raise InputError(
            "type must be an event type such as 'booking.confirmed' (letters, digits, '.',"
            " '_', ':', '-'; at most 100)",
            field="type",
        )
    if not isinstance(event.entities, Mapping) or len(event.entities) > MAX_ENTITIES:
        raise InputError(
            f"entities must be an object of at most {MAX_ENTITIES} entity type → id",
            field="entities",
        )
    entities: dict[str, str] = {}
    for kind, entity_id in event.entities.items():
        if not isinstance(kind, str) or not _ENTITY_KIND.match(kind):
            raise InputError(
                f"entities: {kind!r} is not an entity type such as 'booking'", field="entities"
            )
        if not isinstance(entity_id, str) or not 1 <= len(entity_id) <= 200 or "\x00" in entity_id:
            raise InputError(
                f"entities.{kind} must be an id of 1 to 200 characters",
                field=f"entities.{kind}",
            )
        entities[kind] = entity_id
    if not isinstance(event.context, Mapping):
        raise InputError("context must be a JSON object", field="context")
    context = dict(event.context)
    if has_nul(context):
        raise InputError(
            "context contains a NUL character, which cannot be stored", field="context"
        )
    size = payload_size(context)
    if size > PAYLOAD_MAX_BYTES:
        raise PayloadTooLargeError(
            f"context is {size} bytes; the limit is {PAYLOAD_MAX_BYTES}", field="context"
        )
    occurred_at = (
        now if event.occurred_at is None else require_aware(event.occurred_at, field="occurred_at")
    )
    if occurred_at > now + MAX_FUTURE:
        raise InputError("occurred_at is in the future", field="occurred_at")
    if occurred_at < now - MAX_AGE:
        raise InputError(
            f"occurred_at is more than {MAX_AGE.days} days ago; such an event is not acted on",
            field="occurred_at",
        )
    if event.id is not None and (
        not isinstance(event.id, str) or not 1 <= len(event.id) <= 200 or "\x00" in event.id
    ):
        raise InputError("id must be 1 to 200 characters", field="id")
    return ValidEvent(event.type, entities, context, occurred_at, event.id)


def event_context(event: ValidEvent, rule_id: UUID, rule_name: str) -> dict[str, Any]:
    """The context snapshot of one rule's action: what its templates and conditions see."""
    return {
        "context": event.context,
        "event": {"type": event.type, "occurred_at": event.occurred_at.isoformat(),
                  "entities": event.entities},
        "rule": {"id": str(rule_id), "name": rule_name},
    }  # fmt: skip


def _would_fire(prepared: Prepared) -> bool:
    """Whether a rule's conditions hold for the event (one that cannot fire, its rule no
    longer parsing or an entity it loads missing, fails without making anything)."""
    if prepared.failed is not None or prepared.compiled is None:
        return False
    return first_failing(prepared.compiled.conditions, prepared.context) is None


def emit_event(
    conn: Connection,
    workspace_id: UUID,
    event: EventInput,
    timezone: ZoneInfo,
    settings: Settings,
    now: datetime,
    *,
    created_by: str | None = None,
    limits: Limits | None = None,
) -> ProduceResult:
    """Fire every enabled rule on the event's type, each in its own savepoint: one rule's
    failure (a template that meets a missing field, or exceeds its budget) is reported,
    the others still fire. The rules' renders share one budget, so an event costs a
    bounded time however many rules it matches; rules past it fail with the reason.
    A rule that loads stored entities (`load`) sees them as of the event: all of them read
    in one query; one that names an entity not stored fails (`missing_entity`).
    Raises InputError only for an event that is itself invalid, or QuotaExceededError,
    before anything is written, when more rules would fire than one event may make actions
    (`limits`: the workspace's quotas; default: the stack's, from `settings`)."""
    valid = validate_event(event, now)
    day = valid.occurred_at.astimezone(timezone).date().isoformat()
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            _EVENT_RULES, {"workspace_id": workspace_id, "event_type": valid.type}
        ).fetchall()
        rules = [rule_from_row(row) for row in rows]
        budget = RenderBudget.of("the templates of this event", FEW_RENDERS)
        prepared = stored_context.prepare(
            conn, workspace_id, rules, lambda rule: event_context(valid, rule.id, rule.name),
            budget,
        )  # fmt: skip
        cap = limits or Limits.of(settings)
        if cap.actions_per_event and len(rules) > cap.actions_per_event:
            would_fire = sum(_would_fire(p) for p in prepared)
            quotas.check_event_actions(would_fire, valid.type, cap)
        result = ProduceResult()
        for ready in prepared:
            rule, compiled = ready.rule, ready.compiled
            if ready.failed is not None or compiled is None:
                assert ready.failed is not None
                if ready.record:
                    record_failure(conn, rule, ready.failed.message)
                result.failed.append(ready.failed)
                continue
            firing = Firing(
                compiled, "event", event_key(rule.id, valid.type, valid.entities, day),
                ready.context, now, workspace_zone=timezone.key,
            )  # fmt: skip
            if compiled.digest is not None:
                collect(result, collect_firing(
                    conn, workspace_id, firing, valid.id, settings, now, created_by,
                    timezone.key, budget,
                ))  # fmt: skip
                continue
            collect(result, fire(conn, workspace_id, firing, settings, now, created_by, budget))
    emit_metrics("event", result)
    return result
