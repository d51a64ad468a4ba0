"""/v1/recipients: the people messages go to, with their zone, quiet hours and caps."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header, Query

from tickwork.api.models import responses
from tickwork.api.scope import RequestScope, scope
from tickwork.api.sequences_models import RecipientIn, RecipientOut, RecipientPage
from tickwork.platform.db import Connection
from tickwork.recipients import store
from tickwork.recipients.model import local_day
from tickwork.recipients.store import RecipientInput, StoredRecipient

router = Router()

WorkspaceHeader = Annotated[
    UUID, Header(alias="X-Workspace-Id", description="the workspace to act in")
]
MAX_PAGE = 200


def _out(
    conn: Connection, workspace_id: UUID, stored: StoredRecipient, now: datetime
) -> RecipientOut:
    today = local_day(now, stored.recipient)
    counts = store.counts(conn, workspace_id, stored.recipient.recipient_id, today)
    sent = {channel: n for channel, day, n in counts if day == today}
    return RecipientOut.of(stored, now, sent)


def _request_out(request: RequestScope, stored: StoredRecipient) -> RecipientOut:
    return _out(request.conn, request.caller.workspace_id, stored, request.now)


@router.put(
    "/v1/recipients/<recipient_id>",
    summary="Create or replace a recipient",
    responses=responses(201, RecipientOut, "created") | responses(200, RecipientOut, "replaced"),
)
def put_recipient(
    recipient_id: str, body: RecipientIn, workspace: WorkspaceHeader
) -> Response[RecipientOut]:
    request = scope(router)
    given = RecipientInput(
        timezone=body.timezone,
        quiet_hours=[w.model_dump() for w in body.quiet_hours],
        caps=body.caps,
        cap_policy=body.cap_policy,
    )
    stored = store.put_recipient(
        request.conn, request.caller.workspace_id, recipient_id, given, request.runtime.settings,
        limits=request.limits,
    )  # fmt: skip
    return Response(
        status_code=201 if stored.created else 200,
        content_type=content_types.APPLICATION_JSON,
        body=_request_out(request, stored),
    )


@router.get(
    "/v1/recipients/<recipient_id>",
    summary="Get a recipient, with what they were sent today",
    responses=responses(200, RecipientOut, "it"),
)
def get_recipient(recipient_id: str, workspace: WorkspaceHeader) -> RecipientOut:
    request = scope(router)
    return _request_out(
        request, store.get_recipient(request.conn, request.caller.workspace_id, recipient_id)
    )


@router.get(
    "/v1/recipients",
    summary="List recipients",
    responses=responses(200, RecipientPage, "a page of recipients by id"),
)
def list_recipients(
    workspace: WorkspaceHeader,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> RecipientPage:
    request = scope(router)
    found = store.list_recipients(
        request.conn, request.caller.workspace_id, limit=limit + 1, after=cursor
    )
    items = found[:limit]
    return RecipientPage(
        items=[_request_out(request, r) for r in items],
        next_cursor=items[-1].recipient.recipient_id if items and len(found) > limit else None,
    )


@router.delete(
    "/v1/recipients/<recipient_id>",
    summary="Delete a recipient who has no enrollments",
    responses=responses(204, RecipientOut, "deleted"),
)
def delete_recipient(recipient_id: str, workspace: WorkspaceHeader) -> Response[str]:
    request = scope(router)
    store.delete_recipient(request.conn, request.caller.workspace_id, recipient_id)
    return Response(status_code=204, content_type=content_types.APPLICATION_JSON, body="")
