"""/v1/digests: what digest rules collected, each digest with its window, items and action;
flush one (send it now) or cancel it (and its action) while it is still open."""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header, Query

from tickwork.api.digests_models import DigestDetail, DigestOut, DigestPage
from tickwork.api.models import responses
from tickwork.api.scope import scope
from tickwork.digests import store
from tickwork.platform import paging
from tickwork.platform.errors import NotFoundError

router = Router()

WorkspaceHeader = Annotated[
    UUID, Header(alias="X-Workspace-Id", description="the workspace to act in")
]
MAX_PAGE = 200


def _digest_id(raw: str) -> UUID:
    try:
        return UUID(raw)
    except ValueError as exc:
        raise NotFoundError(f"no digest {raw[:80]!r} in this workspace") from exc


@router.get(
    "/v1/digests",
    summary="List digests, newest first",
    responses=responses(200, DigestPage, "a page of digests, without their items"),
)
def list_digests(
    workspace: WorkspaceHeader,
    rule_id: Annotated[UUID | None, Query(description="the rule that collects")] = None,
    recipient_id: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    status: Annotated[Literal["open", "closed", "flushed", "cancelled"] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=300)] = None,
) -> DigestPage:
    request = scope(router)
    after = paging.decode_cursor(cursor) if cursor else None
    found = store.list_digests(
        request.conn, request.caller.workspace_id, limit=limit + 1, source_id=rule_id,
        recipient_id=recipient_id, state=status, after=after,
    )  # fmt: skip
    items = found[:limit]
    last = items[-1].digest if items else None
    return DigestPage(
        items=[DigestOut.of(view) for view in items],
        next_cursor=paging.encode_cursor(last.created_at, last.id)
        if len(found) > limit and last
        else None,
    )


@router.get(
    "/v1/digests/<digest_id>",
    summary="Get a digest: its window, its items in order and its action",
    responses=responses(200, DigestDetail, "the digest with its items"),
)
def get_digest(digest_id: str, workspace: WorkspaceHeader) -> DigestDetail:
    request = scope(router)
    workspace_id = request.caller.workspace_id
    view = store.get_digest(request.conn, workspace_id, _digest_id(digest_id))
    return DigestDetail.with_items(view, store.items_of(request.conn, workspace_id, view.digest.id))


@router.post(
    "/v1/digests/<digest_id>/flush",
    summary="Send an open digest now; later events open the next one",
    responses=responses(200, DigestDetail, "the digest, flushed, its action due now"),
)
def flush_digest(digest_id: str, workspace: WorkspaceHeader) -> DigestDetail:
    request = scope(router)
    workspace_id = request.caller.workspace_id
    view = store.flush(request.conn, workspace_id, _digest_id(digest_id), request.now)
    if view.digest.action_id is not None:
        request.hand_over([view.digest.action_id])
    return DigestDetail.with_items(view, store.items_of(request.conn, workspace_id, view.digest.id))


@router.post(
    "/v1/digests/<digest_id>/cancel",
    summary="Cancel an open digest and its action; later events open the next one",
    responses=responses(200, DigestDetail, "the digest, cancelled"),
)
def cancel_digest(digest_id: str, workspace: WorkspaceHeader) -> DigestDetail:
    request = scope(router)
    workspace_id = request.caller.workspace_id
    view = store.cancel(request.conn, workspace_id, _digest_id(digest_id))
    return DigestDetail.with_items(view, store.items_of(request.conn, workspace_id, view.digest.id))
