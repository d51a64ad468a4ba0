"""The tick on a real Postgres: kill switches, zombies, expiry, redelivery, draining, races."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from uuid import UUID

from tests.conftest import make_workspace
from tests.engine import RecordingQueues, in_queue, row, seed, statuses
from tickwork.engine.tick import run_tick
from tickwork.platform.config import ActionTypeConfig, Settings
from tickwork.platform.db import connect
from tickwork.platform.queues.enqueue import enqueue_soon
from tickwork.platform.queues.memory import InProcessQueue, InProcessQueues, Message
from tickwork.platform.queues.port import decode_body


def with_types(settings: Settings, **types: ActionTypeConfig) -> Settings:
    return settings.model_copy(update={"action_types": {**settings.action_types, **types}})


def test_due_rows_are_enqueued_with_whole_second_delays(conn, workspace, settings, now):
    # Given one row due now and one due 30.7 s ahead (inside the look-ahead)
    [due_now] = seed(conn, workspace, 1, now - timedelta(seconds=1))
    [soon] = seed(conn, workspace, 1, now + timedelta(seconds=30.7))
    [later] = seed(conn, workspace, 1, now + timedelta(minutes=10))
    queues = RecordingQueues()
    # When the tick runs
    summary = run_tick(conn, queues, settings, clock=lambda: now)
    # Then both near rows are sent with the whole seconds not yet passed, the far one is not
    delays = {i: m.delay_seconds for m in queues.sent["log"] for i in m.action_ids}
    assert delays == {due_now: 0, soon: 30}
    assert summary.enqueued == {"log": 2}
    assert not in_queue(conn, later)
    assert in_queue(conn, soon)
    assert row(conn, soon)["status"] == "queued"


def test_the_tick_drains_in_batches_without_a_fixed_cap(conn, workspace, settings, now):
    seed(conn, workspace, 5000, now - timedelta(seconds=1))
    queues = RecordingQueues()
    small_batches = settings.model_copy(update={"tick_batch_size": 700})
    summary = run_tick(conn, queues, small_batches)
    assert summary.enqueued == {"log": 5000}
    assert summary.passes == 8  # 7 full batches and a last partial one
    assert len(set(queues.ids())) == 5000
    # and a second tick finds nothing more to send
    assert run_tick(conn, RecordingQueues(), settings).due == 0


def test_global_kill_switch_enqueues_nothing_and_loses_nothing(conn, workspace, settings, now):
    ids = seed(conn, workspace, 20, now - timedelta(seconds=1))
    queues = RecordingQueues()
    off = settings.model_copy(update={"dispatch_enabled": False})
    summary = run_tick(conn, queues, off)
    assert summary.dispatch_enabled is False
    assert summary.due == 0
    assert queues.ids() == []
    assert statuses(conn) == {"queued": 20}
    # switched back on, the rows go
    assert run_tick(conn, queues, settings).enqueued == {"log": 20}
    assert sorted(queues.ids()) == sorted(ids)


def test_per_type_kill_switch_holds_only_that_type(conn, workspace, settings, now):
    seed(conn, workspace, 3, now, action_type="log")
    seed(conn, workspace, 4, now, action_type="webhook")
    queues = RecordingQueues()
    paused = settings.model_copy(update={"paused_action_types": frozenset({"webhook"})})
    summary = run_tick(conn, queues, paused)
    assert summary.enqueued == {"log": 3}
    assert queues.ids("webhook") == []
    assert run_tick(conn, queues, settings).enqueued == {"webhook": 4}


def test_zombies_become_failed_stuck_and_are_not_sent_again(conn, workspace, settings, now):
    [zombie, fresh] = seed(conn, workspace, 2, now - timedelta(hours=1))
    run_tick(conn, RecordingQueues(), settings)  # handed to their queue, then claimed:
    conn.execute(
        "update scheduled_actions set status = 'submitted', attempt_count = 1,"
        " enqueued_at = now() - interval '21 minutes',"
        " submitted_at = now() - interval '20 minutes' where id = %s",
        (zombie,),
    )
    conn.execute(
        "update scheduled_actions set status = 'submitted', attempt_count = 1,"
        " enqueued_at = now() - interval '21 minutes',"
        " submitted_at = now() - interval '1 minute' where id = %s",
        (fresh,),
    )
    queues = RecordingQueues()
    summary = run_tick(conn, queues, settings)  # stuck timeout 900 s
    assert summary.recovered == 1
    assert (row(conn, zombie)["status"], row(conn, zombie)["error_code"]) == ("failed", "stuck")
    assert row(conn, fresh)["status"] == "submitted"
    assert queues.ids() == []


def test_rows_later_than_their_max_lateness_expire(conn, workspace, settings, now):
    strict = with_types(settings, log=ActionTypeConfig(provider="log", max_lateness_seconds=60))
    [stale] = seed(conn, workspace, 1, now - timedelta(minutes=5))
    [late_but_fine] = seed(conn, workspace, 1, now - timedelta(seconds=30))
    [other_type] = seed(conn, workspace, 1, now - timedelta(minutes=5), action_type="webhook")
    queues = RecordingQueues()
    summary = run_tick(conn, queues, strict)
    assert summary.expired == 1
    assert (row(conn, stale)["status"], row(conn, stale)["error_code"]) == ("failed", "expired")
    assert sorted(queues.ids()) == sorted([late_but_fine, other_type])


def test_a_lost_message_is_enqueued_again_after_the_redelivery_timeout(
    conn, workspace, settings, now
):
    # Given two rows long overdue, one handed to its queue 20 minutes ago by a producer, and
    # two sent by the tick's pass: one 20 minutes ago, one a minute ago
    [lost, recent] = seed(conn, workspace, 2, now - timedelta(minutes=30))
    [passed_long_ago] = seed(conn, workspace, 1, now - timedelta(minutes=29))
    [passed_lately] = seed(conn, workspace, 1, now - timedelta(minutes=28))
    conn.execute(
        "update action_queue set enqueued_at = now() - interval '20 minutes' where id = %s",
        (lost,),
    )
    conn.execute(
        "update action_queue set enqueued_at = now() - interval '1 minute' where id = %s",
        (recent,),
    )
    run_tick(conn, RecordingQueues(), settings)
    # (one pass reached both: made two, the first 20 minutes ago)
    conn.execute("delete from tick_passes")
    for action_id, ago in ((passed_long_ago, "20 minutes"), (passed_lately, "1 minute")):
        conn.execute(
            "insert into tick_passes (action_type, upto_due, upto_id, passed_at)"
            " select action_type, due_at, id, now() - %s::interval from action_queue"
            " where id = %s",
            (ago, action_id),
        )
    queues = RecordingQueues()
    # When the tick runs again
    summary = run_tick(conn, queues, settings)  # redelivery timeout 900 s
    # Then only the rows whose message is older than the timeout are sent again
    assert summary.redelivered == 2
    assert sorted(queues.ids()) == sorted([lost, passed_long_ago])
    assert in_queue(conn, lost)
    assert in_queue(conn, passed_lately)


def test_rows_whose_send_failed_are_unmarked_for_the_next_pass(conn, workspace, settings, now):
    # Given five rows due a second apart: a message each
    ids = seed(conn, workspace, 5, now - timedelta(seconds=10), spread=timedelta(seconds=5))
    queues = RecordingQueues()
    queues.refuse = {ids[1], ids[3]}
    summary = run_tick(conn, queues, settings)
    assert summary.send_failures == 2
    assert summary.due == 5
    assert not in_queue(conn, ids[1])
    assert in_queue(conn, ids[0])
    queues.refuse = set()
    assert run_tick(conn, queues, settings).enqueued == {"log": 2}
    assert sorted(queues.ids()) == sorted(ids)


def test_rows_due_together_share_messages_and_a_failed_one_unmarks_its_rows(
    conn, workspace, settings, now
):
    # Given 25 rows due at the same instant, of a type whose messages carry up to 10 rows
    ids = seed(conn, workspace, 25, now - timedelta(seconds=1))
    tens = with_types(settings, log=ActionTypeConfig(provider="log", rows_per_message=10))
    queues = RecordingQueues()
    queues.refuse = {ids[0]}
    # When the tick sends them and the queue refuses the message naming one of them
    summary = run_tick(conn, queues, tens)
    # Then they went in three messages, and the rows of the refused one are unmarked
    refused = set(ids) - set(queues.ids())
    assert ids[0] in refused
    assert sorted([len(m.action_ids) for m in queues.sent["log"]] + [len(refused)]) == [5, 10, 10]
    assert summary.send_failures == len(refused)
    assert summary.enqueued == {"log": 25 - len(refused)}
    assert {i: not in_queue(conn, i) for i in ids} == {i: i in refused for i in ids}
    # And the next tick sends them, due together as before
    queues.refuse = set()
    assert run_tick(conn, queues, tens).enqueued == {"log": len(refused)}
    assert sorted(queues.ids()) == sorted(ids)
    assert all(m.due_at == now - timedelta(seconds=1) for m in queues.sent["log"])


def test_rows_of_unconfigured_types_stay_queued(conn, workspace, settings, now):
    [orphan] = seed(conn, workspace, 1, now, action_type="retired_type")
    queues = RecordingQueues()
    assert run_tick(conn, queues, settings).due == 0
    assert row(conn, orphan)["status"] == "queued"


def test_concurrent_ticks_never_enqueue_a_row_twice(database_url, conn, workspace, settings, now):
    ids = seed(conn, workspace, 2000, now - timedelta(seconds=1))
    queues = RecordingQueues()
    small_batches = settings.model_copy(update={"tick_batch_size": 50})
    start = threading.Barrier(4)
    errors: list[BaseException] = []

    def tick() -> None:
        with connect(database_url) as own:
            start.wait()
            try:
                run_tick(own, queues, small_batches)
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=tick) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    counts = Counter(queues.ids())
    assert set(counts) == set(ids)
    assert max(counts.values()) == 1


class FlushWaitOf(RecordingQueues):
    """Records, at each send, whether the sending transaction's commit will wait for the
    disk (the tick sends inside the transaction that marked the rows)."""

    def __init__(self, conn):
        super().__init__()
        self.conn = conn
        self.seen: list[str] = []

    def send(self, action_type, messages):
        self.seen.append(self.conn.execute("show synchronous_commit").fetchone()[0])
        return super().send(action_type, messages)


def test_a_mark_commits_without_waiting_for_the_disk_and_the_session_is_left_as_it_was(
    conn, workspace, settings, now
):
    # Given rows due now, two passes' worth, and a session that waits for the disk (the
    # embedded test server does not, server-wide)
    conn.execute("set synchronous_commit = on")
    seed(conn, workspace, 3, now - timedelta(seconds=1))
    queues = FlushWaitOf(conn)
    # When the tick marks and sends them
    run_tick(conn, queues, settings.model_copy(update={"tick_batch_size": 2}))
    # Then each pass's transaction skipped the flush wait (a lost mark only repeats a
    # message), and the session's own setting is untouched afterwards
    assert queues.seen == ["off", "off"]
    assert conn.execute("show synchronous_commit").fetchone()[0] == "on"


def test_marking_inside_another_transaction_leaves_that_transaction_durable(
    conn, workspace, settings, now
):
    # Given a row due now, handed over from inside a transaction of the caller's
    conn.execute("set synchronous_commit = on")
    [due] = seed(conn, workspace, 1, now - timedelta(seconds=1))
    queues = FlushWaitOf(conn)
    with conn.transaction():
        assert enqueue_soon(conn, queues, [due], settings) == 1
        # Then the caller's transaction still waits for the disk at its commit
        assert conn.execute("show synchronous_commit").fetchone()[0] == "on"
    assert queues.seen == ["on"]


def test_a_small_workspaces_row_is_received_ahead_of_a_big_ones_backlog(
    conn, workspace, settings, now
):
    # Given a big workspace's 2,000 webhooks due now and a small one's single row due with
    # them (a burst its rules made), and one-row messages
    small = make_workspace(conn, "Small")
    seed(conn, workspace, 2000, now - timedelta(seconds=1))
    [mine] = seed(conn, small, 1, now - timedelta(milliseconds=500))
    one_each = with_types(settings, log=ActionTypeConfig(provider="log", rows_per_message=1))
    queues = InProcessQueues()
    # When the tick hands them to the queue
    assert run_tick(conn, queues, one_each).enqueued == {"log": 2001}
    # Then the first batch a dispatcher receives holds the small workspace's row, not only
    # the big one's backlog, which follows whole
    first, *rest = batches(queues.queue("log"))
    assert mine in ids_of(first)
    assert len(ids_of(first)) + sum(len(ids_of(b)) for b in rest) == 2001


def batches(queue: InProcessQueue) -> list[list[Message]]:
    found = []
    while batch := queue.receive(10):
        found.append(batch)
    return found


def ids_of(batch: list[Message]) -> list[UUID]:
    return [row.action_id for m in batch for row in decode_body(m.body) or []]
