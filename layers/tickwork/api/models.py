"""Request and response bodies of the HTTP API (pydantic; they make the OpenAPI document)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID
from zoneinfo import ZoneInfo

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    model_validator,
)

from tickwork.actions import bulk
from tickwork.actions.model import MAX_TAG_LENGTH, MAX_TAGS, TAG_PATTERN, Action
from tickwork.actions.why import Step
from tickwork.calendar import Glimpse
from tickwork.platform.wallclock import local_rendering, to_utc

_RFC3339_START = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def _rfc3339_text(value: Any) -> Any:
    """Refuse what pydantic would read as a Unix timestamp (`0.5`, `1700000000`)."""
    if isinstance(value, str) and not _RFC3339_START.match(value):
        raise ValueError("must be RFC 3339 with an offset, e.g. 2026-05-20T09:00:00Z")
    if isinstance(value, int | float):
        raise ValueError("must be RFC 3339 with an offset, e.g. 2026-05-20T09:00:00Z")
    return value


# An RFC 3339 instant with an offset, in UTC once validated; one whose UTC form falls
# outside the years 1-9999 (0001-01-01T00:00:00+01:00) is a 422, not an overflow.
Instant = Annotated[AwareDatetime, BeforeValidator(_rfc3339_text), AfterValidator(to_utc)]

Status = Literal["queued", "submitted", "published", "failed", "cancelled"]
# Where the zone of a wall time came from: given, the recipient's or the workspace's.
TimezoneFrom = Literal["given", "recipient", "workspace"]

# One tag as the API takes it (tickwork.actions.model.check_tags says the same, in words).
Tag = Annotated[
    str, Field(min_length=1, max_length=MAX_TAG_LENGTH, pattern=f"^{TAG_PATTERN.pattern}$")
]
Tags = Annotated[list[Tag], Field(max_length=MAX_TAGS)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class When(Strict):
    """Either an instant (`publish_at`, RFC 3339 with an offset) or a wall time (`date` and
    `time`, in `timezone`; else the recipient's zone when there is a recipient, else the
    workspace's)."""

    publish_at: Instant | None = Field(
        default=None, description="RFC 3339 with offset, e.g. 2026-05-20T09:00:00-04:00"
    )
    date: str | None = Field(default=None, description="local date, YYYY-MM-DD", max_length=10)
    time: str | None = Field(default=None, description="local time, HH:MM[:SS]", max_length=15)
    timezone: str | None = Field(
        default=None,
        description="IANA zone; default: the recipient's zone when there is a recipient, else"
        " the workspace's",
        max_length=64,
    )

    @model_validator(mode="after")
    def _one_form(self) -> When:
        wall = self.date is not None or self.time is not None
        if self.publish_at is not None and (wall or self.timezone is not None):
            raise ValueError("give either publish_at, or date and time (and timezone); not both")
        if self.publish_at is None and (self.date is None or self.time is None):
            raise ValueError("give publish_at, or both date and time")
        return self


class CreateAction(When):
    action_type: str = Field(min_length=1, max_length=63, examples=["webhook"])
    target_key: str = Field(min_length=1, max_length=200, examples=["primary"])
    thing_id: str | None = Field(default=None, min_length=1, max_length=200)
    payload: dict[str, Any] = Field(default_factory=dict)
    connection_id: UUID | None = Field(
        default=None, description="the workspace connection to send through (/v1/connections)"
    )
    recipient_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="a registered recipient: their quiet hours and caps apply",
    )
    transactional: bool = Field(
        default=False, description="exempt from the recipient's quiet hours and caps"
    )
    tags: Tags = Field(
        default_factory=list,
        description=f"at most {MAX_TAGS} labels of your own, e.g. 'podcast:42': list them"
        " (GET /v1/actions?tag=) or cancel everything pending of one (bulk-cancel `tag`)",
    )


class Reschedule(When):
    pass


class ResolvedOut(BaseModel):
    """How the wall time of the request became `publish_at` (the rule under *Time*)."""

    wall_time: str = Field(description="the date and time asked for")
    timezone: str = Field(description="the zone they were read in")
    rule: Literal["exact", "skipped_moved_forward", "repeated_first_occurrence"]
    local: str = Field(description="publish_at in that zone, with its offset")
    note: str = Field(description="what happened, when the rule moved or chose the time")


