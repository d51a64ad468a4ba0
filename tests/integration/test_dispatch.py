"""The dispatcher on a real Postgres, with providers over real HTTP on loopback."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.engine import (
    claimed_an_hour_ago,
    drain,
    drain_all,
    in_queue,
    row,
    seed,
    statuses,
    webhook_receiver,
)
from tests.fakes import LOOPBACK
from tests.fakes.webhook_server import SECRET, FakeWebhookServer, Reply
from tests.handlers import FakeLambdaContext, load_handler
from tests.waiting import wait_for
from tickwork import runtime as runtime_slot
from tickwork.actions import store as actions
from tickwork.actions.model import Action
from tickwork.engine.dispatch import Dispatcher
from tickwork.engine.tick import run_tick
from tickwork.ledger.attempts import attempts_by_action
from tickwork.local.runner import sqs_record
from tickwork.platform.db import Database, connect
from tickwork.platform.queues.memory import InProcessQueues
from tickwork.platform.queues.port import OutgoingMessage, doorbells
from tickwork.providers.base import Ambiguous, Outcome, Via
from tickwork.providers.log import LogProvider
from tickwork.providers.webhook import WebhookProvider
from tickwork.runtime import Runtime


def log_provider(runtime: Runtime, action_type: str = "log") -> LogProvider:
    provider = runtime.providers.for_action_type(action_type)
    assert isinstance(provider, LogProvider)
    return provider


def send(runtime: Runtime, ids: list[Any], due_at: datetime, action_type: str = "log") -> None:
    """Put messages on the in-process queue as the tick would (without marking rows)."""
    now = datetime.now(UTC)
    runtime.queues.send(action_type, [OutgoingMessage((i,), action_type, due_at, now) for i in ids])


def delivered_ids(runtime: Runtime, action_type: str = "log") -> Counter[Any]:
    return Counter(d.action_id for d in log_provider(runtime, action_type).deliveries)


# ------------------------------------------------------------------------- basic flow


def test_tick_then_dispatch_publishes_every_row_once(conn, workspace, runtime, now):
    ids = seed(conn, workspace, 25, now - timedelta(seconds=1))
    run_tick(conn, runtime.queues, runtime.settings)
    summary = drain(runtime)
    assert summary.published == 25
    assert statuses(conn) == {"published": 25}
    assert delivered_ids(runtime) == Counter(ids)
    published = row(conn, ids[0])
    assert published["provider_id"] == f"log-{ids[0]}"
    assert published["attempt_count"] == 1


def test_duplicate_messages_deliver_once(conn, workspace, runtime, now):
    ids = seed(conn, workspace, 10, now - timedelta(seconds=1))
    for _ in range(3):
        send(runtime, ids, now)
    summary = drain(runtime, batch_size=7)
    assert summary.published == 10
    assert summary.skipped == 20
    assert delivered_ids(runtime) == Counter(ids)


def test_a_cancelled_row_whose_message_arrives_later_is_skipped(conn, workspace, runtime, now):
    [action_id] = seed(conn, workspace, 1, now - timedelta(seconds=1))
    run_tick(conn, runtime.queues, runtime.settings)
    conn.execute("update scheduled_actions set status = 'cancelled', finished_at = now()")
    summary = drain(runtime)
    assert (summary.claimed, summary.skipped) == (0, 1)
    assert delivered_ids(runtime) == Counter()
    assert row(conn, action_id)["status"] == "cancelled"


def test_a_message_far_ahead_of_its_row_is_handed_back_to_the_tick(conn, workspace, runtime, now):
    due = now + timedelta(minutes=10)
    [action_id] = seed(conn, workspace, 1, due)
    conn.execute("update action_queue set enqueued_at = now()")
    # a stray message arriving now, ten minutes early
    queue = runtime.queues.queue("log")  # type: ignore[attr-defined]
    queue.send(OutgoingMessage((action_id,), "log", due, due).body())
    messages = queue.receive(10)
    result = Dispatcher(runtime).dispatch([(m.message_id, m.body) for m in messages])
    assert result.summary.skipped == 1
    assert delivered_ids(runtime) == Counter()
    assert row(conn, action_id)["status"] == "queued"
    assert not in_queue(conn, action_id)  # the tick will send it again


def test_a_message_slightly_early_waits_out_the_remainder(conn, workspace, runtime):
    due = datetime.now(UTC) + timedelta(seconds=0.4)
    [action_id] = seed(conn, workspace, 1, due)
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        time.sleep(seconds)  # the dispatcher's own wait, recorded and then really waited

    body = OutgoingMessage((action_id,), "log", due, due).body()
    result = Dispatcher(runtime, sleep=sleep).dispatch([("m1", body)])
    assert result.summary.published == 1
    assert len(slept) == 1
    assert 0.2 < slept[0] <= 0.4
    [delivery] = log_provider(runtime).deliveries
    assert 0 <= delivery.called_at - due.timestamp() < 0.15


def rows_due(conn: Any, ids: list[Any]) -> list[datetime]:
    found = dict(conn.execute(
        "select id, publish_at from scheduled_actions where id = any(%s)", [ids]
    ).fetchall())  # fmt: skip
    return [found[i] for i in ids]


def counting_claims(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of rows each claim statement was given, in order."""
    given: list[int] = []
    claim = actions.claim

    def counted(conn: Any, action_type: str, ids: Any, **options: Any) -> Any:
        given.append(len(ids))
        return claim(conn, action_type, ids, **options)

    monkeypatch.setattr(actions, "claim", counted)
    return given


