"""Request and response bodies of /v1/rules, /v1/events and /v1/entities (pydantic; they
make the OpenAPI document). Values are checked by the domain (tickwork.rules), which names
the field in its 422s; these models give the shapes."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID
from zoneinfo import ZoneInfo

from pydantic import BaseModel, Field

from tickwork.api.models import ActionOut, Instant, Strict
from tickwork.platform.wallclock import zone
from tickwork.rules.conditions import OPS
from tickwork.rules.entities import Entity, EntityResult, EntityView
from tickwork.rules.model import (
    MAX_KEY_LIMIT_COUNT,
    MAX_KEY_LIMIT_SECONDS,
    ActionTemplate,
    ProduceResult,
    Rule,
    Trigger,
)
from tickwork.rules.produce import RuleRow

ConditionOp = Literal[
    "eq", "ne", "in", "not_in", "exists", "missing", "gt", "gte", "lt", "lte", "contains"
]
assert set(ConditionOp.__args__) == set(OPS)  # type: ignore[attr-defined]


class TriggerIn(Strict):
    """`{"type": "event", "event": "booking.confirmed"}`, or `{"type": "time",
    "entity_type": "booking", "reference": "start", "offset_seconds": -86400}` (24 h
    before the booking's start; positive is after)."""

    type: Literal["event", "time"]
    event: str | None = Field(default=None, max_length=100, examples=["booking.confirmed"])
    entity_type: str | None = Field(default=None, max_length=63, examples=["booking"])
    reference: str | None = Field(default=None, max_length=63, examples=["start"])
    offset_seconds: int | None = Field(
        default=None,
        description="seconds after the reference date, negative before it; at most 366 days",
        examples=[-86400],
    )

    def domain(self) -> Trigger:
        return Trigger(self.type, self.event, self.entity_type, self.reference,
                       self.offset_seconds)  # fmt: skip


class ConditionIn(Strict):
    path: str = Field(max_length=300, examples=["context.booking.status"])
    op: ConditionOp
    value: Any = None


class DigestIn(Strict):
    """`{"window": {"seconds": 600}}` (fixed, after the first event), `{"window": {"until":
    "08:00"}}` (the next such wall time in the recipient's zone, else the workspace's) or
    `{"window": {"quiet_seconds": 60, "max_seconds": 900}}` (debounce). `key`: a template
    that splits a recipient's digests further (default: one per recipient and target)."""

    key: str | None = Field(
        default=None, min_length=1, max_length=500, examples=["{{ context.thread_id }}"]
    )
    window: dict[str, Any] = Field(
        examples=[{"seconds": 600}, {"until": "08:00"}, {"quiet_seconds": 60, "max_seconds": 900}]
    )
    shared: bool | None = Field(
        default=None,
        description="the recipient's digest for this key and window, joined by every rule and"
        " drip step naming them (a step's always is); default: the rule's own",
    )


class KeyLimitIn(Strict):
    """At most `count` actions of this rule a `per_seconds` window per key; the excess is
    dropped (the result says skipped, `rate_limited`) or, with `excess: digest`, collected
    into one digest per key and `digest_window` (event rules). A key's window begins with
    the first action it is given (at that action's publish time)."""

    key: str | None = Field(
        default=None, min_length=1, max_length=2000, examples=["{{ context.guest.id }}"],
        description="a template; by default the action's recipient_id",
    )  # fmt: skip
    count: int = Field(ge=1, le=MAX_KEY_LIMIT_COUNT, examples=[1])
    per_seconds: int = Field(ge=1, le=MAX_KEY_LIMIT_SECONDS, examples=[3600])
    excess: Literal["drop", "digest"] = Field(
        default="drop",
        description="drop: the excess makes no action; digest: the excess goes into the"
        " key's digest (docs/digests.md), one action per digest_window",
    )
    digest_window: dict[str, Any] | None = Field(
        default=None,
        description="with excess digest (required then): the digest's window, as a rule's"
        " digest window",
        examples=[{"seconds": 3600}, {"until": "08:00"}],
    )
    shared: bool | None = Field(
        default=None,
        description="count in the workspace's window for the key, shared by every rule and"
        " drip step whose limit is shared (a step's always is); default: the rule's own",
    )


class ActionTemplateIn(Strict):
    """The action each firing makes. Strings of `target_key` and `payload` are Jinja
    templates rendered from the context snapshot (sandboxed; a missing field fails that
    firing, never half-rendered)."""

    action_type: str = Field(min_length=1, max_length=63, examples=["webhook"])
    target_key: str = Field(min_length=1, max_length=2000, examples=["primary"])
    payload: dict[str, Any] = Field(
        default_factory=dict, examples=[{"text": "Hi {{ context.guest.name }}"}]
    )

    recipient_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=2000,
        examples=["{{ context.guest.id }}"],
        description="a recipient (a template): their quiet hours and caps apply",
    )
    transactional: bool = Field(default=False, description="exempt from quiet hours and caps")
    digest: DigestIn | None = Field(
        default=None,
        description="collect the events into one action per window (docs/digests.md);"
        " event rules only",
    )
    limit: KeyLimitIn | None = Field(
        default=None, description="at most N actions a window per key (docs/throttling.md)"
    )

    def domain(self) -> ActionTemplate:
        limit = self.limit.model_dump(exclude_none=True) if self.limit is not None else None
        return ActionTemplate(
            self.action_type, self.target_key, self.payload, self.recipient_id,
            self.transactional,
            self.digest.model_dump(exclude_none=True) if self.digest is not None else None,
            limit,
        )  # fmt: skip


