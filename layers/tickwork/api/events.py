"""/v1/events: the app says what happened; every enabled rule on that event type whose
conditions hold makes one action, due now. The answer is the structured result."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header

from tickwork import quotas
from tickwork.api.models import responses
from tickwork.api.rules_models import EventIn, ResultOut
from tickwork.api.scope import scope
from tickwork.rules.events import EventInput, emit_event
from tickwork.sequences.store import exit_on_event

router = Router()

WorkspaceHeader = Annotated[
    UUID, Header(alias="X-Workspace-Id", description="the workspace to act in")
]


@router.post(
    "/v1/events",
    summary="Emit an event: matching rules make their actions (once per rule and day)",
    responses=responses(
        200, ResultOut, "what it did; a rule that failed is named in `failed` and `error`"
    ),
)
def post_event(body: EventIn, workspace: WorkspaceHeader) -> ResultOut:
    request = scope(router)
    event = EventInput(
        type=body.type, entities=body.entities, context=body.context,
        occurred_at=body.occurred_at, id=body.id,
    )  # fmt: skip
    result = emit_event(
        request.conn, request.caller.workspace_id, event, request.caller.timezone,
        request.runtime.settings, request.now, created_by=request.caller.user_id,
        limits=request.limits,
    )  # fmt: skip
    quotas.check_digests(request.conn, request.caller.workspace_id, request.limits,
                         [fired.action_id for fired in result.created])  # fmt: skip
    # An event about a recipient (entities.recipient) ends their enrollments in campaigns
    # that exit on it (a reply, an unsubscribe, a goal).
    recipient_id = event.entities.get("recipient")
    if recipient_id:
        exit_on_event(
            request.conn, request.caller.workspace_id, body.type, recipient_id,
            request.caller.user_id,
        )  # fmt: skip
    request.added(fired.action_id for fired in result.created)
    # A debounced digest's action that an event moved left its queue (its message was for
    # the old time): back in now if it is due within the look-ahead, not at the next tick.
    request.hand_over(
        dict.fromkeys(s.action_id for s in result.skipped if s.reason == "digested" and s.action_id)
    )
    return ResultOut.of(result)
