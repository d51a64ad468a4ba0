"""/v1/suppressions: the workspace's addresses that must not be messaged. The claim cancels a
message to one of them (`suppressed`) before any provider sees it. Anyone in the workspace
adds, reads and removes entries; removing a complaint takes an admin."""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header, Query

from tickwork import quotas
from tickwork.api.models import responses
from tickwork.api.scope import scope as request_scope
from tickwork.api.suppression_models import SuppressionIn, SuppressionOut, SuppressionPage
from tickwork.platform.errors import NotFoundError
from tickwork.suppression import store
from tickwork.suppression.model import REASONS, Reason, check_scope, normalize_address

router = Router()

WorkspaceHeader = Annotated[
    UUID, Header(alias="X-Workspace-Id", description="the workspace to act in")
]
ScopeQuery = Annotated[str, Query(max_length=50, description="`all`, `campaign:<id>`, `rule:<id>`")]
MAX_PAGE = 200


@router.post(
    "/v1/suppressions",
    summary="Suppress an address (a second add keeps the first reason)",
    responses=responses(201, SuppressionOut, "added")
    | responses(200, SuppressionOut, "already suppressed: the entry as it is"),
)
def add_suppression(body: SuppressionIn, workspace: WorkspaceHeader) -> Response[SuppressionOut]:
    request = request_scope(router)
    workspace_id = request.caller.workspace_id
    address = normalize_address(body.channel, body.address)
    scope = check_scope(body.scope)
    created = store.suppress(
        request.conn, workspace_id, body.channel, address, body.reason,
        f"user:{request.caller.user_id}", body.detail, scope=scope,
    )  # fmt: skip
    if created:
        quotas.check_suppressions(request.conn, workspace_id, request.limits)
    entry = store.find_suppression(request.conn, workspace_id, body.channel, address, scope)
    if entry is None:  # pragma: no cover - removed in between
        raise NotFoundError("the entry was removed meanwhile")
    return Response(
        status_code=201 if created else 200,
        content_type=content_types.APPLICATION_JSON,
        body=SuppressionOut.of(entry),
    )


@router.get(
    "/v1/suppressions",
    summary="List suppressed addresses, newest first",
    responses=responses(200, SuppressionPage, "a page of entries"),
)
def list_suppressions(
    workspace: WorkspaceHeader,
    channel: Annotated[Literal["email", "sms"] | None, Query()] = None,
    reason: Annotated[Reason | None, Query(description=", ".join(REASONS))] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    # (a cursor holds an address: under 600 characters for any ASCII one, and a longer value
    # is refused 422 before its percent-encoding could pass the request-line limit, 431)
    cursor: Annotated[str | None, Query(max_length=600)] = None,
) -> SuppressionPage:
    request = request_scope(router)
    page = store.list_suppressions(
        request.conn, request.caller.workspace_id, channel=channel, reason=reason, limit=limit,
        cursor=cursor,
    )  # fmt: skip
    return SuppressionPage(
        items=[SuppressionOut.of(e) for e in page.items], next_cursor=page.next_cursor
    )


@router.get(
    "/v1/suppressions/<channel>/<address>",
    summary="Whether an address is suppressed (404 when it is not)",
    responses=responses(200, SuppressionOut, "the entry"),
)
def get_suppression(
    channel: str, address: str, workspace: WorkspaceHeader, scope: ScopeQuery = "all"
) -> SuppressionOut:
    request = request_scope(router)
    normalized = normalize_address(channel, address)
    entry = store.find_suppression(
        request.conn, request.caller.workspace_id, channel, normalized, check_scope(scope)
    )
    if entry is None:
        raise NotFoundError(f"{channel} {normalized!r} is not suppressed (scope {scope})")
    return SuppressionOut.of(entry)


@router.delete(
    "/v1/suppressions/<channel>/<address>",
    summary="Remove an address from the list (a complaint: admins only)",
    responses=responses(200, SuppressionOut, "the entry removed"),
)
def remove_suppression(
    channel: str, address: str, workspace: WorkspaceHeader, scope: ScopeQuery = "all"
) -> SuppressionOut:
    request = request_scope(router)
    removed = store.remove_suppression(
        request.conn, request.caller.workspace_id, channel, address, check_scope(scope),
        may_remove_complaint=request.caller.is_admin,
    )  # fmt: skip
    return SuppressionOut.of(removed)
