"""Campaigns, steps and enrollments (no I/O here).

A campaign is an ordered list of steps. Each step has

- a **wait**: `{"delay_seconds": 172800}` after the previous step was sent or skipped (for
  the first step: after the enrollment starts), or `{"day": 2, "at": "09:00"}`: day 2 of the
  enrollment (its start's local date + 2) at 09:00 in the recipient's zone, never before
  the previous step;
- an **action** template (`action_type`, `target_key`, `payload`), rendered with the rules'
  sandboxed templating from the enrollment's context when the step's row is made;
- optional **conditions** (the rules' conditions), evaluated when the step fires against
  the enrollment's data as it is then: a step whose conditions do not hold is skipped, with
  the reason recorded, and the enrollment moves on;
- an optional **digest** (a rule's digest: key and window; always the recipient's shared
  digest for that key and window) and per-key **limit** (a rule's limit; always counted in
  the workspace's shared window for its key). Such a step makes no row in advance: it is
  decided when it is due (collected, sent, or dropped as its limit says).

The context of templates and conditions: `data` (the enrollment's data, which the app may
change), `recipient` (`id`, `timezone`), `enrollment` (`id`, `step`, `campaign_id`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any, Literal
from uuid import UUID
from zoneinfo import ZoneInfo

from tickwork.actions.model import PAYLOAD_MAX_BYTES, payload_size
from tickwork.digests.model import DigestError, DigestSpec, parse_spec
from tickwork.platform.config import Settings
from tickwork.platform.errors import InputError, PayloadTooLargeError, UnknownActionTypeError
from tickwork.platform.wallclock import parse_clock, resolve_wall_time
from tickwork.rules.conditions import Condition, parse_conditions
from tickwork.rules.model import KeyLimit, validate_key_limit
from tickwork.rules.templating import JsonTemplate, compile_string, is_template

SOURCE = "sequence"
ROOTS = frozenset({"data", "recipient", "enrollment"})
MAX_STEPS = 50
MAX_DELAY_SECONDS = 366 * 86400
MAX_DAY = 366
MAX_EXIT_EVENTS = 20
EVENT_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")
# error_code of a step's row cancelled when its enrollment exits.
EXITED = "exited"
SKIPPED = "skipped"
STEP_ACTION_FIELDS = frozenset({"action_type", "target_key", "payload", "digest", "limit"})

Status = Literal["active", "completed", "exited"]


@dataclass(frozen=True)
class Wait:
    delay_seconds: int | None = None
    day: int | None = None
    at: time | None = None

    def as_json(self) -> dict[str, Any]:
        if self.delay_seconds is not None:
            return {"delay_seconds": self.delay_seconds}
        assert self.at is not None
        return {"day": self.day, "at": self.at.strftime("%H:%M")}


@dataclass(frozen=True)
class Step:
    wait: Wait
    action_type: str
    target_key: str
    payload: dict[str, Any]
    conditions: list[Condition] = field(default_factory=list)
    name: str | None = None
    digest: DigestSpec | None = None
    # The limit as stored (validate_key_limit): always shared.
    limit: dict[str, Any] | None = None

    @property
    def decided_when_due(self) -> bool:
        """A step that collects or is limited makes no row in advance."""
        return self.digest is not None or self.limit is not None

    @property
    def key_limit(self) -> KeyLimit | None:
        return KeyLimit.of(self.limit) if self.limit is not None else None

    def as_json(self) -> dict[str, Any]:
        action: dict[str, Any] = {
            "action_type": self.action_type,
            "target_key": self.target_key,
            "payload": self.payload,
        }
        if self.digest is not None:
            action["digest"] = self.digest.as_json()
        if self.limit is not None:
            action["limit"] = self.limit
        return {
            "name": self.name,
            "wait": self.wait.as_json(),
            "action": action,
            "conditions": [c.as_json() for c in self.conditions],
        }  # fmt: skip

    def templates(self) -> tuple[JsonTemplate, JsonTemplate]:
        return JsonTemplate(self.target_key, "action.target_key"), JsonTemplate(
            self.payload, "action.payload"
        )


@dataclass(frozen=True)
class Campaign:
    id: UUID
    workspace_id: UUID
    name: str
    steps: list[Step]
    exit_events: list[str]
    cap_policy: str | None
    created_by: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class CampaignInput:
    name: str
    steps: list[Any]
    exit_events: list[str] = field(default_factory=list)
    cap_policy: str | None = None


@dataclass(frozen=True, slots=True)
class Enrollment:
    """One row of enrollments, column for column."""

    id: UUID
    workspace_id: UUID
    campaign_id: UUID
    recipient_id: str
    data: dict[str, Any]
    current_step: int
    current_action_id: UUID | None
    next_send_at: datetime | None
    status: Status
    exit_reason: str | None
    exit_outcome: str | None
    last_error: str | None
    starts_at: datetime
    enrolled_at: datetime
    completed_at: datetime | None
    exited_at: datetime | None
    updated_at: datetime


def enrollment_from_row(row: Mapping[str, Any]) -> Enrollment:
    return Enrollment(**{name: row[name] for name in Enrollment.__dataclass_fields__})


# ----------------------------------------------------------------------------- validation


def _wait(raw: Any, where: str) -> Wait:
    if not isinstance(raw, Mapping):
        raise InputError(
            f'{where} must be {{"delay_seconds": N}} or {{"day": N, "at": "09:00"}}', field=where
        )
    keys = set(raw)
    if keys == {"delay_seconds"}:
        delay = raw["delay_seconds"]
        if (
            isinstance(delay, bool)
            or not isinstance(delay, int)
            or not 0 <= delay <= MAX_DELAY_SECONDS
        ):
            raise InputError(
                f"{where}.delay_seconds must be 0 to {MAX_DELAY_SECONDS} seconds",
                field=f"{where}.delay_seconds",
            )
        return Wait(delay_seconds=delay)
    if keys == {"day", "at"}:
        day = raw["day"]
        if isinstance(day, bool) or not isinstance(day, int) or not 0 <= day <= MAX_DAY:
            raise InputError(f"{where}.day must be 0 to {MAX_DAY}", field=f"{where}.day")
        at = raw["at"]
        try:
            clock = parse_clock(at) if isinstance(at, str) else None
        except InputError:
            clock = None
        if clock is None:
            raise InputError(f"{where}.at must be a local time HH:MM", field=f"{where}.at")
        return Wait(day=day, at=clock)
    raise InputError(
        f'{where} must be {{"delay_seconds": N}} or {{"day": N, "at": "09:00"}}', field=where
    )


def _step(raw: Any, index: int, settings: Settings) -> Step:
    where = f"steps[{index}]"
    if not isinstance(raw, Mapping) or set(raw) - {"name", "wait", "action", "conditions"}:
        raise InputError(
            f"{where} must be an object with wait, action and optional conditions and name",
            field=where,
        )
    wait = _wait(raw.get("wait"), f"{where}.wait")
    action = raw.get("action")
    if not isinstance(action, Mapping) or set(action) - STEP_ACTION_FIELDS:
        raise InputError(
            f"{where}.action must be an object with action_type, target_key and payload, and"
            " optionally digest and limit",
            field=f"{where}.action",
        )
    action_type = action.get("action_type")
    config = settings.action_type(action_type) if isinstance(action_type, str) else None
    if config is None:
        known = ", ".join(sorted(settings.action_types))
        raise UnknownActionTypeError(
            f"{where}.action.action_type {action_type!r} is unknown; known types: {known}",
            field=f"{where}.action.action_type",
        )
    target = action.get("target_key")
    if not isinstance(target, str) or not 1 <= len(target) <= 2000:
        raise InputError(
            f"{where}.action.target_key must be 1 to 2000 characters",
            field=f"{where}.action.target_key",
        )
    compile_string(target, f"{where}.action.target_key")
    if config.targets is not None and not is_template(target) and target not in config.targets:
        raise InputError(
            f"{where}.action.target_key {target!r} is not a target of {action_type}; allowed:"
            f" {', '.join(sorted(config.targets))}",
            field=f"{where}.action.target_key",
        )
    payload = action.get("payload", {})
    if not isinstance(payload, dict):
        raise InputError(
            f"{where}.action.payload must be an object", field=f"{where}.action.payload"
        )
    if payload_size(payload) > PAYLOAD_MAX_BYTES:
        raise PayloadTooLargeError(
            f"{where}.action.payload is larger than {PAYLOAD_MAX_BYTES} bytes",
            field=f"{where}.action.payload",
        )
    JsonTemplate(payload, f"{where}.action.payload")
    conditions = parse_conditions(raw.get("conditions"), ROOTS, f"{where}.conditions")
    name = raw.get("name")
    if name is not None and (not isinstance(name, str) or not 1 <= len(name) <= 200):
        raise InputError(f"{where}.name must be 1 to 200 characters", field=f"{where}.name")
    digest = _step_digest(action.get("digest"), f"{where}.action.digest")
    limit = _step_limit(action.get("limit"), f"{where}.action.limit", digest)
    return Step(wait, action_type, target, payload, conditions, name,  # type: ignore[arg-type]
                digest, limit)  # fmt: skip


def _step_digest(raw: Any, where: str) -> DigestSpec | None:
    """A step's digest: a rule's, always the recipient's shared one for its key and window
    (an enrollment passes a step once: alone, it would have nothing to collect)."""
    if raw is None:
        return None
    spec = parse_spec(raw, where)
    if isinstance(raw, Mapping) and raw.get("shared") is False:
        raise DigestError(
            f"{where}.shared: a step's digest is always the recipient's shared digest for its"
            " key and window (an enrollment passes a step once)",
            field=f"{where}.shared",
        )
    if spec.key is not None:
        compile_string(spec.key, f"{where}.key")
    return DigestSpec(spec.window, spec.key, shared=True)


def _step_limit(raw: Any, where: str, digest: DigestSpec | None) -> dict[str, Any] | None:
    """A step's per-key limit: a rule's, always counted in the workspace's shared window
    for its key (by default the recipient)."""
    if raw is None:
        return None
    if isinstance(raw, Mapping) and raw.get("shared") is False:
        raise InputError(
            f"{where}.shared: a step's limit always counts in the workspace's window for its"
            " key, with the rules' and steps' shared limits",
            field=f"{where}.shared",
        )
    stored = validate_key_limit(raw, True, "event", where)
    if digest is not None and stored["excess"] == "digest":
        raise InputError(
            f"{where}.excess 'digest' is for a step that sends alone; this step already"
            " collects into its digest",
            field=f"{where}.excess",
        )
    return stored | {"shared": True}


def validate_campaign(given: CampaignInput, settings: Settings) -> tuple[list[Step], list[str]]:
    if not isinstance(given.name, str) or not given.name.strip() or len(given.name) > 200:
        raise InputError("name must be 1 to 200 characters", field="name")
    if not isinstance(given.steps, list) or not 1 <= len(given.steps) <= MAX_STEPS:
        raise InputError(f"steps must be a list of 1 to {MAX_STEPS} steps", field="steps")
    steps = [_step(raw, i, settings) for i, raw in enumerate(given.steps)]
    events = list(given.exit_events or [])
    if len(events) > MAX_EXIT_EVENTS or not all(
        isinstance(e, str) and EVENT_TYPE.match(e) for e in events
    ):
        raise InputError(
            f"exit_events must be at most {MAX_EXIT_EVENTS} event types such as 'email.replied'",
            field="exit_events",
        )
    if given.cap_policy not in (None, "defer", "drop"):
        raise InputError("cap_policy must be 'defer', 'drop' or null", field="cap_policy")
    return steps, sorted(set(events))


def steps_from_json(raw: list[Any], settings: Settings) -> list[Step]:
    """Stored steps (checked when written). Action types since removed stay readable."""
    steps = []
    for item in raw:
        wait = item["wait"]
        action = item["action"]
        steps.append(
            Step(
                Wait(wait.get("delay_seconds"), wait.get("day"),
                     time.fromisoformat(wait["at"]) if "at" in wait else None),
                action["action_type"], action["target_key"], action.get("payload", {}),
                parse_conditions(item.get("conditions") or [], ROOTS),
                item.get("name"),
                parse_spec(action["digest"]) if action.get("digest") is not None else None,
                action.get("limit"),
            )
        )  # fmt: skip
    return steps


# ---------------------------------------------------------------------------------- time


def step_time(step: Step, starts_at: datetime, base: datetime, tz: ZoneInfo) -> datetime:
    """When a step is due: `delay_seconds` after `base` (the previous step's send or skip,
    or the start), or day N of the enrollment at a local time, never before `base`."""
    if step.wait.delay_seconds is not None:
        return base + timedelta(seconds=step.wait.delay_seconds)
    assert step.wait.day is not None
    assert step.wait.at is not None
    first: date = starts_at.astimezone(tz).date()
    at = resolve_wall_time(first + timedelta(days=step.wait.day), step.wait.at, tz)
    return max(at, base)


def context(
    enrollment_id: UUID, campaign_id: UUID, recipient_id: str, data: dict[str, Any],
    timezone: str, step: int,
) -> dict[str, Any]:  # fmt: skip
    """What a step's templates and conditions see."""
    return {
        "data": data,
        "recipient": {"id": recipient_id, "timezone": timezone},
        "enrollment": {"id": str(enrollment_id), "step": step, "campaign_id": str(campaign_id)},
    }


def dedupe_key(enrollment_id: UUID, step: int) -> str:
    return f"{enrollment_id}:{step}"
