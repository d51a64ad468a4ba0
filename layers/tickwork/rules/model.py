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
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal
from uuid import UUID

from tickwork.actions.model import PAYLOAD_MAX_BYTES, payload_size
from tickwork.digests.model import DigestError, DigestSpec, Window, parse_spec, parse_window
from tickwork.platform.config import Settings
from tickwork.platform.errors import (
    InputError,
    PayloadTooLargeError,
    UnknownActionTypeError,
)
from tickwork.rules.conditions import Condition, parse_conditions
from tickwork.rules.loads import InvalidLoadError, aliases, parse_loads
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
# A per-key limit: at most this many actions a window, windows of at most 31 days.
MAX_KEY_LIMIT_COUNT = 10_000
MAX_KEY_LIMIT_SECONDS = 31 * 86400
KEY_LIMIT_FIELDS = frozenset({"key", "count", "per_seconds", "excess", "digest_window", "shared"})

EVENT_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")
NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")  # entity types and reference names
# What the context of each kind of rule has at its top level (for conditions to check).
EVENT_ROOTS = frozenset({"context", "event", "rule"})
TIME_ROOTS = frozenset({"context", "entity", "reference", "dates", "fire_at", "rule"})
# Names a rule's `load` may not give its entities: the roots above, what payloads are
# rendered with besides, and what a digest's template sees.
LOAD_RESERVED = (
    EVENT_ROOTS
    | TIME_ROOTS
    | frozenset({"unsubscribe_url", "items", "count", "first", "last", "digest"})
)


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
    # Collect the events into one action per window (docs/digests.md): the spec as JSON.
    digest: dict[str, Any] | None = None
    # At most `count` actions a `per_seconds` window per key (a template; by default the
    # recipient), the excess dropped or, with `"excess": "digest"`, collected into one
    # digest per key and `digest_window`: {"key", "count", "per_seconds", "excess"}.
    limit: dict[str, Any] | None = None