def test_a_message_of_rows_due_at_their_own_instants_is_claimed_once_and_each_called_on_time(
    conn, workspace, runtime, monkeypatch
):
    # Given 30 rows, each due at its own instant 1.5 ms apart, in one message (as the tick
    # sends rows due within the window)
    start = datetime.now(UTC) + timedelta(seconds=0.3)
    ids = seed(conn, workspace, 30, start, spread=timedelta(milliseconds=45))
    due = rows_due(conn, ids)
    [message] = doorbells(
        [(i, "log", d, workspace) for i, d in zip(ids, due, strict=True)], start, lambda _: 100
    )
    assert len(message.offsets_us) == 30
    claims = counting_claims(monkeypatch)
    result = Dispatcher(runtime).dispatch([("m1", message.body())])
    # Then one statement claims them all, and each is called at its own time, never before
    assert result.summary.published == 30
    assert claims == [30]
    called = {d.action_id: d.called_at for d in log_provider(runtime).deliveries}
    lateness = [called[i] - d.timestamp() for i, d in zip(ids, due, strict=True)]
    assert min(lateness) >= 0
    assert max(lateness) < 0.1
    # And their outcomes are written together, not one statement per row
    assert result.summary.finalizes < 30
    assert statuses(conn) == {"published": 30}


def test_rows_falling_due_every_fraction_of_a_millisecond_share_finalizes(
    conn, workspace, runtime, monkeypatch
):
    # Given 400 rows due 0.1 ms apart (10,000 a second) in messages of 100
    start = datetime.now(UTC) + timedelta(seconds=0.3)
    ids = seed(conn, workspace, 400, start, spread=timedelta(milliseconds=40))
    rows = [(i, "log", d, workspace) for i, d in zip(ids, rows_due(conn, ids), strict=True)]
    messages = doorbells(rows, start, lambda _: 100)
    assert [len(m.action_ids) for m in messages] == [100] * 4
    claims = counting_claims(monkeypatch)
    result = Dispatcher(runtime).dispatch([(f"m{i}", m.body()) for i, m in enumerate(messages)])
    # Then the claim takes the window's rows at once, and a finalize writes many rows
    assert result.summary.published == 400
    assert sum(claims) == 400
    assert len(claims) <= 2
    assert result.summary.finalizes <= 40
    assert statuses(conn) == {"published": 400}


def test_a_row_cancelled_while_its_message_waits_is_not_sent_and_its_siblings_are(
    conn, workspace, runtime
):
    start = datetime.now(UTC) + timedelta(seconds=0.3)
    ids = seed(conn, workspace, 3, start, spread=timedelta(milliseconds=30))
    rows = [(i, "log", d, workspace) for i, d in zip(ids, rows_due(conn, ids), strict=True)]
    [message] = doorbells(rows, start, lambda _: 10)
    conn.execute(
        "update scheduled_actions set status = 'cancelled', finished_at = now() where id = %s",
        [ids[1]],
    )
    result = Dispatcher(runtime).dispatch([("m1", message.body())])
    assert result.summary.published == 2
    assert delivered_ids(runtime) == Counter({ids[0]: 1, ids[2]: 1})
    assert row(conn, ids[1])["status"] == "cancelled"


