"""/v1/entities/{type}/{id}/dates: an entity's reference dates; its time rules' actions
follow them (made, moved with lineage, cancelled) in the same transaction.
/v1/entities/{type}/{id}/context: its fields alone, which event rules load."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header

from tickwork.api.models import responses
from tickwork.api.rules_models import ContextIn, DatesIn, EntityOut
from tickwork.api.scope import scope
from tickwork.platform.errors import InputError, NotFoundError
from tickwork.rules import entities
from tickwork.rules.entities import EntityInput

router = Router()

WorkspaceHeader = Annotated[
    UUID, Header(alias="X-Workspace-Id", description="the workspace to act in")
]
PATH = "/v1/entities/<entity_type>/<entity_id>/dates"
CONTEXT_PATH = "/v1/entities/<entity_type>/<entity_id>/context"


def _known(entity_type: str, entity_id: str) -> None:
    """A key that cannot name an entity names none: 404, as for any other missing one."""
    try:
        entities.check_entity_key(entity_type, entity_id)
    except InputError as exc:
        raise NotFoundError(f"no entity {entity_type[:80]}/{entity_id[:80]}") from exc


@router.put(
    PATH,
    summary="Set an entity's zone, reference dates and context; its rules' actions follow",
    responses=responses(201, EntityOut, "created, with what its rules made")
    | responses(200, EntityOut, "changed (or unchanged), with what its rules did"),
)
def put_dates(
    entity_type: str, entity_id: str, body: DatesIn, workspace: WorkspaceHeader
) -> Response[EntityOut]:
    request = scope(router)
    given = EntityInput(dates=body.dates, timezone=body.timezone, context=body.context)
    done = entities.put_dates(
        request.conn, request.caller.workspace_id, entity_type, entity_id, given,
        request.caller.timezone.key, request.runtime.settings, request.now,
        updated_by=request.caller.user_id,
    )  # fmt: skip
    request.added(fired.action_id for fired in done.result.created)
    return Response(
        status_code=201 if done.created else 200,
        content_type=content_types.APPLICATION_JSON,
        body=EntityOut.of(done, request.caller.timezone),
    )


@router.get(
    PATH,
    summary="An entity's dates and context, with every action its rules made",
    responses=responses(200, EntityOut, "it"),
)
def get_dates(entity_type: str, entity_id: str, workspace: WorkspaceHeader) -> EntityOut:
    request = scope(router)
    _known(entity_type, entity_id)
    view = entities.get_entity(request.conn, request.caller.workspace_id, entity_type, entity_id)
    return EntityOut.of(view, request.caller.timezone)


@router.delete(
    PATH,
    summary="Forget an entity: its rules' pending actions are cancelled; sent ones stay",
    responses=responses(200, EntityOut, "the entity as it was, and the actions cancelled"),
)
def delete_dates(entity_type: str, entity_id: str, workspace: WorkspaceHeader) -> EntityOut:
    request = scope(router)
    _known(entity_type, entity_id)
    done = entities.delete_entity(request.conn, request.caller.workspace_id, entity_type, entity_id)
    return EntityOut.of(done, request.caller.timezone)


@router.put(
    CONTEXT_PATH,
    summary="Set an entity's context (its fields), keeping its zone and dates",
    responses=responses(201, EntityOut, "created, in the workspace's zone, without dates")
    | responses(200, EntityOut, "changed; actions already made keep their snapshot"),
)
def put_context(
    entity_type: str, entity_id: str, body: ContextIn, workspace: WorkspaceHeader
) -> Response[EntityOut]:
    request = scope(router)
    done = entities.put_context(
        request.conn, request.caller.workspace_id, entity_type, entity_id, body.context,
        request.caller.timezone.key, updated_by=request.caller.user_id,
    )  # fmt: skip
    return Response(
        status_code=201 if done.created else 200,
        content_type=content_types.APPLICATION_JSON,
        body=EntityOut.of(done, request.caller.timezone),
    )