class ActionOut(BaseModel):
    id: UUID
    action_type: str
    target_key: str
    thing_id: str | None
    payload: dict[str, Any]
    status: Status
    publish_at: datetime
    publish_at_local: str = Field(
        description="publish_at in the zone it was scheduled in (a wall time's zone), else"
        " the workspace's"
    )
    timezone: str | None = Field(
        default=None, description="the zone of the wall time it was scheduled at, if any"
    )
    next_attempt_at: datetime | None
    error_code: str | None
    last_error: str | None
    attempt_count: int
    manual_retries: int
    provider_id: str | None
    submitted_at: datetime | None
    finished_at: datetime | None
    rescheduled_from: UUID | None
    recurring_schedule_id: UUID | None
    source: str
    idempotency_key: str | None
    recipient_id: str | None = None
    transactional: bool = False
    original_publish_at: datetime | None = Field(
        default=None, description="the time asked for, when quiet hours moved it"
    )
    created_at: datetime
    updated_at: datetime
    resolved: ResolvedOut | None = Field(
        default=None,
        description="in the answer to a request that gave date and time: how that wall time"
        " was read (moved forward when the zone skips it, the first when it repeats)",
    )
    timezone_from: TimezoneFrom | None = Field(
        default=None,
        description="in the answer to a request that gave date and time: where the zone it"
        " was read in came from (given, the recipient's or the workspace's)",
    )
    connection_id: UUID | None = None
    tags: list[str] = Field(default_factory=list, description="its labels, as given")

    @classmethod
    def of(cls, action: Action, tz: ZoneInfo) -> ActionOut:
        return cls(
            id=action.id, action_type=action.action_type, target_key=action.target_key,
            thing_id=action.thing_id, payload=action.payload, status=action.status,
            publish_at=action.publish_at,
            publish_at_local=local_rendering(
                action.publish_at, ZoneInfo(action.timezone) if action.timezone else tz
            ),
            timezone=action.timezone,
            next_attempt_at=action.next_attempt_at, error_code=action.error_code,
            last_error=action.last_error, attempt_count=action.attempt_count,
            manual_retries=action.manual_retries, provider_id=action.provider_id,
            submitted_at=action.submitted_at, finished_at=action.finished_at,
            rescheduled_from=action.rescheduled_from,
            recurring_schedule_id=action.recurring_schedule_id, source=action.source,
            idempotency_key=action.dedupe_key, recipient_id=action.recipient_id,
            transactional=action.transactional, original_publish_at=action.original_publish_at,
            created_at=action.created_at, updated_at=action.updated_at,
            connection_id=action.connection_id, tags=list(action.tags),
        )  # fmt: skip


class WhyStepOut(BaseModel):
    """One step of an action's story: something that happened to it, or where it stands."""

    code: str = Field(
        description="what kind of step (machine-readable): created, rescheduled_from,"
        " quiet_hours, deferred_cap, deferred_quiet_hours, cancelled, rescheduled, skipped,"
        " dropped_cap, exited, throttled, attempt, delivery, resolved_delivered, resolved_requeued,"
        " resolver_unsure, due_later, waiting_for_tick, in_queue, too_late, backing_off,"
        " retried, held_kill_switch, held_paused_type, claimed, stuck_soon, published,"
        " failed, awaiting_resolver, needs_person, retry_possible",
        examples=["due_later"],
    )
    at: datetime | None = Field(
        description="when it happened, or happens next (UTC); null when it holds now"
    )
    text: str = Field(
        description="the step in one plain sentence; its times in the answer's `timezone`"
    )
    details: dict[str, Any] = Field(
        default_factory=dict, description="the values behind the sentence: ids, times, codes"
    )

    @classmethod
    def of(cls, step: Step) -> WhyStepOut:
        return cls(code=step.code, at=step.at, text=step.text, details=step.details)


class WhyOut(BaseModel):
    """Why an action is where it is ("why not yet?"): its status, explained."""

    id: UUID
    status: Status
    as_of: datetime = Field(description="the time the answer was made (UTC)")
    timezone: str = Field(
        description="the zone every sentence gives its times in: the `timezone` asked for,"
        " else the zone the action was scheduled in, else the workspace's",
        examples=["Europe/Paris"],
    )
    steps: list[WhyStepOut] = Field(
        description="its history, oldest first, then where it stands and what happens next"
    )


