"""/v1/things/{thing_id}/intent: declare what the app wants for a thing; the reconciler
keeps the thing's actions in step with it (and does so at once on every write)."""

from __future__ import annotations

from datetime import date, time
from typing import Annotated
from uuid import UUID

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header

from tickwork.api.models import (
    ActionOut,
    IntentIn,
    IntentOut,
    ReconcileOut,
    ResolvedOut,
    responses,
)
from tickwork.api.scope import RequestScope, scope
from tickwork.intents import store as intents
from tickwork.intents.store import IntentInput, IntentResult, IntentView
from tickwork.platform.errors import NotFoundError
from tickwork.platform.wallclock import describe_resolution, local_rendering

router = Router()

WorkspaceHeader = Annotated[
    UUID, Header(alias="X-Workspace-Id", description="the workspace to act in")
]
PATH = "/v1/things/<thing_id>/intent"


def _out(request: RequestScope, view: IntentView) -> IntentOut:
    intent, tz = view.intent, request.caller.timezone
    reconciled = None
    if isinstance(view, IntentResult):
        done = view.reconciled
        reconciled = ReconcileOut(
            inserted=done.inserted,
            moved=done.moved,
            cancelled=done.cancelled,
            skipped={str(gate): n for gate, n in done.skipped.items()},
            conflicts=done.conflicts,
        )
    return IntentOut(
        thing_id=intent.thing_id, action_type=intent.action_type, targets=list(intent.targets),
        state=intent.state,
        date=intent.wall_date.isoformat() if intent.wall_date else None,
        time=intent.wall_time.isoformat() if intent.wall_time else None,
        timezone=intent.timezone, timezone_from=view.timezone_from,
        recipient_id=intent.recipient_id, transactional=intent.transactional,
        publish_at=intent.publish_at, resolved_at=view.instant,
        resolved_at_local=local_rendering(view.instant, tz) if view.instant else None,
        payload=intent.payload, version=intent.version, updated_at=intent.updated_at,
        actions=[ActionOut.of(action, tz) for action in view.actions], reconciled=reconciled,
        resolved=_resolved(intent.wall_date, intent.wall_time, view.zone),
    )  # fmt: skip


def _resolved(day: date | None, clock: time | None, zone_name: str | None) -> ResolvedOut | None:
    """How the intent's wall time is read in its zone (moved, or the first of two)."""
    if day is None or clock is None or zone_name is None:
        return None
    found = describe_resolution(day.isoformat(), clock.isoformat(), zone_name)
    return ResolvedOut.model_validate(found, from_attributes=True)


@router.put(
    PATH,
    summary="Declare or change the schedule intent of a thing",
    responses=responses(201, IntentOut, "declared; the thing's actions follow it")
    | responses(200, IntentOut, "changed (or unchanged); the thing's actions follow it"),
)
def put_intent(thing_id: str, body: IntentIn, workspace: WorkspaceHeader) -> Response[IntentOut]:
    request = scope(router)
    given = IntentInput(
        action_type=body.action_type, targets=body.targets, wall_date=body.date,
        wall_time=body.time, timezone=body.timezone, publish_at=body.publish_at,
        payload=body.payload, state=body.state, recipient_id=body.recipient_id,
        transactional=body.transactional,
    )  # fmt: skip
    result = intents.declare_intent(
        request.conn, request.caller.workspace_id, thing_id, given, request.runtime.settings,
        request.now, updated_by=request.caller.user_id,
    )  # fmt: skip
    # Moved rows are made anew (cancel + insert): the rate counts them, the active count
    # stays as it was.
    request.made(result.reconciled.inserted + result.reconciled.moved)
    if result.reconciled.inserted:
        request.added_actions()
    request.hand_over(action.id for action in result.active)
    return Response(
        status_code=201 if result.created else 200,
        content_type=content_types.APPLICATION_JSON,
        body=_out(request, result),
    )


@router.get(
    PATH,
    summary="A thing's schedule intent, with the actions it maps to",
    responses=responses(200, IntentOut, "the intent and every action of the thing"),
)
def get_intent(thing_id: str, workspace: WorkspaceHeader) -> IntentOut:
    request = scope(router)
    view = intents.get_intent(request.conn, request.caller.workspace_id, thing_id)
    if view is None:
        raise NotFoundError(f"no schedule intent for thing {thing_id!r} in this workspace")
    return _out(request, view)


@router.delete(
    PATH,
    summary="Unschedule a thing: its queued actions are cancelled (the gates permitting)",
    responses=responses(200, IntentOut, "the intent, now unscheduled"),
)
def delete_intent(thing_id: str, workspace: WorkspaceHeader) -> IntentOut:
    request = scope(router)
    result = intents.unschedule_intent(
        request.conn, request.caller.workspace_id, thing_id, request.runtime.settings,
        updated_by=request.caller.user_id,
    )  # fmt: skip
    return _out(request, result)
