"""The digests' hot queries (every event of a digest rule runs them) use their indexes."""

from __future__ import annotations

import json
from uuid import uuid4

import pytest

from tests.integration.test_query_plans import index_scans, plan_of, seq_scans
from tickwork.digests.model import group_key
from tickwork.platform.sql import query

RULE = uuid4()


@pytest.fixture
def many_digests(conn, workspace):
    """20k closed digests of one rule, one item each, and one open digest per 100 groups."""
    conn.execute(
        "insert into digests (workspace_id, source, source_id, recipient_id, target_key,"
        " digest_key, group_key, status, time_window, opened_at, closes_at)"
        " select %(ws)s, 'rule', %(rule)s, 'r' || (g %% 1000), 't', '',"
        " encode(sha256(('g' || (g %% 1000))::bytea), 'hex'),"
        " case when g <= 1000 then 'open' else 'closed' end, '{\"seconds\": 60}', now(),"
        " now() + interval '1 minute' from generate_series(1, 20000) g",
        {"ws": workspace, "rule": RULE},
    )
    conn.execute(
        "insert into digest_items (digest_id, workspace_id, source, source_id, group_key,"
        " item_key, position, data, occurred_at)"
        " select id, workspace_id, source, source_id, group_key, 'evt-' || id, 1, '{}', now()"
        " from digests"
    )
    for table in ("digests", "digest_items"):
        conn.execute(f"analyze {table}")


@pytest.mark.parametrize(
    ("name", "params", "index"),
    [
        ("lock_open_digest", {"group_key": group_key("r7", "t", "")}, "ux_digests_open"),
        ("digest_of_item", {"group_key": group_key("r7", "t", ""), "item_key": "evt-x"},
         "ux_digest_items_key"),
    ],
)  # fmt: skip
def test_an_items_lookup_uses_its_index(conn, workspace, many_digests, name, params, index):
    base = {"workspace_id": workspace, "source": "rule", "source_id": RULE}
    plan = plan_of(conn, query(name), base | params)
    assert index in index_scans(plan), json.dumps(plan, indent=1)
    assert not {"digests", "digest_items"} & seq_scans(plan)