class CalendarRange(BaseModel):
    """The range a calendar page covers, as given or by default."""

    model_config = ConfigDict(populate_by_name=True)

    start: datetime = Field(alias="from", description="inclusive")
    end: datetime = Field(alias="to", description="exclusive")


class GlimpseOut(BaseModel):
    """An action as a calendar cell shows it (GET /v1/actions/{id} has the rest), or an
    occurrence a recurring schedule will make (`projected`: no row, so no id, yet)."""

    id: UUID | None = Field(description="the action's id; null for a projected occurrence")
    action_type: str
    target_key: str
    status: str = Field(description="its status, or `projected` (not made yet)")
    publish_at: datetime = Field(
        description="when it is due (a projected one: the rule's time; the recipient's quiet"
        " hours may still move it when it is made)"
    )
    projected: bool = Field(
        default=False, description="true: an occurrence its schedule will make, not made yet"
    )
    recurring_schedule_id: UUID | None = Field(
        default=None, description="a projected occurrence's schedule (GET /v1/recurring/{id})"
    )

    @classmethod
    def of(cls, glimpse: Glimpse) -> GlimpseOut:
        return cls(
            id=glimpse.id, action_type=glimpse.action_type, target_key=glimpse.target_key,
            status=glimpse.status, publish_at=glimpse.publish_at, projected=glimpse.projected,
            recurring_schedule_id=glimpse.recurring_schedule_id,
        )  # fmt: skip


class BucketCountOut(BaseModel):
    start: str = Field(description="the local wall time the day or hour starts at, no offset")
    total: int
    counts: dict[str, int] = Field(
        description="actions by status, and `projected`: occurrences recurring schedules will"
        " make there, not made yet"
    )
    items: list[GlimpseOut] = Field(
        description="the first per_bucket actions and projected occurrences, in due order"
    )


class CalendarSummaryOut(BaseModel):
    timezone: str
    unit: Literal["day", "hour"]
    range: CalendarRange
    buckets: list[BucketCountOut] = Field(description="only days or hours holding actions")
    projection_complete: bool = Field(
        default=True,
        description="false when the projected occurrences were cut short by their bounds"
        " (2,000 an answer, from the first 200 active schedules): there may be more",
    )


class ActionPage(BaseModel):
    items: list[ActionOut]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page")
    range: CalendarRange | None = Field(
        default=None, description="the from and to used (defaults: 24 h ago, from + 31 days)"
    )


class BulkFilterIn(Strict):
    """Which actions a bulk call takes: at least one criterion besides `status`, `limit` and
    `after` (an empty filter is refused, so nothing is cancelled or retried by accident)."""

    action_type: str | None = Field(default=None, min_length=1, max_length=63)
    error_code: str | None = Field(default=None, min_length=1, max_length=100)
    due_from: Instant | None = Field(
        default=None, description="publish_at at or after this (RFC 3339 with offset)"
    )
    due_to: Instant | None = Field(
        default=None, description="publish_at before this (RFC 3339 with offset)"
    )
    thing_id: str | None = Field(default=None, min_length=1, max_length=200)
    target_key: str | None = Field(default=None, min_length=1, max_length=200)
    limit: int = Field(
        default=bulk.DEFAULT_LIMIT, ge=1, le=bulk.MAX_LIMIT, description="rows this call takes"
    )
    after: str | None = Field(
        default=None, max_length=300, description="`next` of the previous call: go on from there"
    )

    def where(self) -> bulk.Filter:
        return bulk.Filter(
            action_type=self.action_type, error_code=self.error_code, due_from=self.due_from,
            due_to=self.due_to, thing_id=self.thing_id, target_key=self.target_key,
        )  # fmt: skip


