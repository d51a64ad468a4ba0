"""The recurring queries that run against the big table use their indexes (EXPLAIN)."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.integration.test_query_plans import index_scans, plan_of, seq_scans
from tickwork.platform.sql import query
from tickwork.recurring import store as recurring
from tickwork.recurring.store import NewSchedule


@pytest.fixture
def busy(conn, workspace, settings, now):
    """100k one-off rows and one schedule with its 14 days of occurrences."""
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %(ws)s, 'log', 't', %(now)s + g * interval '1 second'"
        " from generate_series(1, 100000) g",
        {"ws": workspace, "now": now},
    )
    new = NewSchedule(action_type="log", target_key="t", rrule="FREQ=HOURLY", timezone="UTC",
                      dtstart=datetime(now.year, now.month, now.day))  # fmt: skip
    schedule = recurring.create_schedule(conn, workspace, new, settings, now).schedule
    conn.execute("analyze scheduled_actions")
    conn.execute("analyze recurring_schedules")
    return schedule


@pytest.mark.parametrize("name", ["cancel_future_occurrences", "cancel_undue_rows"])
def test_cancelling_a_schedules_rows_uses_the_occurrence_index(conn, busy, now, name):
    plan = plan_of(conn, query(name), {"id": busy.id, "now": now})
    assert "ux_scheduled_actions_occurrence" in index_scans(plan)
    assert "scheduled_actions" not in seq_scans(plan)
