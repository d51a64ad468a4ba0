"""The stats and `tickwork status` read the rollup and ranges of the queue, never every row:
checked with EXPLAIN on a table with a large backlog and a long history."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from tests.integration.test_query_plans import index_scans, plan_of, seq_scans
from tickwork import rollup
from tickwork.platform.sql import query


@pytest.fixture
def backlog_and_history(conn, workspace, now):
    """100k rows queued for later, 100 due, 50 in flight, 50k finished over 30 days and a
    few since the last merge of the rollup."""
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %(ws)s, 'webhook', 't', %(now)s + g * interval '1 second'"
        " from generate_series(1, 100000) g",
        {"ws": workspace, "now": now + timedelta(hours=1)},
    )
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %(ws)s, 'webhook', 'due', %(now)s - g * interval '1 second'"
        " from generate_series(1, 150) g",
        {"ws": workspace, "now": now},
    )
    # Statistics of the new rows before the updates that pick some of them: planned on
    # statistics older than the insert, `id in (select ... limit n)` once rescanned the
    # table per row.
    conn.execute("analyze scheduled_actions")
    conn.execute(
        "update scheduled_actions set status = 'submitted', submitted_at = now(),"
        " enqueued_at = now(), attempt_count = 1 where id in (select id from scheduled_actions"
        " where target_key = 'due' limit 50)"
    )
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
        " status, submitted_at, finished_at, error_code)"
        " select %(ws)s, 'webhook', 'h', %(now)s - g * interval '1 minute',"
        "        case when g %% 10 = 0 then 'failed' else 'published' end,"
        "        %(now)s - g * interval '1 minute', %(now)s - g * interval '1 minute',"
        "        case when g %% 100 = 0 then 'ambiguous' end"
        " from generate_series(1, 50000) g",
        {"ws": workspace, "now": now},
    )
    conn.execute("analyze scheduled_actions")
    rollup.compact(conn)
    conn.execute(
        "update scheduled_actions set status = 'cancelled', finished_at = now()"
        " where id in (select id from scheduled_actions where target_key = 't' limit 20)"
    )
    for table in ("scheduled_actions", "action_queue", "action_finished_rows", "action_type_rows"):
        conn.execute(f"vacuum analyze {table}")
    return {"workspace_id": workspace}


def due_ranges(plan: dict[str, Any]) -> list[str]:
    """The index conditions of the plan's index scans on the queue's due indexes."""
    found = []
    if plan.get("Index Name") in {"ix_action_queue_due", "ix_action_queue_workspace"}:
        found.append(plan.get("Index Cond", ""))
    for child in plan.get("Plans", []):
        found += due_ranges(child)
    return found


def assert_no_scan_of_every_row(plan: dict[str, Any], *indexes: str) -> None:
    shown = json.dumps(plan, indent=1)
    assert not {"scheduled_actions", "action_queue"} & seq_scans(plan), shown
    for name in indexes:
        assert name in index_scans(plan), shown


@pytest.mark.parametrize("all_workspaces", [False, True])
def test_the_counts_read_the_rollup_and_the_rows_in_flight(
    conn, backlog_and_history, all_workspaces
):
    params = backlog_and_history | ({"workspace_id": None} if all_workspaces else {})
    params |= {"claimed_due_within": 60}
    # What finished is the rollup's: no row of scheduled_actions is read for it, and the
    # failures waiting for a person are its too.
    plan = plan_of(conn, query("rollup_needs_person"), params)
    assert "scheduled_actions" not in json.dumps(plan), json.dumps(plan, indent=1)
    # The rows in flight: each type's range of the queue by due time (claimed rows are due
    # by now + skew), each row's status by its key.
    counts = plan_of(conn, query("rollup_counts"), params)
    assert_no_scan_of_every_row(counts)
    ranges = due_ranges(counts)
    assert ranges, json.dumps(counts, indent=1)
    assert all("due_at <=" in cond for cond in ranges), json.dumps(counts, indent=1)


def test_the_counts_are_those_of_a_scan(conn, backlog_and_history):
    found = {(c["status"], c["action_type"]): c["count"] for c in rollup.counts(conn, None)}
    assert found == {
        ("cancelled", "webhook"): 20,
        ("failed", "webhook"): 5000,
        ("published", "webhook"): 45000,
        ("queued", "webhook"): 100080,
        ("submitted", "webhook"): 50,
    }


def test_the_stats_backlog_and_lag_use_their_indexes(conn, backlog_and_history):
    params = backlog_and_history
    backlog = plan_of(conn, query("stats_backlog"), params)
    assert_no_scan_of_every_row(backlog)
    # Either index of the queue reads only the rows due: each scan is a range of the due time.
    ranges = due_ranges(backlog)
    assert ranges, json.dumps(backlog, indent=1)
    assert all("due_at <=" in cond for cond in ranges), json.dumps(backlog, indent=1)
    lag = plan_of(conn, query("stats_lag"), params)
    assert_no_scan_of_every_row(lag, "ix_scheduled_actions_calendar")


@pytest.mark.parametrize("all_workspaces", [False, True])
def test_tickwork_status_uses_indexes(conn, backlog_and_history, all_workspaces):
    params = {
        "workspace_id": None if all_workspaces else backlog_and_history["workspace_id"],
        "window_seconds": 3600,
        "stuck_timeout_seconds": 900,
        "action_types": ["webhook"],
        "due_cap": 10_000,
        "due_within": 60,
    }
    expected = {
        "status_due": None,  # each type's range of the queue's due index
        "status_next_due": None,
        "status_lag": "ix_scheduled_actions_calendar",
        "status_attention": None,  # claimed rows: a due-time range too
    }
    for name, index in expected.items():
        plan = plan_of(conn, query(name), params)
        if index is None:
            assert_no_scan_of_every_row(plan)
            ranges = due_ranges(plan)
            assert ranges, json.dumps(plan, indent=1)
            assert all("due_at" in cond for cond in ranges), json.dumps(plan, indent=1)
        else:
            assert_no_scan_of_every_row(plan, index)
