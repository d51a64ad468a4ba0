"""Helpers for schedule-intent tests: settings with a social action type, declaring, ageing."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.rows import dict_row

from tickwork.intents.store import IntentInput, IntentResult, declare_intent
from tickwork.platform.config import ActionTypeConfig, Settings
from tickwork.platform.db import Connection
from tickwork.platform.queues.port import QueuePort
from tickwork.platform.wallclock import utcnow

SOCIAL = ("instagram", "facebook", "linkedin")


def social_settings(database_url: str) -> Settings:
    """The default types plus `publish_post`, whose targets are three social platforms."""
    base = Settings(database_url=database_url)
    publish_post = ActionTypeConfig(provider="log", targets=frozenset(SOCIAL))
    return base.model_copy(
        update={"action_types": {**base.action_types, "publish_post": publish_post}}
    )


def declare(
    conn: Connection,
    workspace: UUID,
    settings: Settings,
    thing_id: str = "post-1",
    *,
    targets: tuple[str, ...] = SOCIAL,
    state: str = "scheduled",
    queues: QueuePort | None = None,
    now: datetime | None = None,
    **when: Any,
) -> IntentResult:
    """Declare a publish_post intent; `when` is publish_at=... or wall_date/wall_time/timezone."""
    intent = IntentInput(
        action_type="publish_post",
        targets=targets,
        state=state,
        payload={"caption": "Launch day"},
        **when,
    )
    return declare_intent(
        conn, workspace, thing_id, intent, settings, now or utcnow(), queues=queues
    )


def rows_of(conn: Connection, thing_id: str, target: str | None = None) -> list[dict[str, Any]]:
    """Every row of a thing (or of one of its targets), oldest first."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "select * from scheduled_actions where thing_id = %s"
            " and (%s::text is null or target_key = %s) order by created_at, id",
            (thing_id, target, target),
        ).fetchall()


def statuses_by_target(conn: Connection, thing_id: str) -> dict[str, Counter[str]]:
    found: dict[str, Counter[str]] = {}
    for row in rows_of(conn, thing_id):
        found.setdefault(row["target_key"], Counter())[row["status"]] += 1
    return found


def age_rows(conn: Connection, seconds: float, thing_id: str | None = None) -> None:
    """Make rows look `seconds` older, as if that much time had passed since they were made."""
    conn.execute(
        "update scheduled_actions set created_at = created_at - make_interval(secs => %s)"
        " where %s::text is null or thing_id = %s",
        (seconds, thing_id, thing_id),
    )


def count(conn: Connection, table: str) -> int:
    row = conn.execute(f"select count(*) from {table}").fetchone()  # type: ignore[arg-type]
    assert row is not None
    return int(row[0])
