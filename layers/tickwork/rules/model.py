"""Rules, entities and the results of producing actions from them (no I/O here).

A rule has a trigger (an event type, or a named reference date of an entity type with an
offset before or after it), optional conditions on the context, and an action template
(action type, target key and payload, whose strings are templates). What it makes is an
ordinary scheduled_actions row with source `rule`, an idempotency key as its dedupe key,
and the context snapshot it was rendered from.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from uuid import UUID

from tickwork.actions.model import PAYLOAD_MAX_BYTES, payload_size
from tickwork.platform.config import Settings
from tickwork.platform.errors import InputError, PayloadTooLargeError, UnknownActionTypeError
from tickwork.rules.conditions import Condition, parse_conditions
from tickwork.rules.templating import JsonTemplate, compile_string, is_template

TriggerType = Literal["event", "time"]

SOURCE = "rule"
# error_code of a rule's row the rules cancelled themselves: replaced by a row at a new time
# (`superseded`), or no longer wanted (`withdrawn`: the date removed, the rule disabled).
SUPERSEDED = "superseded"
WITHDRAWN = "withdrawn"
PRODUCER_CANCELS = frozenset({SUPERSEDED, WITHDRAWN})

MAX_OFFSET_SECONDS = 366 * 86400
MAX_NAME = 200
MAX_TARGET_TEMPLATE = 2000
MAX_ENTITIES = 20
MAX_DATES = 50
# An idempotency key longer than this keeps a readable head and a hash of the whole.
MAX_KEY = 190

EVENT_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")
NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")  # entity types and reference names
# What the context of each kind of rule has at its top level (for conditions to check).
EVENT_ROOTS = frozenset({"context", "event", "rule"})
TIME_ROOTS = frozenset({"context", "entity", "reference", "dates", "fire_at", "rule"})


@dataclass(frozen=True)
class Trigger:
    type: TriggerType
    event_type: str | None = None
    entity_type: str | None = None
    reference: str | None = None
    offset_seconds: int | None = None

    @property
    def label(self) -> str:
        """The trigger in idempotency keys: the event type, or `booking.start`. The offset is
        left out: one firing per rule, entity and reference instant, so a row already sent
        is not made again when the offset changes (a pending one moves, as `#2`)."""
        if self.type == "event":
            return str(self.event_type)
        return f"{self.entity_type}.{self.reference}"


@dataclass(frozen=True)
class ActionTemplate:
    action_type: str
    target_key: str
    payload: dict[str, Any] = field(default_factory=dict)
    # Where a provider connection would be named, once actions carry one.
    # A recipient (a template): their quiet hours and caps apply unless transactional.
    recipient_id: str | None = None
    transactional: bool = False


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of rules, column for column."""

    id: UUID
    workspace_id: UUID
    name: str
    enabled: bool
    trigger_type: TriggerType
    event_type: str | None
    entity_type: str | None
    reference: str | None
    offset_seconds: int | None
    conditions: list[dict[str, Any]]
    action_type: str
    target_key: str
    payload_template: dict[str, Any]
    revision: int
    last_error: str | None
    last_error_at: datetime | None
    created_by: str | None
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None
    recipient_template: str | None = None
    transactional: bool = False

    @property
    def trigger(self) -> Trigger:
        return Trigger(
            self.trigger_type, self.event_type, self.entity_type, self.reference,
            self.offset_seconds,
        )  # fmt: skip

    @property
    def action(self) -> ActionTemplate:
        return ActionTemplate(
            self.action_type, self.target_key, self.payload_template, self.recipient_template,
            self.transactional,
        )  # fmt: skip

    def compiled(self) -> CompiledRule:
        """The rule ready to fire: conditions parsed, templates compiled. Raises InputError
        if what is stored no longer compiles (it was checked when written)."""
        roots = EVENT_ROOTS if self.trigger_type == "event" else TIME_ROOTS
        return CompiledRule(
            self,
            parse_conditions(self.conditions, roots),
            JsonTemplate(self.target_key, "action.target_key"),
            JsonTemplate(self.payload_template, "action.payload"),
            JsonTemplate(self.recipient_template, "action.recipient_id")
            if self.recipient_template is not None
            else None,
        )


