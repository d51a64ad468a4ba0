"""The reconciler's hot queries use their indexes, checked with EXPLAIN on a realistic table."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_query_plans import index_scans, plan_of, seq_scans
from tickwork.platform.sql import query


@pytest.fixture
def many_intents(conn, workspace):
    """20k intents already reconciled and settled, 20 changed since, 20 due for a look."""
    conn.execute(
        "insert into schedule_intents (workspace_id, thing_id, action_type, targets, publish_at,"
        " reconciled_version, reconciled_at)"
        " select %s, 'post-' || g, 'log', '{a,b}', now() + interval '1 day', 1, now()"
        " from generate_series(1, 20000) g",
        (workspace,),
    )
    conn.execute(
        "update schedule_intents set payload = '{\"edited\": true}'"
        " where thing_id in (select 'post-' || g from generate_series(1, 20) g)"
    )
    conn.execute(
        "update schedule_intents set recheck_at = now() - interval '1 second'"
        " where thing_id in (select 'post-' || g from generate_series(21, 40) g)"
    )
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, thing_id, target_key,"
        " publish_at, source) select %s, 'log', 'post-' || g, t, now() + interval '1 day',"
        " 'intent' from generate_series(1, 20000) g, unnest('{a,b}'::text[]) t",
        (workspace,),
    )
    conn.execute("analyze schedule_intents")
    conn.execute("analyze scheduled_actions")


def test_finding_work_reads_only_the_two_partial_indexes(conn, many_intents):
    plan = plan_of(conn, query("intents_to_reconcile"), {"limit": 500})
    assert {"ix_schedule_intents_changed", "ix_schedule_intents_recheck"} <= index_scans(plan), (
        json.dumps(plan, indent=1)
    )
    assert "schedule_intents" not in seq_scans(plan)
    assert len(conn.execute(query("intents_to_reconcile"), {"limit": 500}).fetchall()) == 40


def test_reading_a_things_rows_uses_the_thing_index(conn, workspace, many_intents):
    plan = plan_of(conn, query("thing_actions"), {"workspace_id": workspace, "thing_id": "post-77"})
    assert "ix_scheduled_actions_thing" in index_scans(plan), json.dumps(plan, indent=1)
    assert "scheduled_actions" not in seq_scans(plan)
