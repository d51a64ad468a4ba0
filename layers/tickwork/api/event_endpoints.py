"""/v1/event-endpoints: where a workspace's outcome events go (tickwork.events). Admins
create, change and delete them; members list and read them. The signing secret is answered
once, at creation."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header

from tickwork import connections, events
from tickwork.api.event_endpoint_models import (
    CreatedEventEndpoint,
    CreateEventEndpoint,
    EventEndpointList,
    EventEndpointOut,
    EventEndpointPatch,
)
from tickwork.api.models import responses
from tickwork.api.scope import scope
from tickwork.connections.secrets import SecretStoreError
from tickwork.platform.observability import logger
from tickwork.providers import outbound_policy

router = Router()

WorkspaceHeader = Annotated[
    UUID, Header(alias="X-Workspace-Id", description="the workspace to act in")
]


@router.post(
    "/v1/event-endpoints",
    summary="Register an endpoint for outcome events (admins)",
    responses=responses(201, CreatedEventEndpoint, "created; the secret is shown this once"),
)
def create_event_endpoint(
    body: CreateEventEndpoint, workspace: WorkspaceHeader
) -> Response[CreatedEventEndpoint]:
    request = scope(router)
    request.caller.require_admin("add an event endpoint")
    created = events.create(
        request.conn, request.caller.workspace_id, url=body.url,
        event_types=list(body.event_types), action_types=body.action_types,
        description=body.description, store=request.runtime.secrets,
        policy=outbound_policy(request.runtime.settings), created_by=request.caller.user_id,
    )  # fmt: skip
    out = EventEndpointOut.of(created.endpoint)
    answer = CreatedEventEndpoint(**out.model_dump(), secret=created.secret)
    return Response(status_code=201, content_type=content_types.APPLICATION_JSON, body=answer)


@router.get(
    "/v1/event-endpoints",
    summary="List the workspace's event endpoints",
    responses=responses(200, EventEndpointList, "every endpoint not deleted, oldest first"),
)
def list_event_endpoints(workspace: WorkspaceHeader) -> EventEndpointList:
    request = scope(router)
    rows = events.list_all(request.conn, request.caller.workspace_id)
    return EventEndpointList(items=[EventEndpointOut.of(row) for row in rows])


@router.get(
    "/v1/event-endpoints/<endpoint_id>",
    summary="Get one event endpoint (never its secret)",
    responses=responses(200, EventEndpointOut, "it"),
)
def get_event_endpoint(endpoint_id: str, workspace: WorkspaceHeader) -> EventEndpointOut:
    request = scope(router)
    key = events.parse_id(endpoint_id)
    return EventEndpointOut.of(events.get(request.conn, request.caller.workspace_id, key))


@router.patch(
    "/v1/event-endpoints/<endpoint_id>",
    summary="Disable or enable an endpoint, or change its filters (admins)",
    responses=responses(200, EventEndpointOut, "changed"),
)
def patch_event_endpoint(
    endpoint_id: str, body: EventEndpointPatch, workspace: WorkspaceHeader
) -> EventEndpointOut:
    request = scope(router)
    request.caller.require_admin("change an event endpoint")
    key = events.parse_id(endpoint_id)
    row = events.update(
        request.conn, request.caller.workspace_id, key, status=body.status,
        event_types=None if body.event_types is None else list(body.event_types),
        action_types=body.action_types or None,
        clear_action_types=body.action_types == [], description=body.description,
    )  # fmt: skip
    return EventEndpointOut.of(row)


@router.delete(
    "/v1/event-endpoints/<endpoint_id>",
    summary="Delete an endpoint (admins); its pending events are not sent",
    responses=responses(200, EventEndpointOut, "deleted; its secret is erased"),
)
def delete_event_endpoint(endpoint_id: str, workspace: WorkspaceHeader) -> EventEndpointOut:
    request = scope(router)
    request.caller.require_admin("delete an event endpoint")
    key = events.parse_id(endpoint_id)
    row = events.delete(request.conn, request.caller.workspace_id, key)
    secret_ref = connections.load(request.conn, [row.connection_id])[row.connection_id].secret_ref
    store = request.runtime.secrets

    def erase() -> None:
        try:
            store.delete(secret_ref or "")
        except SecretStoreError:
            logger.warning("the secret of a deleted event endpoint remains",
                           extra={"id": str(key)})  # fmt: skip

    request.after_commit.append(erase)
    return EventEndpointOut.of(row)