class BulkCancelIn(BulkFilterIn):
    """A cancel may name one parent instead of walking the workspace: every pending action
    of a `tag`, a `recipient_id` (whose running enrollments are exited too), an entity
    (`entity_type` and `entity_id`: what rules made for it) or a `campaign_id` (its running
    enrollments are exited, their pending steps cancelled), within the call's budgets."""

    status: Literal["queued"] | None = Field(
        default=None, description="only queued actions can be cancelled"
    )
    limit: int | None = Field(  # type: ignore[assignment]
        default=None, ge=1, le=bulk.MAX_PARENT_LIMIT,
        description=f"rows this call takes: default {bulk.DEFAULT_LIMIT}, at most"
        f" {bulk.MAX_LIMIT}; with a parent default {bulk.DEFAULT_PARENT_LIMIT}, at most"
        f" {bulk.MAX_PARENT_LIMIT} (and {bulk.BUDGET_SECONDS:g} s)",
    )  # fmt: skip
    tag: Tag | None = Field(default=None, description="parent: the actions with this tag")
    recipient_id: str | None = Field(
        default=None, min_length=1, max_length=200,
        description="parent: the recipient's actions; their running enrollments exit",
    )  # fmt: skip
    entity_type: str | None = Field(
        default=None, min_length=1, max_length=63, description="parent, with entity_id"
    )
    entity_id: str | None = Field(
        default=None, min_length=1, max_length=200,
        description="parent, with entity_type: the actions rules made for the entity",
    )  # fmt: skip
    campaign_id: UUID | None = Field(
        default=None, description="parent: the campaign's running enrollments exit"
    )

    def where(self) -> bulk.Filter:
        return bulk.Filter(
            action_type=self.action_type, error_code=self.error_code, due_from=self.due_from,
            due_to=self.due_to, thing_id=self.thing_id, target_key=self.target_key,
            tag=self.tag, recipient_id=self.recipient_id, entity_type=self.entity_type,
            entity_id=self.entity_id, campaign_id=self.campaign_id,
        )  # fmt: skip


class BulkRetryIn(BulkFilterIn):
    status: Literal["failed"] | None = Field(
        default=None, description="only failed actions can be retried"
    )


class BulkOut(BaseModel):
    """What one bulk call did: matched = changed + skipped + the refused."""

    matched: int = Field(description="rows matching the filter this call took (at most limit)")
    changed: int = Field(description="rows cancelled, or queued again")
    skipped: int = Field(description="rows that moved on meanwhile (claimed, cancelled, ...)")
    refused: dict[str, int] = Field(
        default_factory=dict,
        description="retry: rows that may not be retried, by reason: `retries_exhausted`"
        " (retried the most allowed), `taken` (the thing and target have another active or"
        " published action)",
    )
    next: str | None = Field(
        description="pass as `after` to go on; null when no matching row is left"
    )
    exited: int = Field(
        default=0, description="a cancel by campaign or recipient: enrollments it exited"
    )

    @classmethod
    def of(cls, result: bulk.Result) -> BulkOut:
        return cls(
            matched=result.matched, changed=result.changed, skipped=result.skipped,
            refused=result.refused, next=result.next, exited=result.exited,
        )  # fmt: skip


class BulkCancelOut(BulkOut):
    """What one bulk cancel did, and the recurring schedules it paused."""

    paused_schedules: list[UUID] = Field(
        default_factory=list,
        description="a cancel by tag or recipient (without due_from or due_to): the active"
        " recurring schedules this call paused, which carry the tag or send to the"
        " recipient (they would make new occurrences); their `paused_reason` names the"
        " cancel. A later call pauses none twice",
    )

    @classmethod
    def of(cls, result: bulk.Result) -> BulkCancelOut:
        return cls(**BulkOut.of(result).model_dump(), paused_schedules=result.paused_schedules)


class StatusCount(BaseModel):
    status: Status
    action_type: str
    count: int


class LagOut(BaseModel):
    p50: float
    p95: float
    p99: float


class StatsOut(BaseModel):
    counts: list[StatusCount]
    due_backlog: int = Field(description="queued actions already due")
    oldest_due_age_seconds: float | None
    lag_sample: int = Field(description="actions due in the last hour that were claimed")
    lag_ms: LagOut | None = Field(description="claim time - publish_at, last hour")


class LimitsOut(BaseModel):
    """The workspace's quotas (0: none): those its operator set, else the stack's defaults.
    Read-only: only the operator changes them (`tickwork workspace limits`)."""

    active_actions: int = Field(description="queued or submitted actions it may hold")
    recurring_schedules: int = Field(description="recurring schedules not ended")
    schedule_window_rows: int = Field(description="rows one schedule may make in its window")
    api_requests_per_minute: int
    rules: int = Field(description="rules not deleted")
    recipients: int
    actions_per_event: int = Field(
        description="actions one event may make (and enabled rules one event type may have)"
    )
    actions_per_minute: int = Field(description="actions its API requests may create a minute")
    suppressions: int = Field(description="entries of its suppression list the API may add")
    digests: int = Field(description="digests collecting at once (open, action queued)")


