"""/v1/actions: schedule, read, list, explain (why), cancel, reschedule, retry, send now;
cancel and retry in bulk (the actions matching a filter, a bounded batch a call)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header, Query

from tickwork import calendar, changes
from tickwork.actions import bulk, model, scheduling, store, why
from tickwork.actions.model import MAX_TAG_LENGTH, Action, NewAction
from tickwork.api.models import (
    ActionOut,
    ActionPage,
    BucketCountOut,
    BulkCancelIn,
    BulkCancelOut,
    BulkOut,
    BulkRetryIn,
    CalendarRange,
    CalendarSummaryOut,
    CreateAction,
    GlimpseOut,
    Instant,
    Reschedule,
    ResolvedOut,
    TimezoneFrom,
    When,
    WhyOut,
    WhyStepOut,
    responses,
)
from tickwork.api.scope import RequestScope, scope
from tickwork.api.sequences_models import ActionDetailOut, AttemptOut, ChangeOut, ResolveOut
from tickwork.digests.store import digest_of_action
from tickwork.engine.resolver import resolve_one, retention_of
from tickwork.ledger.attempts import attempts_of
from tickwork.platform.errors import ConflictError, NotFoundError
from tickwork.platform.wallclock import describe_resolution, instant_of, zone
from tickwork.recipients.policy import zone_for
from tickwork.recurring import store as recurring
from tickwork.sequences import store as sequences

router = Router()

WorkspaceHeader = Annotated[
    UUID, Header(alias="X-Workspace-Id", description="the workspace to act in")
]
StatusFilter = Literal["queued", "submitted", "published", "failed", "cancelled"]


def _out(request: RequestScope, action: Action) -> ActionOut:
    return ActionOut.of(action, request.caller.timezone)


@dataclass(frozen=True)
class _Reading:
    """How a request's time is read: the instant, and for a wall time the zone it is read
    in (the one given; else the recipient's, when there is one; else the workspace's) and
    where that zone came from."""

    instant: datetime
    zone: str | None = None
    timezone_from: TimezoneFrom | None = None

    def answer(self, when: When) -> dict[str, object]:
        """What the answer adds: how a wall time was read (nothing for an instant)."""
        if when.date is None or when.time is None or self.zone is None:
            return {}
        found = describe_resolution(when.date, when.time, self.zone)
        resolved = ResolvedOut.model_validate(found, from_attributes=True)
        return {"resolved": resolved, "timezone_from": self.timezone_from}


def _read(request: RequestScope, when: When, recipient_id: str | None) -> _Reading:
    if when.date is None or when.time is None:
        return _Reading(instant_of(when.publish_at, None, None, None, "UTC"))
    zone_name, origin = zone_for(
        request.conn, request.caller.workspace_id, given=when.timezone,
        recipient_id=recipient_id, workspace_zone=request.caller.timezone.key,
    )  # fmt: skip
    return _Reading(instant_of(None, when.date, when.time, zone_name, zone_name), zone_name, origin)


def _action_id(raw: str) -> UUID:
    try:
        return UUID(raw)
    except ValueError as exc:
        raise NotFoundError(f"no action {raw!r} in this workspace") from exc


def _move(
    request: RequestScope, action_id: str, publish_at: datetime, verb: str, source: str | None,
    answer: dict[str, object] | None = None, timezone: str | None = None,
) -> ActionOut:  # fmt: skip
    """Cancel a queued action and schedule its replacement at `publish_at` (lineage kept)."""
    key = _action_id(action_id)
    transition, replacement = scheduling.reschedule(
        request.conn, request.caller.workspace_id, key, publish_at, request.runtime.settings,
        request.now, source=source, created_by=request.caller.user_id, timezone=timezone,
    )  # fmt: skip
    model.expect(transition, key, verb, "queued")
    assert replacement is not None
    request.replaced([replacement.id])
    return _out(request, replacement).model_copy(update=answer or {})


@router.post(
    "/v1/actions",
    summary="Schedule an action",
    responses=responses(201, ActionOut, "scheduled")
    | responses(200, ActionOut, "an earlier request with this Idempotency-Key made it"),
)
def create_action(
    body: CreateAction,
    workspace: WorkspaceHeader,
    idempotency_key: Annotated[
        str | None,
        Header(alias="Idempotency-Key", max_length=200, description="retry-safe creation"),
    ] = None,
) -> Response[ActionOut]:
    request = scope(router)
    reading = _read(request, body, body.recipient_id)
    new = NewAction(
        action_type=body.action_type,
        target_key=body.target_key,
        thing_id=body.thing_id,
        payload=body.payload,
        publish_at=reading.instant,
        dedupe_key=idempotency_key,
        created_by=request.caller.user_id,
        connection_id=body.connection_id,
        recipient_id=body.recipient_id,
        transactional=body.transactional,
        timezone=reading.zone,
        tags=tuple(body.tags),
    )
    result = scheduling.schedule_once(
        request.conn, request.caller.workspace_id, new, request.runtime.settings, request.now
    )
    if result.created:
        request.added([result.action.id])
    return Response(
        status_code=201 if result.created else 200,
        content_type=content_types.APPLICATION_JSON,
        body=_out(request, result.action).model_copy(update=reading.answer(body)),
    )


@router.get(
    "/v1/actions",
    summary="List actions in a time range (the calendar)",
    responses=responses(200, ActionPage, "a page of actions in (publish_at, id) order"),
)
def list_actions(
    workspace: WorkspaceHeader,
    start: Annotated[
        Instant | None,
        Query(alias="from", description="inclusive, RFC 3339; default: 24 hours ago"),
    ] = None,
    end: Annotated[
        Instant | None,
        Query(alias="to", description="exclusive, RFC 3339; default: from + 31 days"),
    ] = None,
    status: Annotated[StatusFilter | None, Query()] = None,
    action_type: Annotated[str | None, Query(max_length=63)] = None,
    thing_id: Annotated[str | None, Query(max_length=200)] = None,
    error_code: Annotated[str | None, Query(max_length=100)] = None,
    target_key: Annotated[str | None, Query(max_length=200)] = None,
    tag: Annotated[
        str | None, Query(max_length=MAX_TAG_LENGTH, description="only actions with this tag")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=calendar.MAX_PAGE)] = 100,
    cursor: Annotated[str | None, Query(max_length=300)] = None,
) -> ActionPage:
    request = scope(router)
    start, end = calendar.default_range(start, end, request.now)
    page = calendar.list_actions(
        request.conn, request.caller.workspace_id, start, end, status=status,
        action_type=action_type, thing_id=thing_id, error_code=error_code,
        target_key=target_key, tag=tag, limit=limit, cursor=cursor,
    )  # fmt: skip
    return ActionPage(
        items=[_out(request, a) for a in page.items],
        next_cursor=page.next_cursor,
        range=CalendarRange.model_validate({"from": start, "to": end}),
    )


@router.get(
    "/v1/calendar",
    summary="The calendar by local day or hour: counts by status and each one's first actions",
    responses=responses(200, CalendarSummaryOut, "the days or hours that hold actions"),
)
def calendar_summary(
    workspace: WorkspaceHeader,
    start: Annotated[Instant, Query(alias="from", description="inclusive, RFC 3339")],
    end: Annotated[Instant, Query(alias="to", description="exclusive, RFC 3339")],
    timezone: Annotated[str | None, Query(max_length=64)] = None,
    unit: Annotated[Literal["day", "hour"], Query()] = "day",
    per_bucket: Annotated[int, Query(ge=0, le=calendar.MAX_PER_BUCKET)] = 3,
    status: Annotated[StatusFilter | None, Query()] = None,
    action_type: Annotated[str | None, Query(max_length=63)] = None,
    projected: Annotated[
        bool,
        Query(
            description="count the occurrences active recurring schedules will make beyond"
            " the rows made so far (status `projected`; not with a `status` filter)"
        ),
    ] = True,
) -> CalendarSummaryOut:
    """What a calendar draws, whatever the range holds: a month of 10,000 actions is one
    call. `timezone` (default the workspace's) says whose days and hours. Recurring
    schedules' occurrences beyond the 14 days the expander has made count as `projected`."""
    request = scope(router)
    name = timezone or request.caller.timezone.key
    zone(name)
    found = calendar.summary(
        request.conn, request.caller.workspace_id, start, end, zone=name, unit=unit,
        per_bucket=per_bucket, status=status, action_type=action_type,
        projected_from=request.now if projected else None,
    )  # fmt: skip
    return CalendarSummaryOut(
        timezone=name,
        unit=unit,
        range=CalendarRange.model_validate({"from": start, "to": end}),
        buckets=[
            BucketCountOut(
                start=b.start.isoformat(),
                total=b.total,
                counts=b.counts,
                items=[GlimpseOut.of(item) for item in b.items],
            )
            for b in found.buckets
        ],
        projection_complete=found.projection_complete,
    )


@router.get(
    "/v1/actions/<action_id>",
    summary="Get one action, with its change log and its provider calls (the ledger)",
    responses=responses(200, ActionDetailOut, "it"),
)
def get_action(action_id: str, workspace: WorkspaceHeader) -> ActionDetailOut:
    request = scope(router)
    found = store.get(request.conn, request.caller.workspace_id, _action_id(action_id))
    if found is None:
        raise NotFoundError(f"no action {action_id} in this workspace")
    log = changes.changes_of(request.conn, request.caller.workspace_id, found.id)
    calls = attempts_of(request.conn, request.caller.workspace_id, found.id)
    attempts = [AttemptOut.of(a) for a in calls]
    digest = digest_of_action(request.conn, request.caller.workspace_id, found.id)
    return ActionDetailOut(
        **_out(request, found).model_dump(),
        changes=[ChangeOut.of(c) for c in log],
        attempts=attempts,
        delivery=next((a.delivery for a in reversed(attempts) if a.delivery), None),
        digest_id=digest.digest.id if digest else None,
    )


@router.get(
    "/v1/actions/<action_id>/why",
    summary="Why an action is where it is (why not yet?): its status and the steps that tell it",
    responses=responses(200, WhyOut, "its status, and its history then where it stands"),
)
def why_action(
    action_id: str,
    workspace: WorkspaceHeader,
    timezone: Annotated[
        str | None,
        Query(
            max_length=64,
            description="the zone the sentences give every time in (the viewer's); default:"
            " the zone the action was scheduled in, else the workspace's",
        ),
    ] = None,
) -> WhyOut:
    request = scope(router)
    viewer = zone(timezone) if timezone is not None else None
    facts = why.read(request.conn, request.caller.workspace_id, _action_id(action_id))
    if facts is None:
        raise NotFoundError(f"no action {action_id} in this workspace")
    retention = None
    if why.needs_resolver(facts.action):
        retention = retention_of(request.conn, request.runtime, facts.action)
    shown = viewer or why.sentence_zone(facts.action, request.caller.timezone)
    steps = why.explain(
        facts, request.runtime.settings, request.now, request.caller.timezone,
        lookup_retention=retention, viewer=shown,
    )  # fmt: skip
    return WhyOut(
        id=facts.action.id, status=facts.action.status, as_of=request.now, timezone=shown.key,
        steps=[WhyStepOut.of(s) for s in steps],
    )  # fmt: skip


@router.post(
    "/v1/actions/<action_id>/cancel",
    summary="Cancel a queued action (idempotent)",
    responses=responses(200, ActionOut, "cancelled (now or before)"),
)
def cancel_action(action_id: str, workspace: WorkspaceHeader) -> ActionOut:
    request = scope(router)
    key = _action_id(action_id)
    transition = store.cancel(request.conn, request.caller.workspace_id, key)
    return _out(request, model.expect(transition, key, "cancelled", "queued", done="cancelled"))


@router.post(
    "/v1/actions/<action_id>/reschedule",
    summary="Move a queued action: cancels it and schedules a linked copy",
    responses=responses(200, ActionOut, "the new action; rescheduled_from names the old one"),
)
def reschedule_action(action_id: str, body: Reschedule, workspace: WorkspaceHeader) -> ActionOut:
    request = scope(router)
    recipient_id = None
    if body.date is not None and body.timezone is None:
        # A wall time with no zone is read in the action's recipient's zone, if it has one.
        found = store.get(request.conn, request.caller.workspace_id, _action_id(action_id))
        recipient_id = found.recipient_id if found is not None else None
    reading = _read(request, body, recipient_id)
    return _move(
        request, action_id, reading.instant, "rescheduled", source=None,
        answer=reading.answer(body), timezone=reading.zone,
    )  # fmt: skip


@router.post(
    "/v1/actions/<action_id>/send-now",
    summary="Send a queued action now",
    responses=responses(200, ActionOut, "the new action, due now; rescheduled_from links it"),
)
def send_now(action_id: str, workspace: WorkspaceHeader) -> ActionOut:
    request = scope(router)
    return _move(request, action_id, request.now, "sent now", source="send_now")


@router.post(
    "/v1/actions/<action_id>/retry",
    summary="Retry a failed action on the same row (admins; at most 5 times)",
    responses=responses(200, ActionOut, "queued again, due now"),
)
def retry_action(action_id: str, workspace: WorkspaceHeader) -> ActionOut:
    request = scope(router)
    request.caller.require_admin("retry an action")
    key = _action_id(action_id)
    settings = request.runtime.settings
    transition = store.retry(request.conn, request.caller.workspace_id, key, settings)
    retried = model.expect_retried(transition, key)
    # Back to queued on the same row: it counts as active again, but it is no new action.
    request.added_actions()
    request.hand_over([retried.id])
    return _out(request, retried)


@router.post(
    "/v1/actions/bulk-cancel",
    summary="Cancel the queued actions matching a filter, a bounded batch a call",
    responses=responses(
        200, BulkCancelOut, "what this call did, the schedules it paused, where to go on from"
    ),
)
def bulk_cancel(body: BulkCancelIn, workspace: WorkspaceHeader) -> BulkCancelOut:
    request = scope(router)
    where = body.where()
    workspace_id, actor = request.caller.workspace_id, request.caller.user_id

    def exits(limit: int) -> bulk.Exits:
        return sequences.exit_active(
            request.conn, workspace_id, campaign_id=where.campaign_id,
            recipient_id=where.recipient_id, limit=limit, reason="bulk cancel", actor=actor,
        )  # fmt: skip

    def pauses(limit: int) -> list[UUID]:
        return recurring.pause_of_parent(
            request.conn, workspace_id, tag=where.tag, recipient_id=where.recipient_id,
            action_type=where.action_type, target_key=where.target_key,
            thing_id=where.thing_id, actor=actor, now=request.now, limit=limit,
        )  # fmt: skip

    result = bulk.cancel_matching(
        request.conn, workspace_id, where, status=body.status, limit=body.limit,
        after=body.after, exits=exits, pauses=pauses,
    )  # fmt: skip
    return BulkCancelOut.of(result)


@router.post(
    "/v1/actions/bulk-retry",
    summary="Retry the failed actions matching a filter, a bounded batch a call (admins)",
    responses=responses(200, BulkOut, "what this call did, and where to go on from"),
)
def bulk_retry(body: BulkRetryIn, workspace: WorkspaceHeader) -> BulkOut:
    request = scope(router)
    request.caller.require_admin("retry actions")
    result = bulk.retry_matching(
        request.conn, request.caller.workspace_id, body.where(), request.runtime.settings,
        status=body.status, limit=body.limit, after=body.after,
    )  # fmt: skip
    if result.changed_ids:
        # Back to queued on the same rows, as a single retry: active again, no new actions.
        request.added_actions()
        request.hand_over(result.changed_ids)
    return BulkOut.of(result)


@router.post(
    "/v1/actions/<action_id>/resolve",
    summary="Ask the provider whether a failed ambiguous or stuck action arrived (admins)",
    responses=responses(200, ResolveOut, "what the provider said and what became of the row"),
)
def resolve_action(action_id: str, workspace: WorkspaceHeader) -> ResolveOut:
    request = scope(router)
    request.caller.require_admin("resolve an action")
    key = _action_id(action_id)
    found = store.get(request.conn, request.caller.workspace_id, key)
    if found is None:
        raise NotFoundError(f"no action {action_id} in this workspace")
    result = resolve_one(request.conn, request.runtime, found)
    if isinstance(result, str):
        raise ConflictError(
            result, details={"status": found.status, "error_code": found.error_code}
        )
    if result.verdict == "requeued":
        request.hand_over([key])
    after = store.get(request.conn, request.caller.workspace_id, key)
    assert after is not None
    return ResolveOut(verdict=result.verdict, detail=result.detail, action=_out(request, after))