def test_kill_switch_in_the_dispatcher_keeps_rows_queued(conn, workspace, runtime, now):
    ids = seed(conn, workspace, 3, now - timedelta(seconds=1))
    run_tick(conn, runtime.queues, runtime.settings)
    runtime.settings = runtime.settings.model_copy(update={"dispatch_enabled": False})
    summary = drain(runtime)
    assert summary.paused == 3
    assert delivered_ids(runtime) == Counter()
    assert statuses(conn) == {"queued": 3}
    assert all(row(conn, i)["enqueued_at"] is None for i in ids)


def test_database_unreachable_reports_every_message_as_failed(conn, workspace, runtime, now):
    action_id, *due_together = seed(conn, workspace, 4, now - timedelta(seconds=1))
    broken = Runtime(
        settings=runtime.settings.model_copy(update={"database_wait_seconds": 0.3}),
        db=Database("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"),
        queues=runtime.queues,
        providers=runtime.providers,
    )
    body = OutgoingMessage((action_id,), "log", now, 0).body()
    shared = OutgoingMessage(tuple(due_together), "log", now, 0).body()
    result = Dispatcher(broken).dispatch([("m1", body), ("m2", "not ours"), ("m3", shared)])
    # Each failed message once, however many of its rows were left
    assert sorted(result.failed_message_ids) == ["m1", "m3"]
    assert result.summary.ignored == 1
    assert statuses(conn) == {"queued": 4}


def test_one_message_rings_for_rows_due_together_and_each_is_settled_alone(
    conn, workspace, runtime, now
):
    # Given one message for five rows due together: one cancelled, one already published
    ids = seed(conn, workspace, 5, now - timedelta(seconds=1))
    conn.execute("update scheduled_actions set status = 'cancelled', finished_at = now()"
                 " where id = %s", (ids[0],))  # fmt: skip
    send(runtime, [ids[1]], now)
    drain(runtime)
    message = OutgoingMessage(tuple(ids), "log", now, now)
    # When it is delivered twice, in two batches
    runtime.queues.send("log", [message, message])
    summary = drain(runtime, batch_size=1)
    # Then the three others are published once, and the message leaves nothing behind
    assert (summary.published, summary.skipped) == (3, 7)
    assert delivered_ids(runtime) == Counter(ids[1:])
    assert statuses(conn) == {"cancelled": 1, "published": 4}
    assert runtime.queues.queue("log").depth()["in_flight"] == 0  # type: ignore[attr-defined]


def test_the_lambda_handler_answers_with_partial_batch_failures(conn, workspace, runtime, now):
    ids = seed(conn, workspace, 3, now - timedelta(seconds=1))
    run_tick(conn, runtime.queues, runtime.settings)
    queue = runtime.queues.queue("log")  # type: ignore[attr-defined]

    event = {"Records": [sqs_record(m, queue) for m in queue.receive(10)]}
    runtime_slot.install(runtime)
    try:
        response = load_handler("dispatcher").handler(event, FakeLambdaContext())
    finally:
        runtime_slot.install(None)
    assert response == {"batchItemFailures": []}
    assert delivered_ids(runtime) == Counter(ids)


# ------------------------------------------------------------------------ zombies


def test_a_dispatcher_that_died_after_claiming_leaves_a_stuck_row_never_resent(
    conn, workspace, runtime, now
):

    [action_id] = seed(conn, workspace, 1, now - timedelta(seconds=1))
    run_tick(conn, runtime.queues, runtime.settings)
    # Given a dispatcher claimed the row and died before calling the provider
    assert actions.claim(conn, "log", [action_id])
    claimed_an_hour_ago(conn, [action_id])
    # When the tick recovers zombies and the message is delivered again
    assert run_tick(conn, runtime.queues, runtime.settings).recovered == 1
    drain(runtime)
    # Then the row is failed/stuck and the provider was never called
    assert (row(conn, action_id)["status"], row(conn, action_id)["error_code"]) == (
        "failed",
        "stuck",
    )
    assert delivered_ids(runtime) == Counter()


