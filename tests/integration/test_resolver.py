"""The resolver on a real Postgres, against a webhook receiver over real HTTP on loopback
whose log the test provider's lookup reads (a stand-in for a provider's search API): rows
that may have arrived are published when the receiver has them, sent once more when it
provably has not, and left, with the reason, when the lookup cannot tell; never twice."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from psycopg.rows import dict_row

from tests.engine import claimed_an_hour_ago, drain, row
from tests.fakes import LOOPBACK
from tests.fakes.db_proxy import DbProxy, db_proxy
from tests.fakes.webhook_server import SECRET, FakeWebhookServer, Reply, fake_webhook_server
from tests.handlers import FakeLambdaContext, load_handler
from tickwork import runtime as runtime_slot
from tickwork.actions.model import Action
from tickwork.actions.store import get
from tickwork.engine import dispatch as dispatch_module
from tickwork.engine.dispatch import Dispatcher
from tickwork.engine.resolver import resolve_one, resolve_unsettled
from tickwork.engine.tick import recover_stuck, run_tick
from tickwork.platform.db import Database, connect
from tickwork.platform.queues.port import OutgoingMessage
from tickwork.providers.base import Absent, Found, LookupResult, Outcome, Unknown, Via
from tickwork.providers.webhook import WebhookProvider
from tickwork.runtime import Runtime


class LookingWebhook(WebhookProvider):
    """A webhook receiver that does not deduplicate (so "may have arrived" fails the row)
    and can be asked what it received: its lookup reads the receiver's request log."""

    idempotent = False
    lookup_retention = timedelta(days=7)
    lookup_grace = timedelta(minutes=10)

    def __init__(self, server: FakeWebhookServer, timeout: float = 5.0) -> None:
        options = {"endpoints": {"primary": {"url": server.url, "secret": SECRET}}}
        # Roomy: a loaded CI machine must not turn a loopback delivery into a timeout.
        super().__init__(options, timeout=timeout, policy=LOOPBACK)
        self.server = server
        self.failing: str | None = None  # the lookup's error, when it cannot answer
        self.lookups: list[UUID] = []
        self.lock = threading.Lock()

    def lookup(self, action: Action, via: Via | None = None) -> LookupResult:
        with self.lock:
            self.lookups.append(action.id)
        time.sleep(0.002)  # a network round trip, deliberately: lets racing resolvers overlap
        if self.failing:
            return Unknown(self.failing)
        found = [r for r in self.server.requests if r.action_id == str(action.id)]
        if found:
            return Found(found[0].headers["webhook-id"], "found in the receiver's log")
        return Absent("no message with this id")


class CuttingWebhook(LookingWebhook):
    """Delivers, then the database goes away before the outcome is written (the outage
    of the hardening issue)."""

    def __init__(self, server: FakeWebhookServer, proxy: DbProxy) -> None:
        super().__init__(server)
        self.proxy = proxy

    def send(self, action: Action, via: Via | None = None) -> Outcome:
        outcome = super().send(action, via)
        self.proxy.cut()
        return outcome


@pytest.fixture(autouse=True)
def _no_pending_outcomes() -> Iterator[None]:
    dispatch_module._Pending.outcomes = []
    yield
    dispatch_module._Pending.outcomes = []


@pytest.fixture
def hook() -> Iterator[FakeWebhookServer]:
    with fake_webhook_server() as server:
        yield server


@pytest.fixture
def looking(runtime, hook) -> LookingWebhook:
    provider = LookingWebhook(hook)
    runtime.providers.register("webhook", provider)
    runtime.settings = runtime.settings.model_copy(update={"resolve_recheck_seconds": 0})
    return provider


def impatient(runtime: Runtime, hook: FakeWebhookServer) -> None:
    """The receiver's webhook with a timeout short enough that a reply delayed 1 s misses it."""
    runtime.providers.register("webhook", LookingWebhook(hook, timeout=0.5))


def webhook_rows(conn, workspace, now, count: int = 1, thing: bool = False) -> list[UUID]:
    rows = conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, thing_id, target_key,"
        " payload, publish_at) select %s, 'webhook', case when %s then 'post-' || g end,"
        " 'primary', '{\"text\": \"hi\"}', %s from generate_series(1, %s) g returning id",
        (workspace, thing, now - timedelta(seconds=1), count),
    ).fetchall()
    return [r[0] for r in rows]


