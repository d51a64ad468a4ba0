"""Quotas on a real Postgres: the active-actions count uses its index and stops at the
limit; a stored schedule over the window quota is paused by the expander with the reason."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.conftest import make_workspace
from tests.e2e.test_api_quotas import away_from_a_minute_boundary
from tests.integration.test_query_plans import index_scans, plan_of, seq_scans
from tickwork import quotas, recurring
from tickwork.config import Settings
from tickwork.errors import QuotaExceededError, RateLimitedError
from tickwork.recurring import NewSchedule
from tickwork.sql import query


@pytest.fixture
def crowded(conn, now):
    """A busy workspace (50k queued rows and 50k published), and a quiet one."""
    busy, quiet = make_workspace(conn, "Busy"), make_workspace(conn, "Quiet")
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
        " status, finished_at) select %(ws)s, 'webhook', 't', %(at)s + g * interval '1 s',"
        " case when g %% 2 = 0 then 'queued' else 'published' end,"
        " case when g %% 2 = 0 then null else %(at)s end from generate_series(1, 100000) g",
        {"ws": busy, "at": now + timedelta(hours=1)},
    )
    # Another tenant's active rows, due before the busy one's: the due index would walk
    # them, the workspace's own index does not.
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %(ws)s, 'webhook', 't', %(at)s + g * interval '1 ms'"
        " from generate_series(1, 50000) g",
        {"ws": make_workspace(conn, "Other"), "at": now + timedelta(minutes=30)},
    )
    conn.execute("analyze scheduled_actions")
    return busy, quiet


def test_the_active_count_uses_its_partial_index_and_stops_at_the_cap(conn, crowded):
    busy, quiet = crowded
    plan = plan_of(conn, query("count_active_actions"), {"workspace_id": busy, "cap": 1001})
    assert "ix_scheduled_actions_active_workspace" in index_scans(plan)
    assert "scheduled_actions" not in seq_scans(plan)
    quotas.check_active_actions(conn, quiet, Settings(quota_active_actions=1))
    quotas.check_active_actions(conn, busy, Settings(quota_active_actions=50_000))
    with pytest.raises(QuotaExceededError, match="more than 49999 active"):
        quotas.check_active_actions(conn, busy, Settings(quota_active_actions=49_999))
    quotas.check_active_actions(conn, busy, Settings(quota_active_actions=0))  # off


def test_the_request_count_starts_again_each_window(conn, workspace):
    away_from_a_minute_boundary()
    settings = Settings(quota_api_requests_per_minute=2)
    assert quotas.count_request(conn, workspace, settings).requests == 1
    assert quotas.count_request(conn, workspace, settings).requests == 2
    with pytest.raises(RateLimitedError) as refused:
        quotas.count_request(conn, workspace, settings)
    assert 1 <= refused.value.retry_after_seconds <= 60
    conn.execute("update workspace_api_usage set window_start = window_start - interval '1 min'")
    assert quotas.count_request(conn, workspace, settings).requests == 1


def test_the_expander_pauses_a_stored_schedule_over_the_window_quota(conn, workspace, now):
    roomy, strict = Settings(), Settings(quota_schedule_window_rows=10)
    with pytest.raises(QuotaExceededError, match="at most 10"):
        recurring.create_schedule(conn, workspace, _hourly(), strict, now)
    created = recurring.create_schedule(conn, workspace, _hourly(), roomy, now)
    # the quota is lowered below what the schedule makes in a window, and the window moves
    later = now + timedelta(days=20)
    summary = recurring.expand_all(conn, strict, now=later)
    assert summary.paused == 1
    paused = recurring.get_schedule(conn, workspace, created.schedule.id)
    assert paused.status == "paused"
    assert "at most 10" in (paused.paused_reason or "")


def _hourly() -> NewSchedule:
    return NewSchedule(action_type="webhook", target_key="primary", rrule="FREQ=HOURLY",
                       timezone="UTC")  # fmt: skip
