"""/v1/enrollments/{id}: one enrollment with its steps; its data (read by steps' conditions
when they fire); its exit."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header

from tickwork.api.campaigns import enrollment_out, parse_id
from tickwork.api.models import responses
from tickwork.api.scope import scope
from tickwork.api.sequences_models import DataIn, EnrollmentOut, ExitIn
from tickwork.sequences import store

router = Router()

WorkspaceHeader = Annotated[
    UUID, Header(alias="X-Workspace-Id", description="the workspace to act in")
]


@router.get(
    "/v1/enrollments/<enrollment_id>",
    summary="Get an enrollment with every step made so far",
    responses=responses(200, EnrollmentOut, "it"),
)
def get_enrollment(enrollment_id: str, workspace: WorkspaceHeader) -> EnrollmentOut:
    request = scope(router)
    return enrollment_out(request, parse_id(enrollment_id, "enrollment"))


@router.put(
    "/v1/enrollments/<enrollment_id>/data",
    summary="Replace an enrollment's data (steps check their conditions on it when they fire)",
    responses=responses(200, EnrollmentOut, "the enrollment with its new data"),
)
def put_data(enrollment_id: str, body: DataIn, workspace: WorkspaceHeader) -> EnrollmentOut:
    request = scope(router)
    key = parse_id(enrollment_id, "enrollment")
    store.update_data(request.conn, request.caller.workspace_id, key, body.data)
    return enrollment_out(request, key)


@router.post(
    "/v1/enrollments/<enrollment_id>/exit",
    summary="Exit an enrollment: its pending step is cancelled at once (idempotent)",
    responses=responses(200, EnrollmentOut, "exited; exit_outcome says what became of the step"),
)
def exit_enrollment(
    enrollment_id: str, workspace: WorkspaceHeader, body: ExitIn | None = None
) -> EnrollmentOut:
    request = scope(router)
    key = parse_id(enrollment_id, "enrollment")
    reason = body.reason if body is not None else "exited"
    store.exit_enrollment(
        request.conn, request.caller.workspace_id, key, reason, request.caller.user_id
    )
    return enrollment_out(request, key)