def failed_rows(conn, workspace, now, count: int, code: str = "ambiguous", age: str = "1 hour"):
    """Rows failed `code` at attempt 1, their attempt `age` old, as the dispatcher (or the
    tick, for `stuck`) leaves them: with the attempt's ledger entry."""
    ids = webhook_rows(conn, workspace, now, count)
    conn.execute(
        "with failed as ("
        " update scheduled_actions set status = 'failed', error_code = %s, attempt_count = 1,"
        " last_error = 'read timeout', submitted_at = now() - %s::interval, finished_at = now()"
        " where id = any(%s) returning id, workspace_id, submitted_at, error_code)"
        " insert into action_attempts (action_id, attempt, workspace_id, started_at, outcome)"
        " select id, 1, workspace_id, submitted_at, error_code from failed",
        (code, age, ids),
    )
    return ids


def entries(conn, action_id: UUID) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "select * from action_attempts where action_id = %s order by attempt", (action_id,)
        ).fetchall()


def received(hook: FakeWebhookServer) -> Counter[str]:
    return Counter(r.action_id for r in hook.requests)


def send_everything(conn, runtime: Runtime) -> None:
    """Whatever is due or on the queue goes out now, as the tick and dispatchers would."""
    run_tick(conn, runtime.queues, runtime.settings)
    drain(runtime, "webhook", wait=0.1)


# ------------------------------------------- the outage: delivered, the outcome lost


def test_a_delivery_whose_outcome_was_lost_ends_published_with_no_second_copy(
    conn, workspace, runtime, hook, now, database_url
):
    # Given a row delivered while the database went away, the outcome never written and
    # the process that kept it gone (the fault-injection case of the hardening issue)
    with db_proxy(database_url) as proxy:
        provider = CuttingWebhook(hook, proxy)
        runtime.providers.register("webhook", provider)
        outage = Runtime(settings=runtime.settings, db=Database(proxy.url),
                         queues=runtime.queues, providers=runtime.providers)  # fmt: skip
        [action_id] = webhook_rows(conn, workspace, now)
        body = OutgoingMessage((action_id,), "webhook", now, 0).body()
        result = Dispatcher(outage).dispatch([("m1", body)], end=time.monotonic() + 1)
        assert result.summary.unwritten == 1
        dispatch_module._Pending.outcomes = []  # the process died with it
        proxy.restore()
        outage.db.close()
    # And the tick recovered it as stuck
    claimed_an_hour_ago(conn)
    assert recover_stuck(conn, runtime.settings) == 1
    assert row(conn, action_id)["error_code"] == "stuck"
    # When the resolver runs
    summary = resolve_unsettled(conn, runtime)
    # Then the row is published under the id the receiver has, and the receiver got one copy
    assert summary.delivered == {"webhook": 1}
    current = row(conn, action_id)
    assert (current["status"], current["provider_id"]) == ("published", f"msg_{action_id.hex}")
    assert current["error_code"] is None
    [entry] = entries(conn, action_id)
    assert (entry["outcome"], entry["resolution"]) == ("stuck", "delivered")
    assert entry["provider_message_id"] == f"msg_{action_id.hex}"
    # Even with its message redelivered and the tick and dispatchers running again
    Dispatcher(runtime).dispatch([("m1", body)])
    send_everything(conn, runtime)
    assert received(hook) == Counter({str(action_id): 1})


def test_a_timeout_after_the_receiver_got_it_ends_published(
    conn, workspace, runtime, looking, hook, now
):
    # Given a receiver that takes the message but answers too late: failed/ambiguous
    impatient(runtime, hook)
    [action_id] = webhook_rows(conn, workspace, now)
    hook.then(Reply(200, delay=1.0))
    send_everything(conn, runtime)
    assert (row(conn, action_id)["status"], row(conn, action_id)["error_code"]) == (
        "failed", "ambiguous",
    )  # fmt: skip
    # When the resolver runs (the attempt a moment old: a found message needs no grace)
    summary = resolve_unsettled(conn, runtime)
    # Then it is published with the receiver's id, the ledger says how, nothing resent
    assert summary.delivered == {"webhook": 1}
    assert row(conn, action_id)["provider_id"] == f"msg_{action_id.hex}"
    [entry] = entries(conn, action_id)
    assert (entry["outcome"], entry["resolution"]) == ("ambiguous", "delivered")
    send_everything(conn, runtime)
    assert received(hook) == Counter({str(action_id): 1})


# --------------------------------------------------------- absent, unknown, bounds


def test_an_inconclusive_lookup_never_resends(conn, workspace, runtime, looking, hook, now):
    # Given rows failed ambiguous and stuck, and a lookup that cannot answer
    ids = failed_rows(conn, workspace, now, 2) + failed_rows(conn, workspace, now, 1, "stuck")
    looking.failing = "search answered HTTP 503"
    # When the resolver runs, twice, with the tick and dispatchers around it
    for _ in range(2):
        summary = resolve_unsettled(conn, runtime)
        assert summary.unresolved == {"webhook": 3}
        send_everything(conn, runtime)
    # Then every row stays failed, the reason is in its attempt's entry, nothing was sent
    for action_id in ids:
        assert row(conn, action_id)["status"] == "failed"
        [entry] = entries(conn, action_id)
        assert entry["resolution"] == "unresolved"
        assert "search answered HTTP 503" in entry["resolution_detail"]
    assert received(hook) == Counter()


