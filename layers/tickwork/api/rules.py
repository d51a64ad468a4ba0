"""/v1/rules: automation rules, create, list, get, edit (PATCH), delete. A write answers
with the rule and what it did to its actions (made, moved, cancelled)."""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header, Query

from tickwork.api.models import responses
from tickwork.api.rules_models import RuleIn, RuleOut, RulePage, RulePatch, load_json
from tickwork.api.scope import scope
from tickwork.platform import paging
from tickwork.platform.errors import NotFoundError
from tickwork.rules import store
from tickwork.rules.model import RuleInput
from tickwork.rules.store import RuleChanges, RuleCursor

router = Router()

WorkspaceHeader = Annotated[
    UUID, Header(alias="X-Workspace-Id", description="the workspace to act in")
]
MAX_PAGE = 200


def _rule_id(raw: str) -> UUID:
    try:
        return UUID(raw)
    except ValueError as exc:
        raise NotFoundError(f"no rule {raw[:80]!r} in this workspace") from exc


@router.post(
    "/v1/rules",
    summary="Create a rule (a time rule makes its actions for the dates already known)",
    responses=responses(201, RuleOut, "created"),
)
def create_rule(body: RuleIn, workspace: WorkspaceHeader) -> Response[RuleOut]:
    request = scope(router)
    given = RuleInput(
        name=body.name, trigger=body.trigger.domain(), action=body.action.domain(),
        conditions=[c.model_dump() for c in body.conditions], enabled=body.enabled,
        load=load_json(body.load) or {},
    )  # fmt: skip
    done = store.create_rule(
        request.conn, request.caller.workspace_id, given, request.runtime.settings,
        request.now, created_by=request.caller.user_id, limits=request.limits,
    )  # fmt: skip
    request.added(fired.action_id for fired in done.result.created)
    return Response(
        status_code=201,
        content_type=content_types.APPLICATION_JSON,
        body=RuleOut.of(done.rule, done.result),
    )


@router.get(
    "/v1/rules",
    summary="List rules",
    responses=responses(200, RulePage, "a page of rules, oldest first"),
)
def list_rules(
    workspace: WorkspaceHeader,
    enabled: Annotated[bool | None, Query()] = None,
    trigger_type: Annotated[Literal["event", "time"] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=300)] = None,
) -> RulePage:
    request = scope(router)
    after = RuleCursor(*paging.decode_cursor(cursor)) if cursor else None
    found = store.list_rules(
        request.conn, request.caller.workspace_id, limit=limit + 1, enabled=enabled,
        trigger_type=trigger_type, after=after,
    )  # fmt: skip
    items = found[:limit]
    more = len(found) > limit
    last = items[-1] if items else None
    return RulePage(
        items=[RuleOut.of(rule) for rule in items],
        next_cursor=paging.encode_cursor(last.created_at, last.id) if more and last else None,
    )


@router.get(
    "/v1/rules/<rule_id>",
    summary="Get a rule",
    responses=responses(200, RuleOut, "it, with its last error if a firing failed"),
)
def get_rule(rule_id: str, workspace: WorkspaceHeader) -> RuleOut:
    request = scope(router)
    return RuleOut.of(store.get_rule(request.conn, request.caller.workspace_id, _rule_id(rule_id)))


@router.patch(
    "/v1/rules/<rule_id>",
    summary="Edit a rule: disabling cancels its pending actions; a new offset moves them",
    responses=responses(200, RuleOut, "the rule as changed, and what that did"),
)
def edit_rule(rule_id: str, body: RulePatch, workspace: WorkspaceHeader) -> RuleOut:
    request = scope(router)
    sent = body.model_fields_set
    changes = RuleChanges(
        name=body.name if "name" in sent else None,
        enabled=body.enabled if "enabled" in sent else None,
        trigger=body.trigger.domain() if "trigger" in sent and body.trigger else None,
        conditions=[c.model_dump() for c in body.conditions]
        if "conditions" in sent and body.conditions is not None
        else None,
        action=body.action.domain() if "action" in sent and body.action else None,
        load=load_json(body.load) if "load" in sent else None,
    )
    done = store.edit_rule(
        request.conn, request.caller.workspace_id, _rule_id(rule_id), changes,
        request.runtime.settings, request.now, edited_by=request.caller.user_id,
        limits=request.limits,
    )  # fmt: skip
    request.added(fired.action_id for fired in done.result.created)
    return RuleOut.of(done.rule, done.result)


@router.delete(
    "/v1/rules/<rule_id>",
    summary="Delete a rule: its pending actions are cancelled; sent ones stay",
    responses=responses(200, RuleOut, "the rule as it was, and the actions cancelled"),
)
def delete_rule(rule_id: str, workspace: WorkspaceHeader) -> RuleOut:
    request = scope(router)
    done = store.delete_rule(
        request.conn, request.caller.workspace_id, _rule_id(rule_id),
        request.runtime.settings, request.now,
    )  # fmt: skip
    return RuleOut.of(done.rule, done.result)
