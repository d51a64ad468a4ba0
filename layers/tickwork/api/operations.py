"""/v1/operations (workspace admins): the operations view (this workspace's rows over the
last hours, the stack's queues, switches and warnings) and dead-letter redrive."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Query

from tickwork import operations
from tickwork.api.models import responses
from tickwork.api.operations_models import OperationsOut, RedriveIn, RedrivenOut, RedriveOut
from tickwork.api.scope import scope
from tickwork.platform.queues.admin import admin_of

router = Router()

WorkspaceHeader = Annotated[
    UUID, Header(alias="X-Workspace-Id", description="the workspace to act in")
]
OptionalRedrive = Annotated[
    RedriveIn | None, Body(description="optional: one action type's dead letters")
]


@router.get(
    "/v1/operations",
    summary="Operations (admins): backlog, lag and outcomes per type, queues, switches, warnings",
    responses=responses(200, OperationsOut, "the operations view"),
)
def get_operations(
    workspace: WorkspaceHeader,
    hours: Annotated[
        int,
        Query(
            ge=1,
            le=operations.MAX_HOURS,
            description="the window: the last this many hours, in buckets of 10 minutes (up"
            " to 6 hours), 30 minutes (up to 24) or an hour",
        ),
    ] = operations.DEFAULT_HOURS,
) -> OperationsOut:
    request = scope(router)
    request.caller.require_admin("see the operations view")
    settings = request.runtime.settings
    found = operations.gather(
        request.conn,
        request.caller.workspace_id,
        settings,
        admin_of(request.runtime.queues),
        hours=hours,
    )
    return OperationsOut.of(found, settings.clock_skew_tolerance_seconds)


@router.post(
    "/v1/operations/redrive",
    summary="Move dead letters back to their queues (admins), as `tickwork redrive` does",
    responses=responses(200, RedriveOut, "what was started or moved, per queue"),
)
def post_redrive(workspace: WorkspaceHeader, body: OptionalRedrive = None) -> RedriveOut:
    request = scope(router)
    request.caller.require_admin("redrive dead letters")
    admin = admin_of(request.runtime.queues)
    results = operations.redrive(
        admin, request.runtime.settings, body.action_type if body else None
    )
    return RedriveOut(
        source=admin.source if admin else None,
        redriven=[
            RedrivenOut(
                action_type=r.action_type,
                method=r.redriven.method if r.redriven else None,
                moved=r.redriven.moved if r.redriven else 0,
                task_handle=r.redriven.task_handle if r.redriven else None,
                error=r.error,
            )
            for r in results
        ],
    )