def test_absent_within_the_grace_stays(conn, workspace, runtime, looking, hook, now):
    [action_id] = failed_rows(conn, workspace, now, 1, age="1 minute")  # grace: 10 minutes
    summary = resolve_unsettled(conn, runtime)
    assert summary.unresolved == {"webhook": 1}
    assert row(conn, action_id)["status"] == "failed"
    assert "grace" in entries(conn, action_id)[0]["resolution_detail"]
    send_everything(conn, runtime)
    assert received(hook) == Counter()


def test_absent_after_the_grace_is_sent_once_more_and_only_once(
    conn, workspace, runtime, looking, hook, now
):
    # Given a row failed ambiguous an hour ago that the receiver never got
    [action_id] = failed_rows(conn, workspace, now, 1)
    # When the resolver runs, it goes back to queued and out at once
    summary = resolve_unsettled(conn, runtime)
    assert summary.requeued == {"webhook": 1}
    assert row(conn, action_id)["status"] == "queued"
    assert entries(conn, action_id)[0]["resolution"] == "requeued"
    # And its one more attempt times out after the request left: ambiguous again
    impatient(runtime, hook)
    hook.then(Reply(200, delay=1.0))
    drain(runtime, "webhook", wait=0.2)
    current = row(conn, action_id)
    assert (current["status"], current["error_code"], current["attempt_count"]) == (
        "failed", "ambiguous", 2,
    )  # fmt: skip
    # When the receiver's log is (say) wiped, so the lookup says absent again
    hook.requests.clear()
    claimed_an_hour_ago(conn)
    summary = resolve_unsettled(conn, runtime)
    # Then it stays for a person: the resolver's one retry is spent
    assert summary.unresolved == {"webhook": 1}
    assert row(conn, action_id)["status"] == "failed"
    second = entries(conn, action_id)[1]
    assert (second["attempt"], second["resolution"]) == (2, "unresolved")
    assert "one more attempt" in second["resolution_detail"]
    send_everything(conn, runtime)
    assert received(hook) == Counter()


def test_absent_is_not_trusted_over_a_late_outcome_that_says_delivered(
    conn, workspace, runtime, looking, hook, now
):
    # Given a stuck row whose outcome, written late, says the provider delivered it (the
    # finalize's late write replaces the attempt's `stuck` entry)
    [action_id] = failed_rows(conn, workspace, now, 1, "stuck")
    conn.execute(
        "update action_attempts set outcome = 'delivered' where action_id = %s", (action_id,)
    )
    # When the resolver runs, and the lookup would say absent (its index lost it)
    summary = resolve_unsettled(conn, runtime)
    # Then the provider is not asked (the ledger holds its answer) and the row is not sent
    # again: a person settles it (it is counted among the failures that need one)
    assert summary.examined == 0
    assert looking.lookups == []
    assert row(conn, action_id)["status"] == "failed"
    send_everything(conn, runtime)
    assert received(hook) == Counter()


def test_a_requeue_that_would_make_a_second_active_row_stays(
    conn, workspace, runtime, looking, hook, now
):
    # Given a failed row of a thing that has a new active row for the same target
    [action_id] = webhook_rows(conn, workspace, now, thing=True)
    conn.execute(
        "with failed as ("
        " update scheduled_actions set status = 'failed', error_code = 'ambiguous',"
        " attempt_count = 1, submitted_at = now() - interval '1 hour', finished_at = now()"
        " where id = %s returning id, workspace_id, submitted_at)"
        " insert into action_attempts (action_id, attempt, workspace_id, started_at, outcome)"
        " select id, 1, workspace_id, submitted_at, 'ambiguous' from failed",
        (action_id,),
    )
    webhook_rows(conn, workspace, now + timedelta(hours=1), thing=True)
    summary = resolve_unsettled(conn, runtime)
    assert summary.unresolved == {"webhook": 1}
    assert row(conn, action_id)["status"] == "failed"
    assert "another row" in entries(conn, action_id)[0]["resolution_detail"]


def test_rows_out_of_reach_are_not_asked(conn, workspace, runtime, looking, hook, now):
    # Past the lookup's retention; and of a provider with no lookup (log)
    failed_rows(conn, workspace, now, 1, age="8 days")
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
        " status, error_code, attempt_count, submitted_at, finished_at)"
        " values (%s, 'log', 't', %s, 'failed', 'stuck', 1, now() - interval '1 hour', now())",
        (workspace, now),
    )
    summary = resolve_unsettled(conn, runtime)
    assert summary.examined == 0
    assert looking.lookups == []