# ------------------------------------------------------------- exactly once at scale


class DoublingQueues:
    """Delivers every message twice, as SQS at-least-once delivery may."""

    def __init__(self, inner: InProcessQueues) -> None:
        self.inner = inner

    def send(self, action_type: str, messages: Any) -> list[Any]:
        self.inner.send(action_type, messages)
        return self.inner.send(action_type, messages)

    def change_visibility(self, action_type: str, changes: Any) -> int:
        return self.inner.change_visibility(action_type, changes)


def test_exactly_once_under_contention(database_url, conn, workspace, runtime, now):
    # Given 2,000 due rows, 4 ticks and 4 dispatchers at once, every message sent twice
    ids = seed(conn, workspace, 2000, now - timedelta(seconds=1))
    assert isinstance(runtime.queues, InProcessQueues)
    doubled = DoublingQueues(runtime.queues)
    settings = runtime.settings.model_copy(update={"tick_batch_size": 100})
    queue = runtime.queues.queue("log")
    ticks_done = threading.Event()
    errors: list[BaseException] = []

    def tick() -> None:
        try:
            with connect(database_url) as own:
                run_tick(own, doubled, settings)
        except BaseException as exc:
            errors.append(exc)

    def dispatch() -> None:
        dispatcher = Dispatcher(runtime)
        try:
            while True:
                messages = queue.receive(10, wait_seconds=0.2)
                if not messages:
                    if ticks_done.is_set() and len(queue) == 0:
                        return
                    continue
                result = dispatcher.dispatch([(m.message_id, m.body) for m in messages])
                failed = set(result.failed_message_ids)
                queue.delete([m.receipt_handle for m in messages if m.message_id not in failed])
        except BaseException as exc:
            errors.append(exc)

    ticks = [threading.Thread(target=tick) for _ in range(4)]
    dispatchers = [threading.Thread(target=dispatch) for _ in range(4)]
    for thread in ticks + dispatchers:
        thread.start()
    for thread in ticks:
        thread.join()
    ticks_done.set()
    for thread in dispatchers:
        thread.join(timeout=60)
    # Then every row was delivered exactly once and every row is terminal
    assert errors == []
    deliveries = delivered_ids(runtime)
    assert set(deliveries) == set(ids)
    assert max(deliveries.values()) == 1
    assert statuses(conn) == {"published": 2000}
    # And the ledger matches the provider's own log of calls exactly: one entry per call,
    # per action, delivered under the id the row has

    ledger = attempts_by_action(conn, workspace, ids)
    assert Counter({i: len(entries) for i, entries in ledger.items()}) == deliveries
    entries = [e for found in ledger.values() for e in found]
    assert {(e.attempt, e.outcome) for e in entries} == {(1, "delivered")}
    assert {e.provider_message_id for e in entries} == {f"log-{i}" for i in ids}


# ---------------------------------------------------------------- webhook provider


@pytest.fixture
def hook(runtime) -> Iterator[FakeWebhookServer]:
    with webhook_receiver(runtime, max_attempts=3) as server:
        yield server


def webhook_row(conn, workspace, now) -> Any:
    return conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, thing_id, target_key,"
        " payload, publish_at) values (%s, 'webhook', 'post-1', 'primary', %s, %s) returning id",
        (workspace, '{"text": "hi"}', now - timedelta(seconds=1)),
    ).fetchone()[0]


def run_until_settled(conn, runtime: Runtime, action_id: Any, timeout: float = 10) -> dict:
    """Tick and drain until the row is terminal (backoffs re-enqueue themselves)."""
    run_tick(conn, runtime.queues, runtime.settings)

    def settled() -> dict | None:
        drain(runtime, "webhook", wait=0.2)
        current = row(conn, action_id)
        return current if current["status"] in ("published", "failed") else None

    return wait_for(
        settled, timeout, interval=0, message=lambda: f"row did not settle: {row(conn, action_id)}"
    )


def test_webhook_is_signed_per_standard_webhooks(conn, workspace, runtime, hook, now):
    action_id = webhook_row(conn, workspace, now)
    settled = run_until_settled(conn, runtime, action_id)
    assert settled["status"] == "published"
    [request] = hook.requests
    assert request.verified
    assert request.headers["webhook-id"] == f"msg_{action_id.hex}"
    assert request.body["data"]["payload"] == {"text": "hi"}
    assert request.body["type"] == "tickwork.webhook"


