"""/v1/workspace: the caller's workspace, its zone and settings, and its limits (read-only:
an operator sets them)."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header

from tickwork import calendar, workspaces
from tickwork.api.models import (
    LagOut,
    LimitsOut,
    RetentionOut,
    StatsOut,
    StatusCount,
    WorkspaceOut,
    WorkspacePatch,
    responses,
)
from tickwork.api.scope import scope
from tickwork.platform.wallclock import local_rendering, zone
from tickwork.workspaces import UNSET

router = Router()

WorkspaceHeader = Annotated[
    UUID, Header(alias="X-Workspace-Id", description="the workspace to act in")
]


def _out(found: workspaces.Workspace) -> WorkspaceOut:
    request = scope(router)
    return WorkspaceOut(
        id=found.id,
        name=found.name,
        timezone=found.timezone,
        role=request.caller.role,
        settings=found.settings,
        limits=LimitsOut(**request.limits.as_dict()),
        retention=RetentionOut(
            days=found.retention_days or request.runtime.settings.retention_days,
            own_days=found.retention_days,
            default_days=request.runtime.settings.retention_days,
            legal_hold=found.legal_hold,
        ),
        now_local=local_rendering(request.now, zone(found.timezone)),
        created_at=found.created_at,
        updated_at=found.updated_at,
    )


@router.get(
    "/v1/workspace",
    summary="The workspace: zone, settings and limits",
    responses=responses(200, WorkspaceOut, "the workspace"),
)
def get_workspace(workspace: WorkspaceHeader) -> WorkspaceOut:
    return _out(workspaces.current(scope(router).conn))


@router.patch(
    "/v1/workspace",
    summary="Change the workspace's name, zone or settings (admins)",
    responses=responses(200, WorkspaceOut, "the workspace as changed"),
)
def patch_workspace(body: WorkspacePatch, workspace: WorkspaceHeader) -> WorkspaceOut:
    request = scope(router)
    request.caller.require_admin("change the workspace")
    updated = workspaces.update(
        request.conn,
        name=body.name,
        timezone=body.timezone,
        settings=body.settings,
        retention_days=body.retention_days if "retention_days" in body.model_fields_set else UNSET,
        legal_hold=body.legal_hold,
    )
    return _out(updated)


@router.get(
    "/v1/stats",
    summary="Counts by status and type, backlog, and recent lag",
    responses=responses(200, StatsOut, "the numbers"),
)
def get_stats(workspace: WorkspaceHeader) -> StatsOut:
    request = scope(router)
    found = calendar.stats(request.conn, request.caller.workspace_id)
    return StatsOut(
        counts=[StatusCount(**row) for row in found.counts],
        due_backlog=found.due_backlog,
        oldest_due_age_seconds=found.oldest_due_age_seconds,
        lag_sample=found.lag_sample,
        lag_ms=LagOut(**found.lag_ms) if found.lag_ms else None,
    )
