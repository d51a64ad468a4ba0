"""The retention's walk reads one workspace's rows due before the cutoff through the
calendar index, and its lock and delete find rows by key: checked with EXPLAIN on a table
where another workspace has a long history and this one a large backlog."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

from tests.conftest import make_workspace
from tests.integration.test_query_plans import index_node, index_scans, plan_of, seq_scans
from tickwork.platform.sql import query


def test_the_candidates_are_a_range_of_the_calendar_index_not_a_scan(conn, workspace, now):
    other = make_workspace(conn, "other")
    # Another workspace: 60k finished rows, all old. This one: 50k queued, 20k finished.
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
        " status, finished_at)"
        " select %(ws)s, 'webhook', 'h', %(now)s - interval '100 days' - g * interval '1 minute',"
        "        'published', %(now)s - interval '100 days' - g * interval '1 minute'"
        " from generate_series(1, 60000) g",
        {"ws": other, "now": now},
    )
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %(ws)s, 'webhook', 't', %(now)s + g * interval '1 second'"
        " from generate_series(1, 50000) g",
        {"ws": workspace, "now": now},
    )
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
        " status, finished_at, rescheduled_from)"
        " select %(ws)s, 'webhook', 'f', %(now)s - g * interval '5 minutes', 'cancelled',"
        "        %(now)s - g * interval '5 minutes', null"
        " from generate_series(1, 20000) g",
        {"ws": workspace, "now": now},
    )
    conn.execute("vacuum analyze scheduled_actions")
    params = {
        "workspace_id": workspace, "cutoff": now - timedelta(days=30),
        "after_at": datetime(1, 1, 1, tzinfo=UTC), "after_id": uuid.UUID(int=0), "limit": 1000,
    }  # fmt: skip
    plan = plan_of(conn, query("retention_candidates"), params)
    shown = json.dumps(plan, indent=1)
    assert "scheduled_actions" not in seq_scans(plan), shown
    # the workspace's rows due before the cutoff, after the cursor: a range, not its backlog
    walk = index_node(plan, "ix_scheduled_actions_calendar")
    assert "publish_at <" in walk["Index Cond"], shown
    assert "ROW(publish_at, id) >" in walk["Index Cond"], shown
    # the lineage check reads its own index, not the table
    assert "ix_scheduled_actions_rescheduled_from" in index_scans(plan), shown

    ids = [uuid.uuid4() for _ in range(1000)]
    lock = plan_of(conn, query("retention_lock"), {
        "workspace_id": workspace, "cutoff": params["cutoff"], "ids": ids,
        "updated_ats": [now] * len(ids),
    })  # fmt: skip
    assert "scheduled_actions" not in seq_scans(lock), json.dumps(lock, indent=1)
    delete = plan_of(conn, query("retention_delete_actions"), {"ids": ids})
    assert "scheduled_actions" not in seq_scans(delete), json.dumps(delete, indent=1)