def test_the_recheck_interval_spares_the_provider(conn, workspace, runtime, looking, hook, now):
    failed_rows(conn, workspace, now, 1)
    looking.failing = "timeout"
    runtime.settings = runtime.settings.model_copy(update={"resolve_recheck_seconds": 300})
    assert resolve_unsettled(conn, runtime).examined == 1
    assert resolve_unsettled(conn, runtime).examined == 0
    assert len(looking.lookups) == 1


# ------------------------------------------------------------------------ racing


@pytest.mark.parametrize("found", [True, False])
def test_racing_resolvers_settle_each_row_once(
    database_url, conn, workspace, runtime, looking, hook, now, found
):
    # Given 40 rows that may have arrived: the receiver has them all, or none
    ids = failed_rows(conn, workspace, now, 40)
    if found:
        for action_id in ids:
            action = get(conn, workspace, action_id)
            assert action is not None
            WebhookProvider.send(looking, action)
    before = received(hook)
    # When 4 resolvers run at once, each on its own connection
    start = threading.Barrier(4)
    summaries: list[Any] = []
    errors: list[BaseException] = []

    def resolve() -> None:
        try:
            with connect(database_url) as own:
                start.wait()
                summaries.append(resolve_unsettled(own, runtime))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=resolve) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    # Then each row was settled exactly once across them; the others saw it changed
    verdict = "delivered" if found else "requeued"
    settled = sum(getattr(s, verdict).get("webhook", 0) for s in summaries)
    assert settled == 40
    assert sum(sum(s.unresolved.values()) for s in summaries) == 0
    assert sum(s.examined for s in summaries) == 40 + sum(s.raced for s in summaries)
    assert len(set(looking.lookups)) == 40
    for action_id in ids:
        [entry] = entries(conn, action_id)
        assert entry["resolution"] == verdict
    # And once everything due is sent, every row is published (the status first: it says
    # why a row is missing) and reached the receiver exactly once
    send_everything(conn, runtime)
    got = Counter((r["status"], r["error_code"]) for r in (row(conn, i) for i in ids))
    assert got == {("published", None): 40}
    assert received(hook) == Counter({str(i): 1 for i in ids})
    if found:
        assert received(hook) == before


# ------------------------------------------------------------- on demand, the cron


def test_one_row_on_demand(conn, workspace, runtime, looking, hook, now):
    [action_id] = failed_rows(conn, workspace, now, 1)
    action = get(conn, workspace, action_id)
    assert action is not None
    result = resolve_one(conn, runtime, action)
    assert not isinstance(result, str)
    assert result.verdict == "requeued"
    # A row in another state, or of a provider with no lookup, cannot be resolved
    queued = get(conn, workspace, action_id)
    assert queued is not None
    assert "only actions failed as ambiguous or stuck" in str(resolve_one(conn, runtime, queued))
    conn.execute(
        "update scheduled_actions set action_type = 'log', status = 'failed',"
        " error_code = 'stuck', finished_at = now() where id = %s",
        (action_id,),
    )
    logged = get(conn, workspace, action_id)
    assert logged is not None
    assert "offers no way to ask" in str(resolve_one(conn, runtime, logged))


def test_the_resolver_handler_runs_the_pass_and_counts_by_provider(
    conn, workspace, runtime, looking, hook, now, monkeypatch, capsys
):
    # Given one row the receiver has, one it has not, one the lookup cannot tell about
    [found, absent] = failed_rows(conn, workspace, now, 2)
    action = get(conn, workspace, found)
    assert action is not None
    WebhookProvider.send(looking, action)
    [unknown] = failed_rows(conn, workspace, now, 1, "stuck")
    original = looking.lookup

    def lookup(action: Action, via: Via | None = None) -> LookupResult:
        return Unknown("search timed out") if action.id == unknown else original(action, via)

    monkeypatch.setattr(looking, "lookup", lookup)
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    runtime_slot.install(runtime)
    try:
        result = load_handler("resolver").handler({}, FakeLambdaContext(remaining_ms=60_000))
    finally:
        runtime_slot.install(None)
    assert (result["delivered"], result["requeued"], result["unresolved"]) == (
        {"webhook": 1}, {"webhook": 1}, {"webhook": 1},
    )  # fmt: skip
    assert row(conn, found)["status"] == "published"
    assert row(conn, absent)["status"] == "queued"
    assert row(conn, unknown)["status"] == "failed"
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    by_provider = {
        name: b[name]
        for b in blobs
        for name in ("ResolvedDelivered", "ResolvedAbsent", "Unresolved")
        if name in b and b.get("provider") == "webhook"
    }
    assert by_provider == {"ResolvedDelivered": [1.0], "ResolvedAbsent": [1.0], "Unresolved": [1.0]}