def rule_from_row(row: Mapping[str, Any]) -> Rule:
    return Rule(**{name: row[name] for name in Rule.__dataclass_fields__})


@dataclass(frozen=True)
class CompiledRule:
    rule: Rule
    conditions: list[Condition]
    target: JsonTemplate
    payload: JsonTemplate
    recipient: JsonTemplate | None = None


@dataclass(frozen=True)
class RuleInput:
    """A rule as written (create, or the result of applying an edit)."""

    name: str
    trigger: Trigger
    action: ActionTemplate
    conditions: list[dict[str, Any]] = field(default_factory=list)
    enabled: bool = True


# ----------------------------------------------------------------------------- validation


def _name(value: Any, what: str, where: str) -> str:
    if not isinstance(value, str) or not NAME.match(value):
        raise InputError(
            f"{where} must be a lower-case name such as 'booking' (letters, digits, _):"
            f" {what} {value!r}",
            field=where,
        )
    return value


def validate_trigger(trigger: Trigger) -> Trigger:
    if trigger.type == "event":
        if trigger.event_type is None or not EVENT_TYPE.match(trigger.event_type):
            raise InputError(
                "trigger.event must be an event type such as 'booking.confirmed' (letters,"
                " digits, '.', '_', ':', '-'; at most 100)",
                field="trigger.event",
            )
        for name in ("entity_type", "reference", "offset_seconds"):
            if getattr(trigger, name) is not None:
                raise InputError(
                    f"trigger.{name} belongs to time triggers, not event triggers",
                    field=f"trigger.{name}",
                )
        return trigger
    if trigger.type != "time":
        raise InputError("trigger.type must be 'event' or 'time'", field="trigger.type")
    if trigger.event_type is not None:
        raise InputError("trigger.event belongs to event triggers", field="trigger.event")
    _name(trigger.entity_type, "entity type", "trigger.entity_type")
    _name(trigger.reference, "reference", "trigger.reference")
    offset = trigger.offset_seconds
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise InputError(
            "trigger.offset_seconds is required: seconds after the reference date (negative:"
            " before it)",
            field="trigger.offset_seconds",
        )
    if abs(offset) > MAX_OFFSET_SECONDS:
        raise InputError(
            f"trigger.offset_seconds {offset} is out of range: at most {MAX_OFFSET_SECONDS}"
            " seconds (366 days) before or after",
            field="trigger.offset_seconds",
        )
    return trigger


def validate_rule(given: RuleInput, settings: Settings) -> RuleInput:
    """Everything a rule must be to fire: refused with an InputError naming the field."""
    if not isinstance(given.name, str) or not given.name.strip() or len(given.name) > MAX_NAME:
        raise InputError(f"name must be 1 to {MAX_NAME} characters", field="name")
    trigger = validate_trigger(given.trigger)
    action = given.action
    action_type = settings.action_type(action.action_type)
    if action_type is None:
        known = ", ".join(sorted(settings.action_types))
        raise UnknownActionTypeError(
            f"action.action_type {action.action_type!r} is unknown; known types: {known}",
            field="action.action_type",
        )
    target = action.target_key
    if not isinstance(target, str) or not target or len(target) > MAX_TARGET_TEMPLATE:
        raise InputError(
            f"action.target_key must be 1 to {MAX_TARGET_TEMPLATE} characters",
            field="action.target_key",
        )
    compile_string(target, "action.target_key")
    if (
        not is_template(target)
        and action_type.targets is not None
        and target not in action_type.targets
    ):
        allowed = ", ".join(sorted(action_type.targets))
        raise InputError(
            f"action.target_key {target!r} is not a target of {action.action_type};"
            f" allowed: {allowed}",
            field="action.target_key",
        )
    if not isinstance(action.payload, dict):
        raise InputError("action.payload must be a JSON object", field="action.payload")
    size = payload_size(action.payload)
    if size > PAYLOAD_MAX_BYTES:
        raise PayloadTooLargeError(
            f"action.payload is {size} bytes; the limit is {PAYLOAD_MAX_BYTES}",
            field="action.payload",
        )
    JsonTemplate(action.payload, "action.payload")
    recipient = action.recipient_id
    if recipient is not None:
        if not isinstance(recipient, str) or not 1 <= len(recipient) <= MAX_TARGET_TEMPLATE:
            raise InputError(
                f"action.recipient_id must be 1 to {MAX_TARGET_TEMPLATE} characters",
                field="action.recipient_id",
            )
        compile_string(recipient, "action.recipient_id")
    roots = EVENT_ROOTS if trigger.type == "event" else TIME_ROOTS
    conditions = parse_conditions(given.conditions, roots)
    return RuleInput(
        name=given.name.strip(),
        trigger=trigger,
        action=action,
        conditions=[c.as_json() for c in conditions],
        enabled=bool(given.enabled),
    )


