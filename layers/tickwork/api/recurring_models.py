"""Request and response bodies of /v1/recurring (pydantic; they make the OpenAPI document)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal
from uuid import UUID
from zoneinfo import ZoneInfo

from pydantic import BaseModel, Field

from tickwork.api.models import Instant, Strict, Tags
from tickwork.platform.errors import InputError, InvalidRecurrenceError
from tickwork.platform.wallclock import local_rendering
from tickwork.recurring.recurrence import MAX_RULE_LENGTH, Occurrence
from tickwork.recurring.store import MAX_CATCH_UP_SECONDS, MAX_FAILURES_LIMIT, Schedule

ScheduleStatus = Literal["active", "paused", "ended"]

# A wall time without an offset, to the minute or the second.
WALL_TIME = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?$"
_EXAMPLE_RULE = "FREQ=WEEKLY;BYDAY=TU;BYHOUR=9;BYMINUTE=0;BYSECOND=0"


def _rrule(**default: Any) -> Any:
    return Field(
        **default,
        min_length=1,
        max_length=MAX_RULE_LENGTH,
        description="RFC 5545 RRULE, optionally with EXDATE and RDATE lines",
        examples=[_EXAMPLE_RULE],
    )


def _dtstart(default_meaning: str) -> Any:
    return Field(
        default=None,
        pattern=WALL_TIME,
        description=f"local wall time in `timezone`, without an offset; {default_meaning}",
        examples=["2027-03-02T09:00:00"],
    )


def _catch_up() -> Any:
    return Field(
        default=None,
        ge=0,
        le=MAX_CATCH_UP_SECONDS,
        description="a missed occurrence fires late only within this many seconds",
    )


def _max_failures() -> Any:
    return Field(
        default=None,
        ge=1,
        le=MAX_FAILURES_LIMIT,
        description="failed occurrences in a row that pause the schedule",
    )


class CreateSchedule(Strict):
    """A rule expanded in `timezone`: 09:00 stays 09:00 local across DST."""

    # An until beyond the scheduling horizon is a limit of the rule (invalid_recurrence).
    OUT_OF_HORIZON: ClassVar[dict[str, type[InputError]]] = {"until": InvalidRecurrenceError}

    action_type: str = Field(min_length=1, max_length=63, examples=["webhook"])
    target_key: str = Field(min_length=1, max_length=200, examples=["primary"])
    thing_id: str | None = Field(default=None, min_length=1, max_length=200)
    payload: dict[str, Any] = Field(
        default_factory=dict, description="the template every occurrence carries"
    )
    rrule: str = _rrule()
    dtstart: str | None = _dtstart("default: now there, to the minute")
    timezone: str | None = Field(
        default=None,
        max_length=64,
        description="IANA zone; default: the recipient's zone when there is a recipient, else"
        " the workspace's; stored with the schedule",
    )
    until: Instant | None = Field(
        default=None, description="RFC 3339 with offset; nothing fires after it"
    )
    catch_up_window_seconds: int | None = _catch_up()
    max_failures_before_pause: int | None = _max_failures()
    connection_id: UUID | None = Field(
        default=None, description="the workspace connection its occurrences send through"
    )
    recipient_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="a registered recipient: their quiet hours and caps apply to every"
        " occurrence, and their zone is the default `timezone`",
    )
    transactional: bool = Field(
        default=False, description="exempt from the recipient's quiet hours and caps"
    )
    render_payload: bool = Field(
        default=False,
        description="render the payload's strings as templates at each occurrence, with"
        " `occurrence` (index, local_date, local_time, scheduled_at, timezone)",
    )
    tags: Tags = Field(
        default_factory=list,
        description="labels its occurrences carry (as an action's `tags`): a bulk cancel by"
        " tag takes them",
    )


def _leave_out(**constraints: Any) -> Any:
    """A PATCH field that may be left out but not sent as null: not nullable in the schema;
    None when absent, a default never read (only the fields sent are)."""
    return Field(default=None, **constraints)


class SchedulePatch(Strict):
    """Only the fields sent change. `until`, `thing_id` and `recipient_id` may be null
    (cleared); the others may be left out but not sent as null. A change of rule, time,
    zone, until, target, thing, payload, recipient, transactional or render_payload cancels
    the future queued occurrences and materializes the new definition; history stays."""

    OUT_OF_HORIZON: ClassVar[dict[str, type[InputError]]] = {"until": InvalidRecurrenceError}

    rrule: str = _rrule(default=None)
    dtstart: str = _dtstart("the wall time stays when only the zone changes")
    timezone: str = _leave_out(max_length=64, description="IANA zone")
    until: Instant | None = Field(default=None, description="null: no end")
    payload: dict[str, Any] = _leave_out(description="the template every occurrence carries")
    target_key: str = _leave_out(min_length=1, max_length=200)
    thing_id: str | None = Field(default=None, min_length=1, max_length=200)
    catch_up_window_seconds: int = _catch_up()
    max_failures_before_pause: int = _max_failures()
    recipient_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="null: no recipient; the schedule's zone stays (send `timezone` too)",
    )
    transactional: bool = _leave_out(description="exempt from the recipient's quiet hours and caps")
    render_payload: bool = _leave_out(
        description="render the payload's strings per occurrence (see create)"
    )

    def changes(self) -> dict[str, Any]:
        """The fields sent, by name."""
        return {name: getattr(self, name) for name in self.model_fields_set}


class Reason(Strict):
    reason: str | None = Field(
        default=None, min_length=1, max_length=500, description="shown as the schedule's reason"
    )


class OccurrenceOut(BaseModel):
    at: datetime = Field(description="the instant, UTC")
    local: str = Field(description="the same instant in the schedule's zone, with its offset")

    @classmethod
    def of(cls, occurrence: Occurrence, tz: ZoneInfo) -> OccurrenceOut:
        return cls(at=occurrence.at, local=local_rendering(occurrence.at, tz))


class ScheduleOut(BaseModel):
    id: UUID
    action_type: str
    target_key: str
    thing_id: str | None
    payload: dict[str, Any] = Field(description="the template every occurrence carries")
    rrule: str
    dtstart: str = Field(description="local wall time in `timezone`")
    timezone: str
    until: datetime | None
    status: ScheduleStatus
    paused_reason: str | None = Field(description="why it is paused (by request, or failures)")
    paused_at: datetime | None
    ended_reason: str | None
    ended_at: datetime | None
    consecutive_failures: int
    max_failures_before_pause: int
    catch_up_window_seconds: int
    skipped_occurrences: int = Field(description="missed occurrences the catch-up skipped")
    last_materialized_through: datetime = Field(description="occurrences are queued up to here")
    revision: int = Field(description="bumped by every edit")
    created_at: datetime
    updated_at: datetime
    next_occurrences: list[OccurrenceOut] | None = Field(
        description="the next occurrences by the rule (what would fire once resumed, if"
        " paused; none once ended); null when no preview was asked for"
    )
    connection_id: UUID | None = None
    recipient_id: str | None = None
    transactional: bool = False
    timezone_from: Literal["given", "recipient", "workspace"] | None = Field(
        default=None,
        description="where `timezone` came from: given, the recipient's or the workspace's"
        " (null: a schedule made before this was kept)",
    )
    render_payload: bool = False
    tags: list[str] = Field(default_factory=list, description="what its occurrences carry")

    @classmethod
    def of(cls, schedule: Schedule, preview: list[Occurrence] | None) -> ScheduleOut:
        tz = ZoneInfo(schedule.timezone)
        return cls(
            id=schedule.id, action_type=schedule.action_type, target_key=schedule.target_key,
            thing_id=schedule.thing_id, payload=schedule.payload_template, rrule=schedule.rrule,
            dtstart=schedule.dtstart.isoformat(), timezone=schedule.timezone,
            until=schedule.until, status=schedule.status, paused_reason=schedule.paused_reason,
            paused_at=schedule.paused_at, ended_reason=schedule.ended_reason,
            ended_at=schedule.ended_at, consecutive_failures=schedule.consecutive_failures,
            max_failures_before_pause=schedule.max_failures_before_pause,
            catch_up_window_seconds=schedule.catch_up_window_seconds,
            skipped_occurrences=schedule.skipped_occurrences,
            last_materialized_through=schedule.last_materialized_through,
            revision=schedule.revision, created_at=schedule.created_at,
            updated_at=schedule.updated_at, connection_id=schedule.connection_id,
            recipient_id=schedule.recipient_id, transactional=schedule.transactional,
            timezone_from=schedule.timezone_from, render_payload=schedule.render_payload,
            tags=list(schedule.tags),
            next_occurrences=(
                None if preview is None else [OccurrenceOut.of(o, tz) for o in preview]
            ),
        )  # fmt: skip


class SchedulePage(BaseModel):
    items: list[ScheduleOut]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page")
