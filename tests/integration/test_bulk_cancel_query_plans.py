"""A bulk cancel by parent walks only that parent's pending rows: EXPLAIN on a table of
50,000 pending rows (and their sent history) shows each batch and each "more left?" probe
on the queue's index of the parent (or the rule's links), and the tick's due query still on
its own."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from tests.integration.test_query_plans import index_scans, plan_of, seq_scans
from tickwork.platform.queues.enqueue import WATERMARK_START
from tickwork.platform.sql import query

FAR = {"due_from": "0001-01-01T00:00:00Z", "due_to": "9999-12-31T00:00:00Z"}
NONE_ELSE = {"action_type": None, "target_key": None, "thing_id": None}


@pytest.fixture
def parents(conn, workspace, now) -> dict[str, Any]:
    """50k pending rows over 1,000 tags, recipients, things and bookings, as much sent
    history, a rule's links to the bookings, and 20k enrollments over 100 campaigns."""
    conn.execute(
        "insert into recipients (workspace_id, recipient_id, timezone)"
        " select %s, 'r' || g, 'UTC' from generate_series(0, 999) g",
        (workspace,),
    )
    for status, finished in (("queued", None), ("published", now)):
        conn.execute(
            "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
            " status, finished_at, tags, recipient_id, thing_id)"
            " select %(ws)s, 'webhook', 't' || g, %(at)s + g * interval '1 second', %(status)s,"
            " %(finished)s, array['tag' || g %% 1000, 'all'], 'r' || g %% 1000,"
            " 'thing' || g %% 1000 from generate_series(1, 50000) g",
            {"ws": workspace, "at": now + timedelta(hours=1), "status": status,
             "finished": finished},
        )  # fmt: skip
    rule = conn.execute(
        "insert into rules (workspace_id, name, trigger_type, entity_type, reference,"
        " offset_seconds, action_type, target_key) values (%s, 'r', 'time', 'booking',"
        " 'start', 0, 'webhook', 't') returning id",
        (workspace,),
    ).fetchone()
    assert rule is not None
    conn.execute(
        "insert into rule_actions (action_id, workspace_id, rule_id, kind, idempotency_key,"
        " entity_type, entity_id, reference, reference_at, context)"
        " select id, workspace_id, %s, 'time', id::text, 'booking',"
        " 'bk' || (row_number() over (order by id)) %% 1000, 'start', publish_at, '{}'"
        " from scheduled_actions",
        (rule[0],),
    )
    campaigns = [
        row[0]
        for row in conn.execute(
            "insert into campaigns (workspace_id, name, steps) select %s, 'c' || g,"
            " '[{}]'::jsonb from generate_series(1, 100) g returning id",
            (workspace,),
        ).fetchall()
    ]
    conn.execute(
        "insert into enrollments (workspace_id, campaign_id, recipient_id, starts_at, status)"
        " select %s, c.id, 'r' || g, now(), case when g %% 10 = 0 then 'active'"
        " else 'completed' end"
        " from unnest(%s::uuid[]) c (id) cross join generate_series(0, 199) g",
        (workspace, campaigns),
    )
    conn.execute("analyze")
    return {"workspace_id": workspace, "campaign_id": campaigns[0], "now": now}


CASES = [
    ("bulk_cancel_by_tag", {"tag": "tag7"}, "ix_action_queue_tags"),
    ("pending_of_tag", {"tag": "tag7"}, "ix_action_queue_tags"),
    # 'all' is on every row: the queue holds only the pending ones
    ("bulk_cancel_by_tag", {"tag": "all"}, "ix_action_queue_tags"),
    ("bulk_cancel_by_recipient", {"recipient_id": "r7"}, "ix_action_queue_recipient"),
    ("pending_of_recipient", {"recipient_id": "r7"}, "ix_action_queue_recipient"),
    ("bulk_cancel_by_entity", {"entity_type": "booking", "entity_id": "bk7"},
     "ix_rule_actions_entity"),
    ("pending_of_entity", {"entity_type": "booking", "entity_id": "bk7"},
     "ix_rule_actions_entity"),
]  # fmt: skip


def test_a_cancel_by_parent_reads_only_the_parents_pending_rows_by_index(conn, parents):
    """One table for every check (building it is most of the test's time)."""
    # As tickwork.actions.bulk runs its batches (by_index_only): the statistics of a large
    # cancel in progress still count its cancelled rows as the parent's.
    conn.execute("set enable_seqscan = off")
    for name, given, index in CASES:
        by_tag = "tag" in given
        conn.execute(f"set enable_indexscan = {'off' if by_tag else 'on'}")
        params = {"workspace_id": parents["workspace_id"], "limit": 1000} | FAR | NONE_ELSE
        plan = plan_of(conn, query(name), params | given)
        assert index in index_scans(plan), (name, json.dumps(plan, indent=1))
        assert not seq_scans(plan), (name, json.dumps(plan, indent=1))
    for name, given, index in (
        ("active_enrollments_of_campaign", "campaign_id", "ix_enrollments_active_campaign"),
        ("active_enrollments_of_recipient", "recipient_id", "ix_enrollments_recipient"),
    ):
        value: UUID | str = parents["campaign_id"] if given == "campaign_id" else "r10"
        params = {"workspace_id": parents["workspace_id"], "limit": 1000, given: value}
        plan = plan_of(conn, query(name), params)
        assert index in index_scans(plan), (name, json.dumps(plan, indent=1))
        assert not seq_scans(plan), (name, json.dumps(plan, indent=1))

    # The tick's due query, as it runs (default settings), keeps to its own index.
    conn.execute("reset enable_seqscan")
    conn.execute("reset enable_indexscan")
    plan = plan_of(
        conn,
        query("due_after_watermark"),
        {"horizon": parents["now"], "batch_size": 500, "action_type": "webhook",
         "after_due": WATERMARK_START[0], "after_id": WATERMARK_START[1]},
    )  # fmt: skip
    scans = index_scans(plan)
    assert "ix_action_queue_due" in scans, json.dumps(plan, indent=1)
    assert not scans & {"ix_action_queue_tags", "ix_action_queue_recipient"}
