"""/v1/recurring: recurring schedules: create, list, get (with a preview of the next
occurrences), edit, pause, resume, end, run now. Members may do all of it, as with actions."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Query

from tickwork import quotas
from tickwork.api.models import ActionOut, responses
from tickwork.api.recurring_models import (
    CreateSchedule,
    Reason,
    ScheduleOut,
    SchedulePage,
    SchedulePatch,
    ScheduleStatus,
)
from tickwork.api.scope import RequestScope, scope
from tickwork.platform import paging
from tickwork.platform.errors import InputError, InvalidTimeError, NotFoundError
from tickwork.platform.observability import logger
from tickwork.recipients.policy import zone_for
from tickwork.recurring import store as recurring
from tickwork.recurring.recurrence import Occurrence
from tickwork.recurring.store import NewSchedule, Schedule, ScheduleChanges, ScheduleCursor

router = Router()

WorkspaceHeader = Annotated[
    UUID, Header(alias="X-Workspace-Id", description="the workspace to act in")
]
PREVIEW_DEFAULT = recurring.PREVIEW_COUNT
PREVIEW_MAX = 50
LIST_PREVIEW_MAX = 5
MAX_PAGE = 200
Preview = Annotated[
    int,
    Query(ge=0, le=PREVIEW_MAX, description="how many upcoming occurrences to show (0: none)"),
]
OptionalReason = Annotated[Reason | None, Body(description="optional: why")]


def _schedule_id(raw: str) -> UUID:
    try:
        return UUID(raw)
    except ValueError as exc:
        raise NotFoundError(f"recurring schedule {raw!r} not found") from exc


def _wall_time(raw: str | None) -> datetime | None:
    if raw is None:
        return None
    try:
        return datetime.fromisoformat(raw)
    except ValueError as exc:
        raise InvalidTimeError(
            f"dtstart {raw!r} is not a wall time such as 2027-03-02T09:00:00 ({exc})",
            field="dtstart",
        ) from exc


def _preview(schedule: Schedule, request: RequestScope, count: int) -> list[Occurrence] | None:
    if count == 0:
        return None
    try:
        return recurring.preview_occurrences(schedule, request.now, count)
    except InputError as exc:
        # A stored rule that no longer expands: the expander pauses it and says why.
        logger.warning(
            "no preview of a recurring schedule",
            extra={"schedule_id": str(schedule.id), "why": str(exc)},
        )
        return []


def _out(request: RequestScope, schedule: Schedule, preview: int = PREVIEW_DEFAULT) -> ScheduleOut:
    return ScheduleOut.of(schedule, _preview(schedule, request, preview))


@router.post(
    "/v1/recurring",
    summary="Create a recurring schedule",
    responses=responses(201, ScheduleOut, "created, with its next occurrences"),
)
def create_schedule(body: CreateSchedule, workspace: WorkspaceHeader) -> Response[ScheduleOut]:
    request = scope(router)
    timezone, timezone_from = zone_for(
        request.conn, request.caller.workspace_id, given=body.timezone,
        recipient_id=body.recipient_id, workspace_zone=request.caller.timezone.key,
    )  # fmt: skip
    new = NewSchedule(
        action_type=body.action_type,
        target_key=body.target_key,
        rrule=body.rrule,
        timezone=timezone,
        timezone_from=timezone_from,
        recipient_id=body.recipient_id,
        transactional=body.transactional,
        render_payload=body.render_payload,
        dtstart=_wall_time(body.dtstart),
        payload=body.payload,
        thing_id=body.thing_id,
        until=body.until,
        catch_up_window_seconds=body.catch_up_window_seconds,
        max_failures_before_pause=body.max_failures_before_pause,
        created_by=request.caller.user_id,
        connection_id=body.connection_id,
        tags=tuple(body.tags),
    )
    quotas.check_new_schedule(request.conn, request.caller.workspace_id, request.limits)
    result = recurring.create_schedule(
        request.conn, request.caller.workspace_id, new, request.runtime.settings, request.now,
        limits=request.limits,
    )  # fmt: skip
    request.added(result.created)
    return Response(
        status_code=201,
        content_type=content_types.APPLICATION_JSON,
        body=_out(request, result.schedule),
    )


@router.get(
    "/v1/recurring",
    summary="List recurring schedules",
    responses=responses(200, SchedulePage, "a page of schedules, oldest first"),
)
def list_schedules(
    workspace: WorkspaceHeader,
    status: Annotated[ScheduleStatus | None, Query()] = None,
    action_type: Annotated[str | None, Query(max_length=63)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=300)] = None,
    preview: Annotated[
        int,
        Query(ge=0, le=LIST_PREVIEW_MAX, description="upcoming occurrences per schedule"),
    ] = 0,
) -> SchedulePage:
    request = scope(router)
    found = recurring.list_schedules(
        request.conn, request.caller.workspace_id, status=status, action_type=action_type,
        limit=limit + 1, after=ScheduleCursor(*paging.decode_cursor(cursor)) if cursor else None,
    )  # fmt: skip
    items = found[:limit]
    more = len(found) > limit
    return SchedulePage(
        items=[_out(request, s, preview) for s in items],
        next_cursor=paging.encode_cursor(*items[-1].cursor) if more else None,
    )


@router.get(
    "/v1/recurring/<schedule_id>",
    summary="Get a recurring schedule, with its next occurrences",
    responses=responses(200, ScheduleOut, "it"),
)
def get_schedule(
    schedule_id: str, workspace: WorkspaceHeader, preview: Preview = PREVIEW_DEFAULT
) -> ScheduleOut:
    request = scope(router)
    found = recurring.get_schedule(
        request.conn, request.caller.workspace_id, _schedule_id(schedule_id)
    )
    return _out(request, found, preview)


@router.patch(
    "/v1/recurring/<schedule_id>",
    summary="Edit a schedule: future queued occurrences move, history stays",
    responses=responses(200, ScheduleOut, "the schedule as changed"),
)
def edit_schedule(schedule_id: str, body: SchedulePatch, workspace: WorkspaceHeader) -> ScheduleOut:
    request = scope(router)
    key = _schedule_id(schedule_id)
    sent = body.changes()
    if "dtstart" in sent:
        sent["dtstart"] = _wall_time(sent["dtstart"])
    result = recurring.edit_schedule(
        request.conn, request.caller.workspace_id, key, ScheduleChanges(**sent),
        request.runtime.settings, request.now, limits=request.limits,
    )  # fmt: skip
    request.added(result.created)
    return _out(request, result.schedule)


@router.post(
    "/v1/recurring/<schedule_id>/pause",
    summary="Pause a schedule: its queued occurrences not yet due are cancelled (idempotent)",
    responses=responses(200, ScheduleOut, "paused (now or before)"),
)
def pause_schedule(
    schedule_id: str, workspace: WorkspaceHeader, body: OptionalReason = None
) -> ScheduleOut:
    request = scope(router)
    key = _schedule_id(schedule_id)
    result = recurring.pause_schedule(
        request.conn, request.caller.workspace_id, key, request.now,
        reason=body.reason if body else None,
    )  # fmt: skip
    return _out(request, result.schedule)


@router.post(
    "/v1/recurring/<schedule_id>/resume",
    summary="Resume a paused schedule from now; missed occurrences follow the catch-up policy",
    responses=responses(200, ScheduleOut, "active (now or before)"),
)
def resume_schedule(schedule_id: str, workspace: WorkspaceHeader) -> ScheduleOut:
    request = scope(router)
    key = _schedule_id(schedule_id)
    result = recurring.resume_schedule(
        request.conn, request.caller.workspace_id, key, request.runtime.settings, request.now,
        limits=request.limits,
    )  # fmt: skip
    request.added(result.created)
    return _out(request, result.schedule)


@router.post(
    "/v1/recurring/<schedule_id>/end",
    summary="End a schedule for good: queued occurrences not yet due are cancelled (idempotent)",
    responses=responses(200, ScheduleOut, "ended (now or before)"),
)
def end_schedule(
    schedule_id: str, workspace: WorkspaceHeader, body: OptionalReason = None
) -> ScheduleOut:
    request = scope(router)
    key = _schedule_id(schedule_id)
    result = recurring.end_schedule(
        request.conn, request.caller.workspace_id, key, request.now,
        reason=body.reason if body else None,
    )  # fmt: skip
    return _out(request, result.schedule)


@router.post(
    "/v1/recurring/<schedule_id>/run-now",
    summary="Run a schedule once now: a linked one-off; the next occurrence does not move",
    responses=responses(200, ActionOut, "the one-off action (source run_now), due now"),
)
def run_now(schedule_id: str, workspace: WorkspaceHeader) -> ActionOut:
    request = scope(router)
    key = _schedule_id(schedule_id)
    action = recurring.run_now(
        request.conn, request.caller.workspace_id, key, request.runtime.settings, request.now,
        created_by=request.caller.user_id,
    )  # fmt: skip
    request.added([action.id])
    return ActionOut.of(action, request.caller.timezone)
