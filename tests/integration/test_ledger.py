"""The delivery ledger on a real Postgres: one entry per provider call, written by the
finalize's own statement, matching what the receiver got; zombies recovered as `stuck`;
nothing secret in it; nothing when no call was made."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from psycopg.rows import dict_row

from tests.conftest import make_workspace
from tests.engine import claimed_an_hour_ago, drain, row, seed, webhook_receiver
from tests.fakes.webhook_server import FakeWebhookServer, Reply
from tests.waiting import wait_for
from tickwork.actions import model, store
from tickwork.actions.model import Attempt
from tickwork.engine.dispatch import Dispatcher
from tickwork.engine.tick import recover_stuck, run_tick
from tickwork.ledger.attempts import attempts_by_action
from tickwork.platform.queues.port import OutgoingMessage
from tickwork.tenancy import tenant_transaction


def calls(conn: Any, workspace: UUID, ids: list[UUID]) -> dict[UUID, list[dict[str, Any]]]:
    """What the ledger says of these actions (its entries and the rows' own records)."""
    found = attempts_by_action(conn, workspace, ids)
    return {i: [asdict(a) for a in found.get(i, [])] for i in ids}


def ledger(conn: Any, action_id: UUID | None = None) -> list[dict[str, Any]]:
    """The ledger table's own entries."""
    with conn.cursor(row_factory=dict_row) as cur:
        if action_id is None:
            return cur.execute(
                "select * from action_attempts order by action_id, attempt"
            ).fetchall()
        return cur.execute(
            "select * from action_attempts where action_id = %s order by attempt", (action_id,)
        ).fetchall()


@pytest.fixture
def hook(runtime) -> Iterator[FakeWebhookServer]:
    with webhook_receiver(runtime, max_attempts=5) as server:
        yield server


def webhook_rows(conn, workspace, now, count: int = 1) -> list[UUID]:
    rows = conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, payload,"
        " publish_at) select %s, 'webhook', 'primary', '{\"n\": 1}', %s"
        " from generate_series(1, %s) returning id",
        (workspace, now - timedelta(seconds=1), count),
    ).fetchall()
    return [r[0] for r in rows]


def settle(conn, runtime, ids: list[UUID], timeout: float = 15) -> None:
    run_tick(conn, runtime.queues, runtime.settings)

    def settled() -> bool:
        drain(runtime, "webhook", wait=0.2)
        return all(row(conn, i)["status"] in ("published", "failed") for i in ids)

    wait_for(settled, timeout, interval=0, message="rows did not settle")


def test_every_call_is_one_entry_matching_the_receivers_log(conn, workspace, runtime, hook, now):
    # Given a receiver that answers 503 (not processed), then too late (may have arrived:
    # the webhook deduplicates, so it is tried again), then 200 with its request id
    [action_id] = webhook_rows(conn, workspace, now)
    hook.then(Reply(503, body="busy"), Reply(200, delay=1.0), Reply(200, {"x-request-id": "r-9"}))
    # When it is dispatched until it settles
    settle(conn, runtime, [action_id])
    # Then the ledger has one entry per request the receiver logged, in order, with the class
    # of each outcome and the provider's id for the delivery
    entries = calls(conn, workspace, [action_id])[action_id]
    assert len(entries) == len(hook.requests) == 3
    assert [e["attempt"] for e in entries] == [1, 2, 3]
    assert [e["outcome"] for e in entries] == ["transient", "ambiguous", "delivered"]
    assert "HTTP 503" in entries[0]["excerpt"]
    assert entries[2]["provider_message_id"] == row(conn, action_id)["provider_id"] == "r-9"
    # The calls that did not publish it are the table's; the one that did, the row's own
    assert [e["outcome"] for e in ledger(conn, action_id)] == ["transient", "ambiguous"]
    # The attempt left when the receiver saw it, and its latency is the call's duration
    for entry, request in zip(entries, hook.requests, strict=True):
        assert entry["started_at"].timestamp() <= request.arrived_at + 0.05
        assert entry["finished_at"] >= entry["started_at"]
        assert entry["latency_ms"] >= 0
    assert entries[1]["latency_ms"] >= 400  # the 0.5 s deadline, not the answer


def test_a_refusal_is_recorded_with_its_code_and_no_secret(conn, workspace, runtime, hook, now):
    # Given a receiver that refuses and echoes a token in its answer
    [action_id] = webhook_rows(conn, workspace, now)
    leaked = "sk_live_" + "Z" * 40
    hook.then(
        Reply(400, body=f'{{"error": "bad", "token": "{leaked}", "auth": "Bearer abcdefgh12345"}}')
    )
    settle(conn, runtime, [action_id])
    [entry] = ledger(conn, action_id)
    assert (entry["outcome"], entry["provider_code"]) == ("rejected", "provider_rejected")
    assert row(conn, action_id)["error_code"] == "provider_rejected"
    assert leaked not in entry["excerpt"]
    assert "abcdefgh12345" not in entry["excerpt"]
    assert len(entry["excerpt"]) <= 160


