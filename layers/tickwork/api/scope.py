"""Per-request scope: who calls, in which workspace, on which transaction.

The `tenancy` middleware reads the caller from the claims API Gateway's JWT authorizer
verified (`sub`) and the workspace from the `X-Workspace-Id` header, opens the tenant
transaction (row-level security), checks membership, runs the route, and commits, or
rolls back when the route answered with an error. Work that needs the commit (handing a
new row to its queue) is queued in `after_commit`. The actions a request created are
counted against the workspace's per-minute quota just before it commits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware

from tickwork import quotas, runtime
from tickwork.platform.db import Connection
from tickwork.platform.errors import AuthenticationError, BadRequestError
from tickwork.platform.queues.enqueue import enqueue_soon
from tickwork.platform.wallclock import utcnow
from tickwork.runtime import Runtime
from tickwork.tenancy import Caller, authorize, tenant_transaction

WORKSPACE_HEADER = "x-workspace-id"
_KEY = "tickwork_scope"


@dataclass
class RequestScope:
    conn: Connection
    caller: Caller
    runtime: Runtime
    now: datetime
    after_commit: list[Callable[[], None]] = field(default_factory=list)
    # Actions this request created, counted against the workspace's per-minute quota once,
    # just before the request commits (`tenancy`): every way in reports them here.
    created: int = 0

    @property
    def limits(self) -> quotas.Limits:
        return self.caller.limits

    def made(self, count: int) -> None:
        """`count` new actions (rows inserted): the per-minute quota counts them."""
        self.created += count

    def added_actions(self) -> None:
        """Call after a write that added active rows: over the workspace's quota, it is
        refused (422) and rolled back."""
        quotas.check_active_actions(self.conn, self.caller.workspace_id, self.caller.limits)

    def hand_over(self, ids: Iterable[UUID]) -> None:
        """Rows due within the tick's look-ahead go to their queue once the request has
        committed, not at the next tick."""
        handed = list(ids)
        if not handed:
            return
        rt = self.runtime

        def work() -> None:
            enqueue_soon(rt.db.connection(), rt.queues, handed, rt.settings)

        self.after_commit.append(work)

    def added(self, ids: Iterable[UUID]) -> None:
        """New active rows: counted against the workspace's quotas, then handed over."""
        new = list(ids)
        if new:
            self.made(len(new))
            self.added_actions()
        self.hand_over(new)

    def replaced(self, ids: Iterable[UUID]) -> None:
        """New rows in place of ones just cancelled (reschedule, send now): the active count
        stays as it was, the per-minute quota counts them; then handed over."""
        new = list(ids)
        self.made(len(new))
        self.hand_over(new)


def scope(router: Router) -> RequestScope:
    found = router.context.get(_KEY)
    assert isinstance(found, RequestScope), "route registered without the tenancy middleware"
    return found


def _user(app: APIGatewayHttpResolver) -> str:
    authorizer = app.current_event.request_context.authorizer
    claims: dict[str, Any] = (authorizer.jwt_claim if authorizer else None) or {}
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        raise AuthenticationError("a bearer token with a subject (sub) is required")
    return sub


def _workspace(app: APIGatewayHttpResolver) -> UUID:
    raw = app.current_event.headers.get(WORKSPACE_HEADER)
    if not raw:
        raise BadRequestError("the X-Workspace-Id header is required: the workspace to act in")
    try:
        return UUID(raw)
    except ValueError as exc:
        raise BadRequestError(f"X-Workspace-Id {raw!r} is not a workspace id") from exc


def tenancy(app: APIGatewayHttpResolver, next_middleware: NextMiddleware) -> Response[Any]:
    user_id = _user(app)
    workspace_id = _workspace(app)
    rt = runtime.current()
    conn = rt.api_database().connection()
    request: RequestScope | None = None
    # Membership and the request count first, committed on their own: a request that
    # fails later still counts against the workspace's rate.
    with tenant_transaction(conn, workspace_id):
        caller = authorize(conn, user_id, workspace_id, rt.settings)
        quotas.count_request(conn, workspace_id, caller.limits)
    with tenant_transaction(conn, workspace_id, actor=user_id):
        request = RequestScope(conn, caller, rt, utcnow())
        app.append_context(**{_KEY: request})
        response = next_middleware(app)
        if response.status_code >= 400:
            raise psycopg.Rollback()
        # Last, so the row lock of the count is held only until the commit: over the
        # per-minute quota, the request is refused and its rows roll back with the count.
        quotas.count_actions_created(conn, workspace_id, request.created, caller.limits)
    if response.status_code < 400 and request.after_commit:
        # The API's login acts only inside a tenant transaction, so the work that needs the
        # commit (handing new rows to their queues) gets one of its own.
        with tenant_transaction(conn, workspace_id):
            for work in request.after_commit:
                work()
    return response
