"""Hot queries use their indexes, checked with EXPLAIN on a realistically sized table."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from tickwork.sql import query


def plan_of(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> dict[str, Any]:
    # A client-side cursor inlines the parameters, so the planner sees real values.
    with psycopg.ClientCursor(conn) as cur:
        cur.execute("explain (format json) " + sql, params)  # type: ignore[operator]
        return cur.fetchone()[0][0]["Plan"]  # type: ignore[index]


def index_scans(plan: dict[str, Any]) -> set[str]:
    found = set()
    if plan.get("Node Type", "").startswith(("Index", "Bitmap Index")):
        found.add(plan["Index Name"])
    for child in plan.get("Plans", []):
        found |= index_scans(child)
    return found


def seq_scans(plan: dict[str, Any]) -> set[str]:
    found = {plan["Relation Name"]} if plan.get("Node Type") == "Seq Scan" else set()
    for child in plan.get("Plans", []):
        found |= seq_scans(child)
    return found


@pytest.fixture
def big_table(conn, workspace, now):
    """100k rows due in the future, 100 due now, plus finished history."""
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %(ws)s, 'webhook', 't', %(now)s + g * interval '1 second'"
        " from generate_series(1, 100000) g",
        {"ws": workspace, "now": now + timedelta(hours=1)},
    )
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %(ws)s, 'webhook', 'due', %(now)s - g * interval '1 second'"
        " from generate_series(1, 100) g",
        {"ws": workspace, "now": now},
    )
    conn.execute("analyze scheduled_actions")
    return now


def test_the_due_query_uses_the_partial_due_index(conn, big_table):
    plan = plan_of(
        conn,
        query("mark_due_enqueued"),
        {"horizon": big_table, "batch_size": 500, "paused_types": []},
    )
    assert "ix_scheduled_actions_due" in index_scans(plan), json.dumps(plan, indent=1)
    assert "scheduled_actions" not in seq_scans(plan)


def test_the_due_query_takes_only_the_due_rows(conn, big_table):
    from tickwork.tick import mark_due

    due = mark_due(conn, big_table, batch_size=500)
    assert len(due) == 100
