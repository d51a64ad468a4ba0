"""Who is calling, in which workspace, and the transaction that enforces it.

API requests run in one transaction as the role `tickwork_api` with the workspace in
`tickwork.workspace_id`: row-level security then hides every other workspace's rows, even
from a query that forgets its filter. Workers connect as the table owner and bypass it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal
from uuid import UUID
from zoneinfo import ZoneInfo

from tickwork.platform.config import Settings
from tickwork.platform.db import Connection
from tickwork.platform.errors import ForbiddenError
from tickwork.platform.sql import query
from tickwork.quotas import Limits

_SET_TENANT = query("set_tenant")
_CALLER_MEMBERSHIP = query("caller_membership")

Role = Literal["member", "admin"]


@dataclass(frozen=True)
class Caller:
    user_id: str
    workspace_id: UUID
    role: Role
    timezone: ZoneInfo
    limits: Limits  # the workspace's quotas: its operator's, else the stack's defaults

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def require_admin(self, what: str) -> None:
        if not self.is_admin:
            raise ForbiddenError(f"only a workspace admin can {what}")


@contextmanager
def tenant_transaction(
    conn: Connection, workspace_id: UUID, actor: str | None = None
) -> Iterator[Connection]:
    """A transaction in which `conn` sees and writes only `workspace_id`'s rows; `actor`
    (the caller) is who the change log says made its changes."""
    with conn.transaction():
        conn.execute(_SET_TENANT, {"workspace_id": workspace_id, "actor": actor})
        yield conn


def authorize(conn: Connection, user_id: str, workspace_id: UUID, settings: Settings) -> Caller:
    """The caller's membership of the current tenant's workspace, with the workspace's
    limits (`settings` hold the stack's defaults), or ForbiddenError."""
    row = conn.execute(_CALLER_MEMBERSHIP, {"user_id": user_id}).fetchone()
    if row is None:
        raise ForbiddenError(
            f"you are not a member of workspace {workspace_id}",
            details={"workspace_id": str(workspace_id)},
        )
    role, timezone, limits = row
    return Caller(user_id, workspace_id, role, ZoneInfo(timezone), Limits.of(settings, limits))