# ----------------------------------------------------------------------- idempotency keys


def bounded_key(key: str) -> str:
    """The key as stored: itself if short, else a readable head and a hash of the whole."""
    if len(key) <= MAX_KEY:
        return key
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:40]
    return f"{key[: MAX_KEY - 41]}~{digest}"


def with_generation(key: str, generation: int) -> str:
    """The dedupe key of the n-th row for an idempotency key (n > 1 only after the rules
    cancelled the earlier ones themselves: a date moved away and back)."""
    return key if generation <= 1 else f"{key}#{generation}"


def entities_label(entities: Mapping[str, str]) -> str:
    return ",".join(f"{kind}={entities[kind]}" for kind in sorted(entities))


def event_key(rule_id: UUID, event_type: str, entities: Mapping[str, str], day: str) -> str:
    """`{rule}:{type}:{entity ids}:{date}`: once per rule, event and entities a day."""
    return bounded_key(f"{rule_id}:{event_type}:{entities_label(entities)}:{day}")


def time_key(rule: Rule, entity_type: str, entity_id: str, reference_at: datetime) -> str:
    """`time_trigger:{rule}:{trigger}:{entity}:{reference ISO instant}`: a moved date is a
    new key."""
    instant = reference_at.astimezone(UTC).isoformat()
    return bounded_key(
        f"time_trigger:{rule.id}:{rule.trigger.label}:{entity_type}/{entity_id}:{instant}"
    )


# --------------------------------------------------------------------------------- results


@dataclass
class Fired:
    """One action a rule made."""

    rule_id: UUID
    action_id: UUID
    publish_at: datetime
    idempotency_key: str
    rescheduled_from: UUID | None = None


@dataclass
class Skipped:
    """A rule that did not make an action, and why: `duplicate` (already made for this
    key), `conditions` (one did not hold), `already_sent`, `cancelled` (by someone),
    `past`, `in_flight` (a row a dispatcher holds), `invalid` (refused by validation)."""

    rule_id: UUID
    reason: str
    message: str
    action_id: UUID | None = None


@dataclass
class Failed:
    """A rule whose template could not be rendered for this context."""

    rule_id: UUID
    rule_name: str
    field: str
    message: str


@dataclass
class ProduceResult:
    """The structured answer of the producers (docs/rules.md#events): never an exception for
    a rule's own problem; `success` is False when any rule failed, and `error` says which."""

    created: list[Fired] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    failed: list[Failed] = field(default_factory=list)
    cancelled: list[UUID] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return not self.failed

    @property
    def error(self) -> str | None:
        if not self.failed:
            return None
        named = "; ".join(f"rule {f.rule_name!r} ({f.rule_id}): {f.message}" for f in self.failed)
        return f"{len(self.failed)} rule(s) could not make their action: {named}"

    @property
    def rule_ids(self) -> list[UUID]:
        return list(dict.fromkeys(f.rule_id for f in self.created))

    def count(self, *reasons: str) -> int:
        return sum(1 for s in self.skipped if s.reason in reasons)

    @property
    def duplicates(self) -> int:
        """Firings whose key already had its action (pending, or already sent)."""
        return self.count("duplicate", "already_sent")

    def add(self, other: ProduceResult) -> None:
        self.created += other.created
        self.skipped += other.skipped
        self.failed += other.failed
        self.cancelled += other.cancelled