def test_a_claim_undone_before_any_call_leaves_no_entry(conn, workspace, runtime, now):
    # Given a row whose dispatcher is out of time before the provider call
    [action_id] = seed(conn, workspace, 1, now - timedelta(seconds=1))
    body = OutgoingMessage((action_id,), "log", now, 0).body()
    Dispatcher(runtime).dispatch([("m1", body)], deadline=time.monotonic() - 1)
    # Then the claim is reverted and the ledger has nothing: no call was made
    assert row(conn, action_id)["status"] == "queued"
    assert ledger(conn, action_id) == []


def test_a_zombie_is_recorded_stuck_and_a_late_outcome_replaces_it(conn, workspace, runtime, now):
    # Given a row claimed by a dispatcher that never wrote its outcome
    [action_id] = seed(conn, workspace, 1, now - timedelta(seconds=1))
    assert store.claim(conn, "log", [action_id])
    claimed_an_hour_ago(conn)
    # When the tick recovers it
    assert recover_stuck(conn, runtime.settings) == 1
    [entry] = ledger(conn, action_id)
    assert (entry["attempt"], entry["outcome"], entry["finished_at"]) == (1, "stuck", None)
    assert entry["started_at"] == row(conn, action_id)["submitted_at"]
    # And the outcome turns up later (kept by the process that could not write it)
    applied = store.finalize(conn, [model.published(action_id, "p-7")])
    # Then the row is left failed/stuck (it is no longer submitted) but the ledger says what
    # the provider answered, for the resolver and a person to see
    assert applied == {}
    assert (row(conn, action_id)["status"], row(conn, action_id)["error_code"]) == (
        "failed",
        "stuck",
    )
    [entry] = ledger(conn, action_id)
    assert (entry["outcome"], entry["provider_message_id"]) == ("delivered", "p-7")
    # A second recovery pass or late write changes nothing more
    assert recover_stuck(conn, runtime.settings) == 0


def test_the_ledger_switched_off_records_nothing(conn, workspace, runtime, hook, now):
    ids = webhook_rows(conn, workspace, now, 2)
    hook.then(Reply(400, body="no"), Reply(400, body="no"))
    runtime.settings = runtime.settings.model_copy(update={"attempts_ledger": False})
    settle(conn, runtime, ids)
    assert len(hook.requests) == 2
    assert {row(conn, i)["error_code"] for i in ids} == {"provider_rejected"}
    assert ledger(conn) == []


def test_a_wave_records_each_of_its_calls_once(conn, workspace, runtime, now):
    ids = seed(conn, workspace, 300, now - timedelta(seconds=1))
    run_tick(conn, runtime.queues, runtime.settings)
    assert drain(runtime, batch_size=100).published == 300
    found = calls(conn, workspace, ids)
    assert {i: len(e) for i, e in found.items()} == dict.fromkeys(ids, 1)
    entries = [e for i in ids for e in found[i]]
    assert {(e["attempt"], e["outcome"]) for e in entries} == {(1, "delivered")}
    assert [e["provider_message_id"] for e in entries] == [f"log-{i}" for i in ids]
    assert all(e["started_at"] <= e["finished_at"] for e in entries)
    # Delivered at once, each row is its own call's record: the hot path wrote no entry
    assert ledger(conn) == []


def failed_calls(conn, workspace, count: int, now) -> list[UUID]:
    """Rows claimed and refused, their calls in the ledger table (as the dispatcher does)."""
    ids = seed(conn, workspace, count, now - timedelta(seconds=1))
    claimed = store.claim(conn, "log", ids)
    t = time.time()
    store.finalize(conn, [
        model.failed(a.id, "provider_rejected", "no")._replace(
            attempt=Attempt(a.attempt_count, t - 0.1, t, "rejected", "provider_rejected"))
        for a in claimed
    ])  # fmt: skip
    return ids


def test_the_api_login_sees_only_its_workspaces_entries(conn, workspace, runtime, now):

    other = make_workspace(conn, "Other")
    mine = failed_calls(conn, workspace, 2, now)
    failed_calls(conn, other, 3, now)
    assert len(ledger(conn)) == 5
    api = runtime.api_database().connection()
    with tenant_transaction(api, workspace):
        seen = api.execute("select action_id, workspace_id from action_attempts").fetchall()
        # and it cannot write an entry into another workspace
        with pytest.raises(Exception, match="row-level security"), api.transaction():
            api.execute(
                "insert into action_attempts (action_id, attempt, workspace_id, started_at,"
                " outcome) values (%s, 9, %s, now(), 'stuck')",
                (mine[0], other),
            )
    assert {r[0] for r in seen} == set(mine)
    assert {r[1] for r in seen} == {workspace}


def test_entries_go_with_their_action_and_its_workspace(conn, workspace, runtime, now):

    other = make_workspace(conn, "Other")
    ids = failed_calls(conn, workspace, 2, now)
    kept = failed_calls(conn, other, 1, now)
    conn.execute("delete from scheduled_actions where id = %s", (ids[0],))
    assert {e["action_id"] for e in ledger(conn)} == {ids[1], kept[0]}
    conn.execute("delete from workspaces where id = %s", (workspace,))
    assert {e["action_id"] for e in ledger(conn)} == {kept[0]}