def test_429_then_200_publishes_once_after_the_retry_after(conn, workspace, runtime, hook, now):
    hook.then(Reply(429, {"retry-after": "1"}, '{"error": "slow down"}'), Reply(200))
    action_id = webhook_row(conn, workspace, now)
    settled = run_until_settled(conn, runtime, action_id)
    assert (settled["status"], settled["attempt_count"]) == ("published", 2)
    first, second = hook.requests
    assert second.arrived_at - first.arrived_at >= 1.0
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert "429" in settled["last_error"]


def test_400_fails_as_provider_rejected_and_is_never_retried(conn, workspace, runtime, hook, now):
    hook.then(Reply(400, {}, '{"error": "bad payload"}'))
    action_id = webhook_row(conn, workspace, now)
    settled = run_until_settled(conn, runtime, action_id)
    assert (settled["status"], settled["error_code"]) == ("failed", "provider_rejected")
    # The status says it; the receiver's body is its own and is not kept (issue 33)
    assert settled["last_error"].startswith("HTTP 400 Bad Request from http://127.0.0.1:")
    assert "bad payload" not in settled["last_error"]
    # and no retry is on its way: once the queue is empty, the receiver still has one request
    drain_all(runtime, "webhook")
    assert len(hook.requests) == 1


def test_503_until_the_budget_is_spent_fails_as_retry_exhausted(
    conn, workspace, runtime, hook, now
):
    hook.then(*[Reply(503)] * 3)
    action_id = webhook_row(conn, workspace, now)
    settled = run_until_settled(conn, runtime, action_id)
    assert (settled["status"], settled["error_code"]) == ("failed", "retry_exhausted")
    assert settled["attempt_count"] == 3
    assert len(hook.requests) == 3


def test_500_is_ambiguous_and_retried_because_receivers_deduplicate(
    conn, workspace, runtime, hook, now
):
    hook.then(Reply(500), Reply(200))
    action_id = webhook_row(conn, workspace, now)
    settled = run_until_settled(conn, runtime, action_id)
    assert (settled["status"], settled["attempt_count"]) == ("published", 2)


def test_a_read_timeout_is_retried_for_webhooks(conn, workspace, runtime, hook, now):
    hook.then(Reply(204, delay=1.0), Reply(204))
    action_id = webhook_row(conn, workspace, now)
    settled = run_until_settled(conn, runtime, action_id)
    assert (settled["status"], settled["attempt_count"]) == ("published", 2)


def test_connection_refused_is_transient(conn, workspace, runtime, now):
    options = {"endpoints": {"primary": {"url": "http://127.0.0.1:1/hook", "secret": SECRET}}}
    runtime.providers.register("webhook", WebhookProvider(options, timeout=0.5, policy=LOOPBACK))
    action_id = webhook_row(conn, workspace, now)
    run_tick(conn, runtime.queues, runtime.settings)
    summary = drain(runtime, "webhook")
    assert summary.requeued == 1
    current = row(conn, action_id)
    assert (current["status"], current["attempt_count"]) == ("queued", 1)
    assert "could not connect" in current["last_error"]
    assert current["next_attempt_at"] > datetime.now(UTC)


class MaybeSentProvider:
    """A provider without idempotency keys whose request timed out after leaving."""

    idempotent = False
    io_bound = False

    def send(self, action: Action, via: Via | None = None) -> Outcome:
        return Ambiguous("read timeout after the request was sent")


class BrokenProvider:
    idempotent = False
    io_bound = False

    def send(self, action: Action, via: Via | None = None) -> Outcome:
        raise RuntimeError("bug in provider")


@pytest.mark.parametrize("provider", [MaybeSentProvider(), BrokenProvider()])
def test_ambiguous_outcome_without_idempotency_fails_as_ambiguous(
    conn, workspace, runtime, now, provider
):
    runtime.providers.register("log", provider)
    [action_id] = seed(conn, workspace, 1, now - timedelta(seconds=1))
    run_tick(conn, runtime.queues, runtime.settings)
    drain(runtime)
    current = row(conn, action_id)
    assert (current["status"], current["error_code"]) == ("failed", "ambiguous")
