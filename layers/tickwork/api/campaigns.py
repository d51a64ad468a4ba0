"""/v1/campaigns: drip campaigns (create, list, get) and enrolling recipients in them."""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header, Query

from tickwork.api.models import responses
from tickwork.api.scope import RequestScope, scope
from tickwork.api.sequences_models import (
    CampaignIn,
    CampaignOut,
    CampaignPage,
    EnrollIn,
    EnrollmentOut,
    EnrollmentPage,
)
from tickwork.platform import paging
from tickwork.platform.errors import NotFoundError
from tickwork.sequences import store
from tickwork.sequences.model import CampaignInput

router = Router()

WorkspaceHeader = Annotated[
    UUID, Header(alias="X-Workspace-Id", description="the workspace to act in")
]
MAX_PAGE = 200


def parse_id(raw: str, what: str) -> UUID:
    try:
        return UUID(raw)
    except ValueError as exc:
        raise NotFoundError(f"no {what} {raw[:80]!r} in this workspace") from exc


def enrollment_out(request: RequestScope, enrollment_id: UUID) -> EnrollmentOut:
    found = store.get_enrollment(request.conn, request.caller.workspace_id, enrollment_id)
    return EnrollmentOut.of(found, store.enrollment_actions(request.conn, found.id))


@router.post(
    "/v1/campaigns",
    summary="Create a drip campaign (its steps are fixed once made)",
    responses=responses(201, CampaignOut, "created"),
)
def create_campaign(body: CampaignIn, workspace: WorkspaceHeader) -> Response[CampaignOut]:
    request = scope(router)
    given = CampaignInput(
        name=body.name, steps=[s.domain() for s in body.steps], exit_events=body.exit_events,
        cap_policy=body.cap_policy,
    )  # fmt: skip
    made = store.create_campaign(
        request.conn, request.caller.workspace_id, given, request.runtime.settings,
        request.caller.user_id,
    )  # fmt: skip
    return Response(
        status_code=201, content_type=content_types.APPLICATION_JSON, body=CampaignOut.of(made)
    )


@router.get(
    "/v1/campaigns",
    summary="List campaigns",
    responses=responses(200, CampaignPage, "a page of campaigns, oldest first"),
)
def list_campaigns(
    workspace: WorkspaceHeader,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=300)] = None,
) -> CampaignPage:
    request = scope(router)
    after = paging.decode_cursor(cursor) if cursor else None
    found = store.list_campaigns(
        request.conn, request.caller.workspace_id, request.runtime.settings, limit=limit + 1,
        after=after,
    )  # fmt: skip
    items = found[:limit]
    last = items[-1] if items and len(found) > limit else None
    next_cursor = paging.encode_cursor(last.created_at, last.id) if last is not None else None
    return CampaignPage(items=[CampaignOut.of(c) for c in items], next_cursor=next_cursor)


@router.get(
    "/v1/campaigns/<campaign_id>",
    summary="Get a campaign",
    responses=responses(200, CampaignOut, "it"),
)
def get_campaign(campaign_id: str, workspace: WorkspaceHeader) -> CampaignOut:
    request = scope(router)
    return CampaignOut.of(
        store.get_campaign(
            request.conn, request.caller.workspace_id, parse_id(campaign_id, "campaign"),
            request.runtime.settings,
        )
    )  # fmt: skip


@router.post(
    "/v1/campaigns/<campaign_id>/enrollments",
    summary="Enroll a recipient (idempotent per campaign and recipient)",
    responses=responses(201, EnrollmentOut, "enrolled; the first step is scheduled")
    | responses(200, EnrollmentOut, "already enrolled: the first enrollment, as it is"),
)
def enroll(campaign_id: str, body: EnrollIn, workspace: WorkspaceHeader) -> Response[EnrollmentOut]:
    request = scope(router)
    done = store.enroll(
        request.conn, request.caller.workspace_id, parse_id(campaign_id, "campaign"),
        body.recipient_id, body.data, request.runtime.settings, request.now,
        starts_at=body.starts_at, created_by=request.caller.user_id,
    )  # fmt: skip
    if done.created:
        step = done.enrollment.current_action_id
        request.added([step] if step else [])
    return Response(
        status_code=201 if done.created else 200,
        content_type=content_types.APPLICATION_JSON,
        body=enrollment_out(request, done.enrollment.id),
    )


@router.get(
    "/v1/campaigns/<campaign_id>/enrollments",
    summary="List a campaign's enrollments",
    responses=responses(200, EnrollmentPage, "a page of enrollments"),
)
def list_enrollments(
    campaign_id: str,
    workspace: WorkspaceHeader,
    status: Annotated[Literal["active", "completed", "exited"] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=40)] = None,
) -> EnrollmentPage:
    request = scope(router)
    campaign = parse_id(campaign_id, "campaign")
    # An unknown campaign is a 404, not an empty list.
    store.get_campaign(
        request.conn, request.caller.workspace_id, campaign, request.runtime.settings
    )
    found = store.list_enrollments(
        request.conn, request.caller.workspace_id, campaign,
        status=status, limit=limit + 1, after=parse_id(cursor, "cursor") if cursor else None,
    )  # fmt: skip
    items = found[:limit]
    return EnrollmentPage(
        items=[EnrollmentOut.of(e, store.enrollment_actions(request.conn, e.id)) for e in items],
        next_cursor=str(items[-1].id) if items and len(found) > limit else None,
    )
