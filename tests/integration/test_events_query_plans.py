"""The outcome events' hot queries use their indexes: the admission's order check finds an
action's earlier events along ix_scheduled_actions_event_subject, among many event rows."""

from __future__ import annotations

import json
from datetime import timedelta
from uuid import uuid4

from tests.integration.test_query_plans import index_scans, plan_of
from tickwork.platform.sql import query


def test_the_order_check_reads_an_actions_events_by_their_index(conn, workspace, now):
    # Given 50,000 event rows to one endpoint, of 25,000 actions, and 50,000 other rows
    connection = conn.execute(
        "insert into connections (workspace_id, name, provider, settings)"
        " values (%s, 'events:x', 'event', '{}') returning id",
        (workspace,),
    ).fetchone()[0]
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
        " source, connection_id, payload)"
        " select %(ws)s, 'event', 'endpoint', %(now)s, 'event', %(c)s,"
        "        jsonb_build_object('type', 'action.published', 'data',"
        "                           jsonb_build_object('id', md5((g / 2)::text)))"
        " from generate_series(1, 50000) g",
        {"ws": workspace, "now": now, "c": connection},
    )
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %(ws)s, 'log', 't', %(at)s from generate_series(1, 50000) g",
        {"ws": workspace, "at": now + timedelta(hours=1)},
    )
    conn.execute("analyze scheduled_actions")
    ids = [r[0] for r in conn.execute(
        "select id from scheduled_actions where source = 'event' limit 500"
    )] + [uuid4()]  # fmt: skip
    plan = plan_of(conn, query("events_waiting_behind"), {"ids": ids})
    assert index_scans(plan) == {
        "scheduled_actions_pkey", "ix_scheduled_actions_event_subject",
    }, json.dumps(plan, indent=1)  # fmt: skip