class RetentionOut(BaseModel):
    """How long finished actions stay before they are archived and removed."""

    days: int  # in force: the workspace's own, else the stack's
    own_days: int | None  # the workspace's override (null: none)
    default_days: int  # the stack's
    legal_hold: bool  # true: nothing is removed


class WorkspaceOut(BaseModel):
    id: UUID
    name: str
    timezone: str
    # The caller's role here: what the console offers (admins retry, redrive, see operations).
    role: Literal["member", "admin"]
    settings: dict[str, Any]
    limits: LimitsOut
    retention: RetentionOut
    now_local: str
    created_at: datetime
    updated_at: datetime


class WorkspacePatch(Strict):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    timezone: str | None = Field(default=None, max_length=64)
    settings: dict[str, Any] | None = None
    # Admins: the workspace's own retention in days (null: back to the stack's), and the
    # legal hold that suspends removal (docs/retention.md).
    retention_days: StrictInt | None = Field(default=None, ge=7, le=3650)
    legal_hold: StrictBool | None = None


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class ErrorBody(BaseModel):
    error: ErrorDetail


_ERROR_MEANINGS = {
    400: "the request is malformed (body not JSON or not UTF-8, X-Workspace-Id missing or"
    " not a UUID)",
    401: "no valid bearer token",
    403: "not a member of the workspace, or not an admin",
    404: "not found in this workspace (another workspace's ids are not found either)",
    409: "not in a state that allows this (an action past queued, an ended schedule), or it"
    " conflicts with another",
    413: "the body or the payload is too large",
    422: "a value is invalid, or a quota is reached; the message says which and why",
    429: "the workspace's request or action rate quota; retry after Retry-After seconds",
}


def responses(status: int, model: type[BaseModel], description: str) -> dict[int, Any]:
    """OpenAPI responses of a route: its success, and every error in the one error shape."""
    documented: dict[int, Any] = {
        status: {"description": description, "content": {"application/json": {"model": model}}}
    }
    for code, meaning in _ERROR_MEANINGS.items():
        documented[code] = {
            "description": meaning,
            "content": {"application/json": {"model": ErrorBody}},
        }
    return documented


class IntentIn(When):
    """What the app wants for one of its things: the targets, when (an instant, or a wall
    time in a zone, or in the recipient's or the workspace's zone, followed when it
    changes) and the payload."""

    action_type: str = Field(min_length=1, max_length=63, examples=["publish_post"])
    targets: list[str] = Field(min_length=1, max_length=100, examples=[["instagram"]])
    payload: dict[str, Any] = Field(default_factory=dict)
    state: Literal["scheduled", "unscheduled"] = "scheduled"
    recipient_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="a registered recipient: their quiet hours and caps apply, and their zone"
        " reads a wall time given without one",
    )
    transactional: bool = Field(
        default=False, description="exempt from the recipient's quiet hours and caps"
    )


class ReconcileOut(BaseModel):
    inserted: int
    moved: int
    cancelled: int
    skipped: dict[str, int] = Field(description="rows left alone, by the gate that held them")
    conflicts: int


class IntentOut(BaseModel):
    thing_id: str
    action_type: str
    targets: list[str]
    state: Literal["scheduled", "unscheduled"]
    date: str | None
    time: str | None
    timezone: str | None = Field(
        description="null: the recipient's zone when there is a recipient, else the workspace's"
    )
    timezone_from: TimezoneFrom | None = Field(
        default=None,
        description="where the zone the wall time is read in comes from: given, the"
        " recipient's or the workspace's (null for an instant)",
    )
    recipient_id: str | None = None
    transactional: bool = False
    publish_at: datetime | None = Field(description="the instant asked for, if one was")
    resolved_at: datetime | None = Field(description="the instant the intent means now, UTC")
    resolved_at_local: str | None
    payload: dict[str, Any]
    version: int
    updated_at: datetime
    actions: list[ActionOut] = Field(description="every action of the thing, oldest first")
    reconciled: ReconcileOut | None = Field(
        default=None, description="what reconciling did, on a write"
    )
    resolved: ResolvedOut | None = Field(
        default=None, description="how the wall time is read in its zone, when it has one"
    )