class LoadIn(Strict):
    """A stored entity an event rule's templates read, by type and id (a template rendered
    from the event; default `{{ event.entities.<entity_type> }}`)."""

    entity_type: str = Field(min_length=1, max_length=63, examples=["guest"])
    id: str | None = Field(
        default=None, min_length=1, max_length=500, examples=["{{ event.entities.guest }}"]
    )


_LOAD_DESCRIPTION = (
    "event rules: name → the stored entity its templates read under that name"
    " (`{{ guest.name }}`), as of the event; at most 10"
)


def load_json(load: dict[str, LoadIn] | None) -> dict[str, Any] | None:
    if load is None:
        return None
    return {alias: spec.model_dump(exclude_none=True) for alias, spec in load.items()}


class RuleIn(Strict):
    name: str = Field(min_length=1, max_length=200)
    enabled: bool = True
    trigger: TriggerIn
    conditions: list[ConditionIn] = Field(default_factory=list, max_length=20)
    action: ActionTemplateIn
    load: dict[str, LoadIn] = Field(
        default_factory=dict,
        description=_LOAD_DESCRIPTION,
        examples=[{"guest": {"entity_type": "guest", "id": "{{ event.entities.guest }}"}}],
    )


def _leave_out(**constraints: Any) -> Any:
    """A PATCH field that may be left out but not sent as null (only the fields sent are
    read)."""
    return Field(default=None, **constraints)


class RulePatch(Strict):
    """Only the fields sent change; `trigger`, `conditions` and `action` are replaced whole."""

    name: str = _leave_out(min_length=1, max_length=200)
    enabled: bool = _leave_out()
    trigger: TriggerIn = _leave_out()
    conditions: list[ConditionIn] = _leave_out(max_length=20)
    action: ActionTemplateIn = _leave_out()
    load: dict[str, LoadIn] = _leave_out(description=_LOAD_DESCRIPTION)


class TriggerOut(BaseModel):
    type: Literal["event", "time"]
    event: str | None
    entity_type: str | None
    reference: str | None
    offset_seconds: int | None


class FiredOut(BaseModel):
    rule_id: UUID
    action_id: UUID
    publish_at: datetime
    idempotency_key: str
    rescheduled_from: UUID | None


class SkippedOut(BaseModel):
    rule_id: UUID
    reason: str = Field(
        description="duplicate, conditions, already_sent, cancelled, past, in_flight,"
        " user_action, conflict, digested (added to the open digest's action), rate_limited"
    )
    message: str
    action_id: UUID | None


class FailedOut(BaseModel):
    rule_id: UUID
    rule_name: str
    code: str = Field(
        description="render_failed (a template, or the action it rendered), missing_entity"
        " (an entity the rule loads is not stored), invalid_rule"
    )
    field: str = Field(description="the template field that failed, e.g. action.payload.text")
    message: str
    entity_type: str | None = Field(default=None, description="missing_entity: its type")
    entity_id: str | None = Field(default=None, description="missing_entity: its id")


class ResultOut(BaseModel):
    """What the producers did (a structured result: docs/rules.md#events)."""

    success: bool = Field(description="false when a rule could not make its action")
    executions_created: int
    rule_ids: list[UUID] = Field(description="the rules that made an action")
    duplicates_skipped: int = Field(
        description="firings whose key already had its action (pending or already sent)"
    )
    created: list[FiredOut]
    skipped: list[SkippedOut]
    failed: list[FailedOut]
    cancelled: list[UUID] = Field(description="actions cancelled (moved or withdrawn)")
    error: str | None = Field(description="names every rule that failed, and why")

    @classmethod
    def of(cls, result: ProduceResult) -> ResultOut:
        return cls(
            success=result.success,
            executions_created=len(result.created),
            rule_ids=result.rule_ids,
            duplicates_skipped=result.duplicates,
            created=[FiredOut(rule_id=f.rule_id, action_id=f.action_id, publish_at=f.publish_at,
                              idempotency_key=f.idempotency_key,
                              rescheduled_from=f.rescheduled_from) for f in result.created],
            skipped=[SkippedOut(rule_id=s.rule_id, reason=s.reason, message=s.message,
                                action_id=s.action_id) for s in result.skipped],
            failed=[FailedOut(rule_id=f.rule_id, rule_name=f.rule_name, code=f.code,
                              field=f.field, message=f.message, entity_type=f.entity_type,
                              entity_id=f.entity_id) for f in result.failed],
            cancelled=result.cancelled,
            error=result.error,
        )  # fmt: skip