@dataclass(frozen=True)
class KeyLimit:
    """A rule's or a drip step's per-key limit, checked (validate_key_limit). `shared`: its
    key's window is the workspace's, counted by every rule and step whose limit is shared
    (a step's always is); else the rule's own."""

    key: str | None  # a template; None: the recipient
    count: int
    per_seconds: int
    excess: Literal["drop", "digest"] = "drop"
    # With excess `digest`: the window of the digest the excess goes into.
    digest_window: Window | None = None
    shared: bool = False

    @classmethod
    def of(cls, stored: Mapping[str, Any]) -> KeyLimit:
        shared = bool(stored.get("shared", False))
        if stored.get("excess") == "digest":
            window = parse_window(stored["digest_window"], "action.limit.digest_window")
            return cls(stored.get("key"), int(stored["count"]), int(stored["per_seconds"]),
                       "digest", window, shared)  # fmt: skip
        return cls(stored.get("key"), int(stored["count"]), int(stored["per_seconds"]),
                   shared=shared)  # fmt: skip

    def words(self) -> str:
        return f"{self.count} per {self.per_seconds} s"


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
    digest: dict[str, Any] | None = None
    rate_limit: dict[str, Any] | None = None
    # The stored entities its templates read: name → {entity_type, id template}.
    load: dict[str, Any] = field(default_factory=dict)

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
            self.transactional, self.digest, self.rate_limit,
        )  # fmt: skip

    def compiled(self) -> CompiledRule:
        """The rule ready to fire: conditions parsed, templates compiled. Raises InputError
        if what is stored no longer compiles (it was checked when written)."""
        roots = (EVENT_ROOTS if self.trigger_type == "event" else TIME_ROOTS) | aliases(self.load)
        digest = parse_spec(self.digest) if self.digest is not None else None
        return CompiledRule(
            self,
            parse_conditions(self.conditions, roots),
            JsonTemplate(self.target_key, "action.target_key"),
            JsonTemplate(self.payload_template, "action.payload"),
            JsonTemplate(self.recipient_template, "action.recipient_id")
            if self.recipient_template is not None
            else None,
            digest,
            JsonTemplate(digest.key, "action.digest.key")
            if digest is not None and digest.key is not None
            else None,
            KeyLimit.of(self.rate_limit) if self.rate_limit is not None else None,
            JsonTemplate(self.rate_limit["key"], "action.limit.key")
            if self.rate_limit is not None and self.rate_limit.get("key") is not None
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
    digest: DigestSpec | None = None
    digest_key: JsonTemplate | None = None
    limit: KeyLimit | None = None
    limit_key: JsonTemplate | None = None


@dataclass(frozen=True)
class RuleInput:
    """A rule as written (create, or the result of applying an edit)."""

    name: str
    trigger: Trigger
    action: ActionTemplate
    conditions: list[dict[str, Any]] = field(default_factory=list)
    enabled: bool = True
    load: dict[str, Any] = field(default_factory=dict)


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
    if action.limit is not None:
        action = replace(
            action, limit=validate_key_limit(action.limit, recipient is not None, trigger.type)
        )
    loads = parse_loads(given.load, LOAD_RESERVED)
    if loads and trigger.type != "event":
        raise InvalidLoadError(
            "load belongs to event rules: a time rule's context is its entity's",
            field="load",
        )
    roots = EVENT_ROOTS if trigger.type == "event" else TIME_ROOTS
    conditions = parse_conditions(given.conditions, roots | {x.alias for x in loads})
    if action.digest is not None:
        action = replace(action, digest=_valid_digest(action.digest, trigger, action.limit))
    return RuleInput(
        name=given.name.strip(),
        trigger=trigger,
        action=action,
        conditions=[c.as_json() for c in conditions],
        enabled=bool(given.enabled),
        load={x.alias: x.as_json() for x in loads},
    )


def _valid_digest(raw: Any, trigger: Trigger, limit: dict[str, Any] | None) -> dict[str, Any]:
    if trigger.type != "event":
        raise DigestError(
            "action.digest belongs to event rules: a time rule fires once per entity date",
            field="action.digest",
        )
    if limit is not None and limit["excess"] == "digest":
        raise InputError(
            "action.limit.excess 'digest' is for a rule that sends its events one by one;"
            " this rule already collects every event into action.digest",
            field="action.limit.excess",
        )
    spec = parse_spec(raw)
    if spec.key is not None:
        compile_string(spec.key, "action.digest.key")
    return spec.as_json()


def _whole(value: Any, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InputError(f"{where} must be a whole number from {low} to {high}", field=where)
    return value


def validate_key_limit(
    given: Any, has_recipient: bool, trigger_type: TriggerType = "event",
    where: str = "action.limit",
) -> dict[str, Any]:  # fmt: skip
    """A per-key limit as stored, or an InputError naming the field at fault."""
    if not isinstance(given, dict):
        raise InputError(f"{where} must be an object", field=where)
    unknown = sorted(set(given) - KEY_LIMIT_FIELDS)
    if unknown:
        raise InputError(f"{where}: unknown field {unknown[0]!r}", field=f"{where}.{unknown[0]}")
    count = _whole(given.get("count"), f"{where}.count", 1, MAX_KEY_LIMIT_COUNT)
    per = _whole(given.get("per_seconds"), f"{where}.per_seconds", 1, MAX_KEY_LIMIT_SECONDS)
    excess = given.get("excess", "drop")
    if excess not in ("drop", "digest"):
        raise InputError(f"{where}.excess must be 'drop' or 'digest'", field=f"{where}.excess")
    window = _excess_window(given, excess, trigger_type, where)
    shared = given.get("shared", False)
    if not isinstance(shared, bool):
        raise InputError(f"{where}.shared must be true or false", field=f"{where}.shared")
    key = given.get("key")
    if key is None and not has_recipient:
        raise InputError(
            f"{where}.key is needed when the action has no recipient_id (the default key)",
            field=f"{where}.key",
        )
    if key is not None:
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_TARGET_TEMPLATE:
            raise InputError(
                f"{where}.key must be 1 to {MAX_TARGET_TEMPLATE} characters", field=f"{where}.key"
            )
        compile_string(key, f"{where}.key")
    stored: dict[str, Any] = {"key": key, "count": count, "per_seconds": per, "excess": excess}
    if window is not None:
        stored["digest_window"] = window.as_json()
    if shared:
        stored["shared"] = True
    return stored


def _excess_window(
    given: Mapping[str, Any], excess: str, trigger_type: TriggerType, where: str
) -> Window | None:
    """The digest window of a limit whose excess is collected (else None; a window given
    without `excess: digest` would silently do nothing, so it is refused)."""
    raw = given.get("digest_window")
    if excess != "digest":
        if raw is not None:
            raise InputError(
                f"{where}.digest_window belongs to a limit with excess 'digest'",
                field=f"{where}.digest_window",
            )
        return None
    if trigger_type != "event":
        # A time rule fires once per entity date: there is no stream of events to collect.
        raise InputError(
            f"{where}.excess 'digest' belongs to event rules; a time rule can only 'drop'",
            field=f"{where}.excess",
        )
    if raw is None:
        raise InputError(
            f"{where}.digest_window is needed with excess 'digest', e.g. {{\"seconds\": 3600}}",
            field=f"{where}.digest_window",
        )
    return parse_window(raw, f"{where}.digest_window")


# ----------------------------------------------------------------------- idempotency keys


def bounded_key(key: str) -> str:
    """The key as stored: itself if short, else a readable head and a hash of the whole."""
    if len(key) <= MAX_KEY:
        return key
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:40]
    return f"{key[: MAX_KEY - 41]}~{digest}"


MAX_LIMIT_KEY = 500


def bounded_limit_key(key: str) -> str:
    """A per-key limit's key as stored: itself if short, else a head and a hash."""
    if len(key) <= MAX_LIMIT_KEY:
        return key
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:40]
    return f"{key[: MAX_LIMIT_KEY - 41]}~{digest}"


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
    `past`, `in_flight` (a row a dispatcher holds), `invalid` (refused by validation),
    `rate_limited` (its key had its limit's count of actions in the window)."""

    rule_id: UUID
    reason: str
    message: str
    action_id: UUID | None = None


@dataclass
class Failed:
    """A rule that could not make its action for this context, and why (`code`):
    `render_failed` (a template met a missing field or its budget), `missing_entity` (an
    entity its `load` names is not stored: `entity_type`, `entity_id` say which),
    `invalid_rule` (what is stored no longer compiles)."""

    rule_id: UUID
    rule_name: str
    field: str
    message: str
    code: str = "render_failed"
    entity_type: str | None = None
    entity_id: str | None = None


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
