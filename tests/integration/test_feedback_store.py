"""tickwork.feedback.store on a real Postgres: `record_event` moves an attempt's delivery
state only upwards, once per event, and says what changed; the callback's look-ups use
their indexes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from uuid import UUID, uuid4

import psycopg
import pytest

from tests.integration.test_query_plans import index_scans, plan_of, seq_scans
from tickwork.connections import Connection
from tickwork.feedback.model import DeliveryEvent, Suppress, rank
from tickwork.feedback.store import callback_connection, counts_of, record_event
from tickwork.ledger.attempts import attempts_of
from tickwork.platform.db import connect, local_api_login
from tickwork.platform.sql import query
from tickwork.tenancy import tenant_transaction


def make_connection(conn, workspace: UUID, provider: str = "postmark") -> Connection:
    row = conn.execute(
        "insert into connections (workspace_id, name, provider, settings, secret_ref)"
        " values (%s, %s, %s, '{}', 'memory/x') returning id",
        (workspace, f"c-{uuid4()}", provider),
    ).fetchone()
    found = callback_connection(conn, row[0])
    assert found is not None
    return found


def published(conn, workspace: UUID, connection: Connection, message_id: str) -> UUID:
    row = conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
        " status, attempt_count, submitted_at, finished_at, provider_id, connection_id)"
        " values (%s, 'email', 't', now(), 'published', 1, now() - interval '1 second', now(),"
        " %s, %s) returning id",
        (workspace, message_id, connection.id),
    ).fetchone()
    return UUID(str(row[0]))


def event(key: str, status, bounce=None, message_id: str = "m-1", **kw) -> DeliveryEvent:
    at = datetime(2026, 12, 5, 8, 0, tzinfo=UTC)
    return DeliveryEvent(key, message_id, status, at, bounce=bounce, **kw)


def test_states_only_move_up_and_say_what_changed(conn, workspace):
    connection = make_connection(conn, workspace)
    action_id = published(conn, workspace, connection, "m-1")
    first = record_event(conn, connection, event("e1", "delivered"))
    assert (first.outcome, first.action_id, first.attempt) == ("applied", action_id, 1)
    assert first.before is None
    assert first.after is not None
    assert first.changed
    assert record_event(conn, connection, event("e2", "sent")).outcome == "stale"
    assert record_event(conn, connection, event("e1", "bounced", "hard")).outcome == "duplicate"
    soft = record_event(conn, connection, event("e3", "bounced", "soft"))
    assert soft.outcome == "applied"
    assert soft.before.status == "delivered"
    hard = record_event(conn, connection, event("e4", "bounced", "hard", suppress=(
        Suppress("email", "Ann@Example.com", "hard_bounce"),)))  # fmt: skip
    assert hard.changed
    assert [s.address for s in hard.suppressed] == ["Ann@Example.com"]
    # Another recipient's hard bounce of the same message: the state stays, the address is new
    other = record_event(conn, connection, event("e5", "bounced", "hard", suppress=(
        Suppress("email", "bob@example.com", "hard_bounce"),)))  # fmt: skip
    assert (other.outcome, other.changed, len(other.suppressed)) == ("applied", False, 1)
    assert record_event(conn, connection, event("e6", "bounced", "soft")).outcome == "stale"
    assert record_event(conn, connection, event("e7", "complained")).changed
    unknown = record_event(conn, connection, event("e8", "delivered", message_id="nope"))
    assert unknown.outcome == "unmatched"
    [entry] = attempts_of(conn, workspace, action_id)
    assert (entry.outcome, entry.delivery_status, entry.provider_message_id) == (
        "delivered", "complained", "m-1")  # fmt: skip
    counts = counts_of(conn, workspace, [connection.id])[connection.id].counts
    assert counts == {"applied": 5, "stale": 2, "duplicate": 1, "unmatched": 1, "ignored": 0,
                      "unverified": 0}  # fmt: skip


def test_the_ranks_order_the_states():
    order = [rank("sent"), rank("delivered"), rank("undelivered"), rank("bounced", "soft"),
             rank("bounced", "hard"), rank("complained")]  # fmt: skip
    assert order == sorted(order)
    assert len(set(order)) == len(order)


def test_the_api_role_records_only_inside_the_connections_workspace(conn, workspace, database_url):
    connection = make_connection(conn, workspace)
    action_id = published(conn, workspace, connection, "m-9")
    conn.commit()
    with connect(local_api_login(database_url)) as api:
        # As the API's login, with no workspace yet: only the lookup function answers
        found = callback_connection(api, connection.id)
        assert found is not None
        assert found.workspace_id == workspace
        with tenant_transaction(api, workspace):
            recorded = record_event(api, found, event("a1", "delivered", message_id="m-9"))
        assert recorded.action_id == action_id
        assert recorded.changed
        # In another workspace's transaction the row is not there
        other = conn.execute("insert into workspaces (name, timezone) values ('B', 'UTC')"
                             " returning id").fetchone()[0]  # fmt: skip
        conn.commit()
        with pytest.raises(psycopg.errors.InsufficientPrivilege), tenant_transaction(api, other):
            record_event(api, found, event("a2", "bounced", "hard", message_id="m-9"))


def test_a_callbacks_lookups_use_their_indexes(conn, workspace):
    connection = make_connection(conn, workspace)
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
        " status, attempt_count, submitted_at, finished_at, provider_id, connection_id)"
        " select %s, 'email', 't', now(), 'published', 1, now(), now(), 'm-' || g, %s"
        " from generate_series(1, 50000) g",
        (workspace, connection.id),
    )
    conn.execute(
        "insert into callback_receipts (connection_id, event_key, workspace_id, received_at)"
        " select %s, 'k-' || g, %s, now() - g * interval '1 minute'"
        " from generate_series(1, 50000) g",
        (connection.id, workspace),
    )
    conn.execute("analyze scheduled_actions")
    conn.execute("analyze callback_receipts")
    target = plan_of(conn, query("delivery_target"), {"connection_id": connection.id,
                     "workspace_id": workspace, "message_id": "m-777"})  # fmt: skip
    assert {"provider_messages_pkey", "scheduled_actions_pkey"} <= index_scans(target), json.dumps(
        target
    )
    assert not seq_scans(target)
    receipt = plan_of(conn, query("note_receipt"), {
        "connection_id": connection.id, "workspace_id": workspace, "event_key": "new",
        "keep_days": 7})  # fmt: skip
    assert "callback_receipts" not in seq_scans(receipt), json.dumps(receipt)
