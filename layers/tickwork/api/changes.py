"""/v1/changes: the change log of the workspace's actions, oldest first."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header, Query

from tickwork import changes
from tickwork.api.models import responses
from tickwork.api.scope import scope
from tickwork.api.sequences_models import ChangeKind, ChangeOut, ChangePage
from tickwork.platform.errors import InputError
from tickwork.sequences.store import get_enrollment

router = Router()

WorkspaceHeader = Annotated[
    UUID, Header(alias="X-Workspace-Id", description="the workspace to act in")
]
MAX_PAGE = 500


@router.get(
    "/v1/changes",
    summary="Every cancel, reschedule, defer, quiet-hours move, skip, drop, exit, digest and flush",
    responses=responses(200, ChangePage, "a page of changes, oldest first"),
)
def list_changes(
    workspace: WorkspaceHeader,
    kind: Annotated[ChangeKind | None, Query()] = None,
    enrollment_id: Annotated[UUID | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    cursor: Annotated[str | None, Query(max_length=20)] = None,
) -> ChangePage:
    request = scope(router)
    # A change's id is a bigint: a longer number is no cursor this endpoint returned.
    if cursor is not None and not (cursor.isascii() and cursor.isdigit() and len(cursor) < 19):
        raise InputError("cursor must be a next_cursor this endpoint returned", field="cursor")
    if enrollment_id is not None:
        # The change log of an enrollment that is not there is a 404, not an empty list.
        get_enrollment(request.conn, request.caller.workspace_id, enrollment_id)
    found = changes.list_changes(
        request.conn, request.caller.workspace_id, limit=limit + 1,
        after=int(cursor) if cursor else None, kind=kind, enrollment_id=enrollment_id,
    )  # fmt: skip
    items = found[:limit]
    return ChangePage(
        items=[ChangeOut.of(c) for c in items],
        next_cursor=str(items[-1].id) if items and len(found) > limit else None,
    )
