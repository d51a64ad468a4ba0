"""The rules' hot queries (every event and every date write runs them) use their indexes."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_query_plans import index_scans, plan_of, seq_scans
from tickwork.platform.sql import query


@pytest.fixture
def many_rules(conn, workspace):
    """1,000 rules over 100 event types and 100 entity types, 20k actions they made."""
    conn.execute(
        "insert into rules (workspace_id, name, trigger_type, event_type, action_type,"
        " target_key) select %s, 'r' || g, 'event', 'type.' || (g %% 100), 'log', 't'"
        " from generate_series(1, 500) g",
        (workspace,),
    )
    conn.execute(
        "insert into rules (workspace_id, name, trigger_type, entity_type, reference,"
        " offset_seconds, action_type, target_key) select %s, 't' || g, 'time',"
        " 'kind_' || (g %% 100), 'start', -3600, 'log', 't' from generate_series(1, 500) g",
        (workspace,),
    )
    conn.execute(
        "with a as (insert into scheduled_actions (workspace_id, action_type, target_key,"
        " publish_at, source, dedupe_key) select %(ws)s, 'log', 't', now() + interval '1 day',"
        " 'rule', 'key-' || g from generate_series(1, 20000) g returning id, dedupe_key)"
        " insert into rule_actions (action_id, workspace_id, rule_id, kind, idempotency_key,"
        " entity_type, entity_id, reference, reference_at, context)"
        " select a.id, %(ws)s, (select id from rules where trigger_type = 'time' limit 1),"
        " 'time', a.dedupe_key, 'booking', 'bk-' || a.dedupe_key, 'start', now(), '{}'"
        " from a",
        {"ws": workspace},
    )
    for table in ("rules", "scheduled_actions", "rule_actions"):
        conn.execute(f"analyze {table}")


@pytest.mark.parametrize(
    ("name", "params", "index"),
    [
        ("event_rules", {"event_type": "type.7"}, "ix_rules_event"),
        ("time_rules", {"entity_type": "kind_7"}, "ix_rules_time"),
        ("key_history", {"idempotency_key": "key-77"}, "ix_rule_actions_key"),
        ("live_entity_actions", {"entity_type": "booking", "entity_id": "bk-key-77"},
         "ix_rule_actions_entity"),
    ],
)  # fmt: skip
def test_a_producers_lookup_uses_its_index(conn, workspace, many_rules, name, params, index):
    plan = plan_of(conn, query(name), {"workspace_id": workspace} | params)
    assert index in index_scans(plan), json.dumps(plan, indent=1)
    assert not {"rules", "rule_actions", "scheduled_actions"} & seq_scans(plan)