class RuleOut(BaseModel):
    id: UUID
    name: str
    enabled: bool
    trigger: TriggerOut
    conditions: list[dict[str, Any]]
    action: dict[str, Any] = Field(description="action_type, target_key, payload (templates)")
    load: dict[str, Any] = Field(description="name → {entity_type, id}: the stored entities read")
    revision: int = Field(description="bumped by every edit")
    last_error: str | None = Field(description="the last firing that failed, and why")
    last_error_at: datetime | None
    created_at: datetime
    updated_at: datetime
    result: ResultOut | None = Field(
        default=None, description="on a write: the actions made, moved and cancelled"
    )

    @classmethod
    def of(cls, rule: Rule, result: ProduceResult | None = None) -> RuleOut:
        t = rule.trigger
        return cls(
            id=rule.id, name=rule.name, enabled=rule.enabled,
            trigger=TriggerOut(type=t.type, event=t.event_type, entity_type=t.entity_type,
                               reference=t.reference, offset_seconds=t.offset_seconds),
            conditions=rule.conditions,
            action={"action_type": rule.action_type, "target_key": rule.target_key,
                    "payload": rule.payload_template, "recipient_id": rule.recipient_template,
                    "transactional": rule.transactional, "digest": rule.digest,
                    "limit": rule.rate_limit},
            load=rule.load,
            revision=rule.revision, last_error=rule.last_error,
            last_error_at=rule.last_error_at, created_at=rule.created_at,
            updated_at=rule.updated_at,
            result=ResultOut.of(result) if result is not None else None,
        )  # fmt: skip


class RulePage(BaseModel):
    items: list[RuleOut]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page")


class EventIn(Strict):
    type: str = Field(min_length=1, max_length=100, examples=["booking.confirmed"])
    entities: dict[str, str] = Field(
        default_factory=dict,
        description="the entities the event is about, type → id",
        examples=[{"booking": "bk_42", "podcast": "pod_7"}],
    )
    context: dict[str, Any] = Field(
        default_factory=dict, description="what templates and conditions see as `context`"
    )
    occurred_at: Instant | None = Field(
        default=None, description="RFC 3339; default now. Its date (workspace's zone) is in the key"
    )
    id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="the app's id of the event: a digest counts a second delivery once",
        examples=["evt_8f2c"],
    )


class DatesIn(Strict):
    dates: dict[str, str] = Field(
        description="name → wall time in `timezone` (2027-03-28T15:00) or RFC 3339 with an"
        " offset; the whole set: names left out are removed",
        examples=[{"start": "2027-03-28T15:00"}],
    )
    timezone: str | None = Field(
        default=None, max_length=64, description="IANA zone; default: the workspace's"
    )
    context: dict[str, Any] = Field(
        default_factory=dict, description="what templates and conditions see as `context`"
    )


class ContextIn(Strict):
    context: dict[str, Any] = Field(
        description="the entity's fields, the whole set: what rules that load it see",
        examples=[{"name": "Ada Lovelace", "email": "ada@example.com"}],
    )


class DateOut(BaseModel):
    at: datetime = Field(description="UTC")
    local: str = Field(description="in the entity's zone, with its offset")
    wall: str | None = Field(description="the wall time as given, if one was")


class RuleActionOut(ActionOut):
    rule_id: UUID
    reference: str | None


class EntityOut(BaseModel):
    entity_type: str
    entity_id: str
    timezone: str
    dates: dict[str, DateOut]
    context: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    actions: list[RuleActionOut] = Field(description="every action its rules made, oldest first")
    result: ResultOut | None = Field(default=None, description="on a write: what it did")

    @classmethod
    def of(cls, view: EntityView, workspace_tz: ZoneInfo) -> EntityOut:
        entity: Entity = view.entity
        tz = zone(entity.timezone)
        result = view.result if isinstance(view, EntityResult) else None
        return cls(
            entity_type=entity.entity_type, entity_id=entity.entity_id,
            timezone=entity.timezone,
            dates={d.name: DateOut(at=d.at, local=d.at.astimezone(tz).isoformat(),
                                   wall=d.wall.isoformat() if d.wall else None)
                   for d in entity.dates},
            context=entity.context, created_at=entity.created_at,
            updated_at=entity.updated_at,
            actions=[_rule_action(row, workspace_tz) for row in view.actions],
            result=ResultOut.of(result) if result is not None else None,
        )  # fmt: skip


def _rule_action(row: RuleRow, tz: ZoneInfo) -> RuleActionOut:
    base = ActionOut.of(row.action, tz)
    return RuleActionOut(**base.model_dump(), rule_id=row.rule_id, reference=row.reference)
