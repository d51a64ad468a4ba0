"""The drips' and recipients' lookups use their indexes: the advance pass, claim-time
admission, exits on events, the change log and the forecast."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.integration.test_query_plans import index_scans, plan_of, seq_scans
from tickwork.platform.sql import query


@pytest.fixture
def many_enrollments(conn, workspace, now):
    """20k enrollments of 20k recipients in one campaign, each with a step row; 10 steps
    done and waiting for the advance pass; 50k other actions over a month."""
    conn.execute(
        "insert into recipients (workspace_id, recipient_id, timezone)"
        " select %s, 'r' || g, 'UTC' from generate_series(1, 20000) g",
        (workspace,),
    )
    conn.execute(
        "insert into campaigns (id, workspace_id, name, steps, exit_events) values"
        " ('00000000-0000-0000-0000-0000000000c1', %s, 'c', '[{}]', '{replied}')",
        (workspace,),
    )
    conn.execute(
        "with a as (insert into scheduled_actions (workspace_id, action_type, target_key,"
        " publish_at, source, recipient_id, dedupe_key) select %(ws)s, 'log', 't',"
        " %(now)s + g * interval '1 minute', 'sequence', 'r' || g, 'k' || g"
        " from generate_series(1, 20000) g returning id, recipient_id),"
        " e as (insert into enrollments (workspace_id, campaign_id, recipient_id, starts_at,"
        " current_action_id) select %(ws)s, '00000000-0000-0000-0000-0000000000c1',"
        " a.recipient_id, %(now)s, a.id from a returning id, current_action_id)"
        " insert into enrollment_actions (action_id, workspace_id, enrollment_id, step_index,"
        " done_at) select e.current_action_id, %(ws)s, e.id, 0, null from e",
        {"ws": workspace, "now": now},
    )
    conn.execute(
        "update enrollment_actions set done_at = now() where action_id in"
        " (select action_id from enrollment_actions limit 10)"
    )
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %s, 'webhook', 't', %s + g * interval '1 minute'"
        " from generate_series(1, 50000) g",
        (workspace, now),
    )
    conn.execute(
        "insert into action_changes (workspace_id, action_id, kind, actor)"
        " select workspace_id, id, 'cancel', 'x' from scheduled_actions limit 20000"
    )
    for table in ("recipients", "enrollments", "enrollment_actions", "scheduled_actions",
                  "action_changes"):  # fmt: skip
        conn.execute(f"analyze {table}")


def some_action_ids(conn, count: int) -> list[object]:
    rows = conn.execute(
        "select action_id from enrollment_actions order by action_id limit %s", (count,)
    ).fetchall()
    return [r[0] for r in rows]


def test_the_advance_pass_finds_done_steps_by_its_index(conn, many_enrollments):
    plan = plan_of(conn, query("ready_steps"), {"limit": 500})
    assert "ix_enrollment_actions_ready" in index_scans(plan), json.dumps(plan, indent=1)
    assert not seq_scans(plan)


def test_admission_reads_a_batch_of_steps_and_recipients_by_key(conn, workspace, many_enrollments):
    ids = some_action_ids(conn, 10)
    plan = plan_of(conn, query("steps_of_actions"), {"ids": ids})
    assert not {"enrollment_actions", "enrollments", "recipients"} & seq_scans(plan), json.dumps(
        plan, indent=1
    )
    plan = plan_of(
        conn,
        query("recipients_of_actions"),
        {"workspace_ids": [workspace] * 3, "recipient_ids": ["r1", "r2", "r3"]},
    )
    assert "recipients" not in seq_scans(plan), json.dumps(plan, indent=1)


def test_exits_changes_and_the_forecast_use_their_indexes(conn, workspace, now, many_enrollments):
    plan = plan_of(
        conn,
        query("exit_event_enrollments"),
        {"workspace_id": workspace, "recipient_id": "r77", "event_type": "replied"},
    )
    assert "ix_enrollments_recipient" in index_scans(plan), json.dumps(plan, indent=1)
    [action_id] = some_action_ids(conn, 1)
    plan = plan_of(
        conn, query("changes_of_action"), {"workspace_id": workspace, "action_id": action_id}
    )
    assert "ix_action_changes_action" in index_scans(plan), json.dumps(plan, indent=1)
    plan = plan_of(
        conn,
        query("forecast"),
        {"workspace_id": workspace, "now": now, "until": now + timedelta(hours=2)},
    )
    # the workspace's range of the queue up to the forecast's end, each row by its key
    assert "ix_action_queue_workspace" in index_scans(plan), json.dumps(plan, indent=1)
    assert not {"scheduled_actions", "action_queue"} & seq_scans(plan), json.dumps(plan)
