"""Per-workspace quotas: how much one workspace may hold and how fast it may call.

- active actions (queued or submitted rows), checked by the writes that add rows, after
  they wrote them and before they commit, so one check covers every way in;
- recurring schedules not ended, checked before a schedule is created;
- rows one schedule may materialize in its window, checked as it is materialized (a rule
  too dense is refused on create, edit and resume; the expander pauses a stored one);
- API requests per minute, counted per workspace in the database, so every API Lambda
  shares one count.

Each refusal says what the limit is, where the workspace stands, and what to do.
Settings hold the limits (`quota_*`); 0 turns a quota off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, LiteralString
from uuid import UUID

from tickwork.config import Settings
from tickwork.db import Connection
from tickwork.errors import QuotaExceededError, RateLimitedError
from tickwork.sql import query

_COUNT_ACTIVE = query("count_active_actions")
_COUNT_SCHEDULES = query("count_live_schedules")
_COUNT_REQUEST = query("count_api_request")

RATE_WINDOW_SECONDS = 60


def _count(conn: Connection, sql: LiteralString, params: dict[str, Any]) -> int:
    row = conn.execute(sql, params).fetchone()
    return int(row[0]) if row else 0


def check_active_actions(conn: Connection, workspace_id: UUID, settings: Settings) -> None:
    """After a write that added active rows, in its transaction: refuse (and so roll back)
    if the workspace now holds more than its quota."""
    limit = settings.quota_active_actions
    if limit == 0:
        return
    held = _count(conn, _COUNT_ACTIVE, {"workspace_id": workspace_id, "cap": limit + 1})
    if held > limit:
        raise QuotaExceededError(
            f"the workspace would hold more than {limit} active (queued or submitted)"
            " actions, its quota; cancel some or wait for them to fire",
            details={"quota": "active_actions", "limit": limit},
        )


def check_new_schedule(conn: Connection, workspace_id: UUID, settings: Settings) -> None:
    """Before a recurring schedule is created: refuse one over the workspace's quota."""
    limit = settings.quota_recurring_schedules
    if limit == 0:
        return
    held = _count(conn, _COUNT_SCHEDULES, {"workspace_id": workspace_id})
    if held >= limit:
        raise QuotaExceededError(
            f"the workspace has {held} recurring schedules that have not ended, its quota is"
            f" {limit}; end one first",
            field="rrule",
            details={"quota": "recurring_schedules", "limit": limit, "held": held},
        )


def check_window_rows(rows: int, window_days: int, settings: Settings) -> None:
    """Refuse a schedule that would materialize more than its quota of rows at once."""
    limit = settings.quota_schedule_window_rows
    if limit and rows > limit:
        raise QuotaExceededError(
            f"the rule makes {rows} occurrences in the next {window_days} days; a schedule"
            f" may make at most {limit} in that window: fire less often",
            field="rrule",
            details={"quota": "schedule_window_rows", "limit": limit, "rows": rows},
        )


@dataclass(frozen=True)
class Usage:
    requests: int
    seconds_left: float


def count_request(conn: Connection, workspace_id: UUID, settings: Settings) -> Usage | None:
    """Count one API request of the workspace; RateLimitedError when over the quota."""
    limit = settings.quota_api_requests_per_minute
    if limit == 0:
        return None
    row = conn.execute(
        _COUNT_REQUEST, {"workspace_id": workspace_id, "window": RATE_WINDOW_SECONDS}
    ).fetchone()
    assert row is not None  # an upsert returns its row
    usage = Usage(int(row[0]), float(row[1]))
    if usage.requests > limit:
        wait = max(1, math.ceil(usage.seconds_left))
        raise RateLimitedError(
            f"the workspace made more than {limit} API requests this minute, its quota;"
            f" retry in {wait} s",
            retry_after_seconds=wait,
            details={"quota": "api_requests_per_minute", "limit": limit},
        )
    return usage
