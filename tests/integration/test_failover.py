"""Provider failover end to end over real HTTP on loopback: an `email` type sending through
Postmark, then SES (each against its fake), through each workspace's connection of each.
Postmark's outage is scripted on its fake (503 for so many calls, then it answers again);
the circuit's cool-down and a lost probe's timeout pass by moving its `opened_at` and
`probe_taken_at` back, never by sleeping. (The outage by the clock, with SES on moto, is
tests/e2e/test_failover_outage.py.)"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest
from psycopg.rows import dict_row

from tests.engine import claimed_an_hour_ago, drain, drain_all, row
from tests.fakes import LOOPBACK
from tests.fakes.db_proxy import DbProxy, db_proxy
from tests.fakes.postmark import TOKEN, FakePostmark, error
from tests.fakes.server import Answer
from tests.fakes.ses import SEND, FakeSes
from tests.waiting import wait_for
from tickwork import connections
from tickwork.actions import scheduling as actions
from tickwork.actions import why
from tickwork.actions.model import Claimed, NewAction
from tickwork.actions.store import get
from tickwork.cli.status import _circuit_lines
from tickwork.engine import circuits
from tickwork.engine import dispatch as dispatch_module
from tickwork.engine.dispatch import Dispatcher, DispatchSummary, circuit_policy
from tickwork.engine.resolver import resolve_one, resolve_unsettled, retention_of
from tickwork.engine.tick import recover_stuck, run_tick
from tickwork.platform.config import ActionTypeConfig, FailoverConfig, FailoverProvider
from tickwork.platform.db import Connection, Database
from tickwork.platform.queues.port import OutgoingMessage
from tickwork.providers import ProviderRegistry
from tickwork.providers.base import Outcome, Provider, Via
from tickwork.providers.postmark import PostmarkProvider
from tickwork.providers.ses import SesProvider
from tickwork.runtime import Runtime

DOWN = Answer(503, {"ErrorCode": 100, "Message": "Maintenance"})


@dataclass
class Email:
    conn: Connection
    runtime: Runtime
    workspace: UUID
    postmark: FakePostmark
    ses: FakeSes
    connection_id: UUID
    ses_connection_id: UUID

    def schedule(self, count: int, to: str = "ann@example.com") -> list[UUID]:
        ids = []
        for n in range(count):
            scheduled = actions.schedule(self.conn, self.workspace, NewAction(
                action_type="email", target_key=f"{to}:{n}", publish_at=self.now(),
                payload={"to": to, "subject": f"Hello {n}", "text": "Hi"},
                connection_id=self.connection_id,
            ), self.runtime.settings, self.now())  # fmt: skip
            ids.append(scheduled.action.id)
        return ids

    def now(self) -> Any:
        return self.conn.execute("select clock_timestamp()").fetchone()[0]  # type: ignore[index]

    def send(self) -> DispatchSummary:
        """Everything due, dispatched, retries included, until no message is left."""
        run_tick(self.conn, self.runtime.queues, self.runtime.settings)
        queue = self.runtime.queues.queue("email")  # type: ignore[attr-defined]
        total = DispatchSummary()

        def emptied() -> bool:
            summary = drain(self.runtime, "email", wait=0.1)
            total.published += summary.published
            total.failed_over += summary.failed_over
            total.circuits_opened += summary.circuits_opened
            total.throttled += summary.throttled
            return len(queue) == 0

        wait_for(emptied, 10.0, interval=0, message=lambda: f"email: {queue.depth()}")
        return total

    def attempts(self, action_id: UUID) -> list[tuple[str, str | None, str | None]]:
        rows = self.conn.execute(
            "select outcome, provider, failover_reason from action_attempts"
            " where action_id = %s order by attempt",
            (action_id,),
        ).fetchall()
        return [tuple(r) for r in rows]  # type: ignore[misc]

    def circuit(self) -> str | None:
        found = self.conn.execute(
            "select state from provider_circuits where provider = 'postmark'"
        ).fetchone()
        return None if found is None else str(found[0])

    def probe(self) -> tuple[str, bool, Any]:
        """Postmark's circuit: its state, whether its probe is out, and since when."""
        found = self.conn.execute(
            "select state, probing, probe_taken_at from provider_circuits"
            " where provider = 'postmark'"
        ).fetchone()
        assert found is not None
        return found[0], found[1], found[2]

    def open_the_circuit(self, cooled: bool = True) -> None:
        """Three 503s (the circuit's failures) from Postmark: three rows fail over to SES and
        the circuit opens; then (`cooled`) its cool-down is moved into the past."""
        self.postmark.then("/email", DOWN, DOWN, DOWN)
        self.schedule(3, "opener@example.com")
        self.send()
        assert self.circuit() == "open"
        if cooled:
            self.conn.execute(
                "update provider_circuits set opened_at = opened_at - interval '61 seconds'"
            )

    def limit(self, connection_id: UUID, limit: int, per: str) -> None:
        connections.update(
            self.conn, self.workspace, connection_id, store=self.runtime.secrets,
            settings={**connections.get(self.conn, self.workspace, connection_id).settings,
                      "rate_limits": [{"limit": limit, "per": per}]},
        )  # fmt: skip

    def at_its_limit(self, connection_id: UUID, limit: int, per: str) -> None:
        """The connection limited to `limit` a `per`, every slot of the current window taken."""
        self.limit(connection_id, limit, per)
        seconds = {"second": 1, "minute": 60, "hour": 3600}[per]
        start = datetime.fromtimestamp(time.time() // seconds * seconds, UTC)
        self.conn.execute(
            "insert into rate_windows (scope, window_start, taken) values (%s, %s, %s)"
            " on conflict (scope) do update"
            " set window_start = excluded.window_start, taken = excluded.taken",
            (f"connection:{connection_id}:{per}", start, limit),
        )

    def throttled(self, action_id: UUID) -> list[str]:
        rows = self.conn.execute(
            "select reason from action_changes where action_id = %s and kind = 'throttled'",
            (action_id,),
        ).fetchall()
        return [str(r[0]) for r in rows]


def clear_of_the_hour_turning(margin: float = 30.0) -> None:
    """A test whose limit is "1 an hour" sees one window: if the hour is about to turn,
    wait for the next one to begin rather than straddle two."""
    wait_for(lambda: time.time() % 3600 < 3600 - margin, timeout=margin + 5, interval=0.5)


@pytest.fixture
def email(conn, workspace, runtime) -> Iterator[Email]:
    postmark, ses = FakePostmark(), FakeSes()
    config = ActionTypeConfig(
        provider="postmark",
        failover=FailoverConfig(
            providers=(FailoverProvider(provider="ses"),),
            threshold=1,
            circuit_failures=3,
            circuit_window_seconds=60,
            circuit_cooldown_seconds=60,
        ),
    )
    runtime.settings = runtime.settings.model_copy(
        update={"action_types": {"email": config}, "backoff_base_seconds": 0.01}
    )
    runtime.providers.register("email", PostmarkProvider({"api_url": postmark.url}, 2.0, LOOPBACK))
    runtime.providers.register(
        "email", SesProvider({"endpoint_url": ses.url}, 2.0, LOOPBACK), fallback="ses"
    )
    primary = connections.create(
        conn, workspace, name="Postmark", provider="postmark",
        settings={"from": "news@example.com"}, credentials={"server_token": TOKEN},
        store=runtime.secrets, created_by=None,
    )  # fmt: skip
    fallback = connections.create(
        conn, workspace, name="SES", provider="ses",
        settings={"region": "eu-west-1", "from": "news@example.com"},
        credentials={"access_key_id": "AKIAIOSFODNN7EXAMPLE",
                     "secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
        store=runtime.secrets, created_by=None,
    )  # fmt: skip
    yield Email(conn, runtime, workspace, postmark, ses, primary.id, fallback.id)
    postmark.close()
    ses.close()


def sent_by_ses(email: Email) -> list[str]:
    return [seen.json()["Content"]["Simple"]["Subject"]["Data"] for seen in email.ses.to(SEND)]


def sent_by_postmark(email: Email) -> list[str]:
    return [seen.json()["Subject"] for seen in email.postmark.emails()]


def test_an_outage_fails_over_to_ses_and_traffic_returns_when_postmark_recovers(email):
    email.postmark.then("/email", DOWN, DOWN, DOWN)
    ids = email.schedule(3)
    summary = email.send()
    assert (summary.published, summary.failed_over, summary.circuits_opened) == (3, 3, 1)
    # Each row: one 503 from Postmark (its threshold), then SES; none sent twice.
    assert sorted(sent_by_ses(email)) == ["Hello 0", "Hello 1", "Hello 2"]
    assert len(email.postmark.emails()) == 3
    for action_id in ids:
        assert row(email.conn, action_id)["status"] == "published"
        assert email.attempts(action_id) == [
            ("transient", "postmark", None), ("delivered", "ses", "threshold"),
        ]  # fmt: skip
    # `actions why` tells which provider sent and why it was not the first.
    facts = why.read(email.conn, email.workspace, ids[0])
    assert facts is not None
    told = [
        step.text
        for step in why.explain(facts, email.runtime.settings, email.now(), ZoneInfo("UTC"))
    ]
    assert any("through ses (failed over: the first provider answered" in t for t in told), told
    # Three transient answers in the window opened the circuit: a new row skips Postmark.
    assert email.circuit() == "open"
    [shown] = circuits.status(email.conn)
    assert (shown["provider"], shown["connection_id"], shown["state"]) == (
        "postmark", email.connection_id, "open")  # fmt: skip
    assert "circuit open: postmark" in _circuit_lines([shown])[0]
    [fresh] = email.schedule(1, "bob@example.com")
    email.send()
    assert len(email.postmark.emails()) == 3
    assert len(sent_by_ses(email)) == 4
    assert email.attempts(fresh) == [("delivered", "ses", "circuit_open")]
    # After the cool-down one probe goes to Postmark, which answers again: the circuit
    # closes and traffic returns to it.
    email.conn.execute("update provider_circuits set opened_at = opened_at - interval '61 seconds'")
    [probe] = email.schedule(1, "cy@example.com")
    email.send()
    assert email.attempts(probe) == [("delivered", "postmark", None)]
    assert email.circuit() == "closed"
    later = email.schedule(2, "dee@example.com")
    email.send()
    assert len(email.postmark.emails()) == 6
    assert len(sent_by_ses(email)) == 4
    assert {row(email.conn, i)["status"] for i in [probe, *later]} == {"published"}


def test_a_rejection_is_never_retried_on_another_provider(email):
    email.postmark.then("/email", error(406))  # inactive recipient
    [action_id] = email.schedule(1)
    email.send()
    current = row(email.conn, action_id)
    assert (current["status"], current["error_code"]) == ("failed", "inactive_recipient")
    assert email.ses.to(SEND) == []
    assert email.attempts(action_id) == [("rejected", "postmark", None)]
    assert email.circuit() is None  # an answer: the provider is up


def test_an_ambiguous_attempt_is_not_failed_over(email):
    email.postmark.lose_answers = 1  # accepted, then a 500: it may have arrived
    [action_id] = email.schedule(1)
    email.send()
    current = row(email.conn, action_id)
    assert (current["status"], current["error_code"]) == ("failed", "ambiguous")
    assert len(email.postmark.sent) == 1
    assert email.ses.to(SEND) == []
    assert email.attempts(action_id) == [("ambiguous", "postmark", None)]
    # The resolver asks Postmark, the provider the attempt named: it has the message.
    summary = resolve_unsettled(email.conn, email.runtime)
    assert summary.delivered == {"postmark": 1}
    current = row(email.conn, action_id)
    assert (current["status"], current["provider_id"]) == (
        "published", email.postmark.sent[0]["MessageID"])  # fmt: skip
    assert (len(email.postmark.sent), email.ses.to(SEND)) == (1, [])


def test_providers_of_different_channels_leave_the_rows_queued(email, conn):
    mixed = ActionTypeConfig(
        provider="postmark",
        failover=FailoverConfig(providers=(FailoverProvider(provider="twilio"),)),
    )
    email.runtime.settings = email.runtime.settings.model_copy(
        update={"action_types": {"email": mixed}}
    )
    [action_id] = email.schedule(1)
    run_tick(conn, email.runtime.queues, email.runtime.settings)
    drain_all(email.runtime, "email")
    assert row(conn, action_id)["status"] == "queued"
    assert email.postmark.emails() == []


def test_failover_names_each_provider_once():
    with pytest.raises(ValueError, match="names a provider twice"):
        ActionTypeConfig(
            provider="postmark",
            failover=FailoverConfig(providers=(FailoverProvider(provider="postmark"),)),
        )


def test_a_healthy_wave_reads_the_circuits_once_and_writes_none(email, monkeypatch):
    ids = email.schedule(5)
    run_tick(email.conn, email.runtime.queues, email.runtime.settings)
    statements: list[str] = []
    real_execute = type(email.runtime.db.connection()).execute

    def counted(self, query, *args, **kwargs):  # type: ignore[no-untyped-def]
        statements.append(str(query))
        return real_execute(self, query, *args, **kwargs)

    monkeypatch.setattr(type(email.runtime.db.connection()), "execute", counted)
    summary = drain(email.runtime, "email")
    monkeypatch.undo()
    assert (summary.published, summary.failed_over) == (5, 0)
    assert len(email.postmark.emails()) == 5
    # One read each of the ledger, the fallback connections and the circuits per wave.
    assert len([s for s in statements if "from action_attempts\nwhere" in s]) == 1
    assert len([s for s in statements if "join unnest(%(workspace_ids)s" in s]) == 1
    assert len([s for s in statements if "from provider_circuits c" in s]) == 1
    assert not [s for s in statements if "insert into provider_circuits" in s]
    # And no write to record where they go: the claim recorded the first provider
    assert not [s for s in statements if "set routed_provider" in s]
    assert {(row(email.conn, i)["routed_provider"], row(email.conn, i)["routed_attempt"])
            for i in ids} == {("postmark", 1)}  # fmt: skip
    assert {email.attempts(i)[0] for i in ids} == {("delivered", "postmark", None)}


# ------------------------------------------------------------------ a probe that is lost


class Died(BaseException):
    """The dispatcher's process ending where it is raised: nothing after it runs."""


def test_a_probe_whose_dispatcher_died_is_lost_after_its_timeout_and_taken_again(
    email, monkeypatch
):
    # Given Postmark's circuit open and its cool-down over
    email.open_the_circuit()
    # When a dispatcher takes the probe, calls Postmark (which sends it) and dies before it
    # writes the outcome or the circuit
    [lost] = email.schedule(1, "cy@example.com")
    run_tick(email.conn, email.runtime.queues, email.runtime.settings)

    def dies(*args: Any, **kwargs: Any) -> list[UUID]:
        raise Died

    monkeypatch.setattr(Dispatcher, "_settle", dies)
    queue = email.runtime.queues.queue("email")  # type: ignore[attr-defined]
    [message] = queue.receive(10)
    with pytest.raises(Died):
        Dispatcher(email.runtime).dispatch([(message.message_id, message.body)])
    monkeypatch.undo()
    queue.delete([message.receipt_handle])  # gone with its process (its row stays claimed)
    assert row(email.conn, lost)["status"] == "submitted"
    assert len(email.postmark.emails()) == 4  # three 503s, then the probe it sent
    state, probing, taken_at = email.probe()
    assert (state, probing) == ("half_open", True)
    assert taken_at is not None
    [shown] = circuits.status(email.conn)
    assert shown["probe_taken_at"] == taken_at
    assert "circuit half_open: postmark" in _circuit_lines([shown])[0]
    assert "probe out since" in _circuit_lines([shown])[0]
    # Then until the probe's timeout nobody else probes: rows go to SES, Postmark sees none
    config = email.runtime.settings.action_types["email"]
    timeout = circuit_policy(config.failover, email.runtime.settings).probe_timeout_seconds
    assert timeout == 60  # the cool-down: longer than a call (2 s) could take
    email.conn.execute(
        "update provider_circuits set probe_taken_at = probe_taken_at"
        " - make_interval(secs => %s)", (timeout - 5,),
    )  # fmt: skip
    [before] = email.schedule(1, "dee@example.com")
    email.send()
    assert email.attempts(before) == [("delivered", "ses", "circuit_open")]
    assert len(email.postmark.emails()) == 4
    assert email.probe()[:2] == ("half_open", True)
    # And once it has passed, the next row probes, and its delivery closes the circuit
    email.conn.execute(
        "update provider_circuits set probe_taken_at = probe_taken_at - interval '6 seconds'"
    )
    [after] = email.schedule(1, "eve@example.com")
    email.send()
    assert email.attempts(after) == [("delivered", "postmark", None)]
    assert email.circuit() == "closed"
    assert email.probe()[1] is False
    # The lost probe's row is the dead dispatcher's: claimed, never sent a second time
    assert row(email.conn, lost)["status"] == "submitted"
    assert [m["Recipients"][0] for m in email.postmark.sent] == [
        "cy@example.com", "eve@example.com"]  # fmt: skip
    assert Counter(seen.json()["To"] for seen in email.postmark.emails()) == Counter(
        {"opener@example.com": 3, "cy@example.com": 1, "eve@example.com": 1})  # fmt: skip


def test_a_probe_held_by_a_rate_limit_is_given_back_for_the_next_row(email):
    # Given Postmark's circuit past its cool-down, and its connection at its limit of 1 an
    # hour
    email.open_the_circuit()
    clear_of_the_hour_turning()
    email.at_its_limit(email.connection_id, 1, "hour")
    # When the row that takes the probe is held back by that limit (never sent)
    [held] = email.schedule(1, "held@example.com")
    summary = email.send()
    assert summary.throttled == 1
    assert row(email.conn, held)["status"] == "queued"
    assert email.throttled(held) == [
        f"connection {email.connection_id}'s limit of 1 an hour is reached"]  # fmt: skip
    # Then its probe is given back at once, not left out until it is lost
    assert email.probe()[:2] == ("half_open", False)
    assert email.attempts(held) == []


# ---------------------------------------------------------- a fallback's own rate limits


def test_rows_failing_over_take_the_fallback_connections_own_limit(email):
    # Given SES's connection limited to 1 an hour, and Postmark down (three 503s: each
    # row's threshold, and the circuit's failures)
    clear_of_the_hour_turning()
    email.limit(email.ses_connection_id, 1, "hour")
    email.postmark.then("/email", DOWN, DOWN, DOWN)
    ids = email.schedule(3)
    # When the rows fail over to SES
    summary = email.send()
    # Then SES sends one; the others are held back by SES's limit, not failed
    assert (summary.published, summary.throttled) == (1, 2)
    assert len(sent_by_ses(email)) == 1
    statuses = Counter(row(email.conn, i)["status"] for i in ids)
    assert statuses == Counter({"published": 1, "queued": 2})
    next_hour = email.now().replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    held = [i for i in ids if row(email.conn, i)["status"] == "queued"]
    [sent] = set(ids) - set(held)
    assert email.attempts(sent) == [
        ("transient", "postmark", None), ("delivered", "ses", "threshold")]  # fmt: skip
    # Held like any throttled row: queued at a later window, each in its place in line
    due_again = sorted(row(email.conn, i)["next_attempt_at"] for i in held)
    assert due_again == [next_hour, next_hour + timedelta(hours=1)]
    for action_id in held:
        # in its change log and in `why`, naming SES's connection
        again = row(email.conn, action_id)["next_attempt_at"]
        assert email.throttled(action_id) == [
            f"connection {email.ses_connection_id}'s limit of 1 an hour is reached"]  # fmt: skip
        facts = why.read(email.conn, email.workspace, action_id)
        assert facts is not None
        steps = {s.code: s for s in why.explain(facts, email.runtime.settings, email.now(),
                                                ZoneInfo("UTC"))}  # fmt: skip
        assert (
            f"connection {email.ses_connection_id}'s limit of 1 an hour is reached;"
            f" due again at {again:%Y-%m-%d %H:%M:%S} UTC"
        ) in steps["throttled"].text
        # Its 503 is in the ledger; the hold took no attempt
        assert email.attempts(action_id) == [("transient", "postmark", None)]


def test_a_fallback_connection_limited_per_second_delays_the_rows_then_sends_them(email):
    # Given Postmark's circuit open, SES's connection limited to 1 a second, and Postmark's
    # connection at its own limit (which rows failing over do not go through)
    email.open_the_circuit(cooled=False)
    email.limit(email.ses_connection_id, 1, "second")
    clear_of_the_hour_turning()
    email.at_its_limit(email.connection_id, 1, "hour")
    already = len(sent_by_ses(email))
    # When four rows fail over at once
    ids = email.schedule(4, "burst@example.com")
    summary = email.send()
    # Then they go out through SES one a second: held, never failed, each sent once
    assert summary.throttled >= 3
    assert {row(email.conn, i)["status"] for i in ids} == {"published"}
    assert sorted(sent_by_ses(email)[already:]) == ["Hello 0", "Hello 1", "Hello 2", "Hello 3"]
    assert len(email.postmark.emails()) == 3  # only the 503s that opened the circuit
    for action_id in ids:
        assert email.attempts(action_id) == [("delivered", "ses", "circuit_open")]
    reasons = [r for i in ids for r in email.throttled(i)]
    assert len(reasons) >= 3
    assert set(reasons) == {
        f"connection {email.ses_connection_id}'s limit of 1 a second is reached"}  # fmt: skip
    started = sorted(
        at for (at,) in email.conn.execute(
            "select started_at from action_attempts where action_id = any(%s)", (ids,)
        ).fetchall()
    )  # fmt: skip
    # Admitted in four windows of a second: the first and the last at least 2 s apart
    assert (started[-1] - started[0]).total_seconds() >= 2


# ------------------------------------------------------- the resolver on failover rows


class CutAfterCall:
    """A provider whose dispatcher dies right after the call: the database goes away as the
    provider answers, so the outcome is never written (and the process that kept it is
    gone): the row stays `submitted` until the tick recovers it `stuck`."""

    def __init__(self, inner: Provider, proxy: DbProxy) -> None:
        self.inner, self.proxy = inner, proxy
        self.idempotent, self.io_bound = inner.idempotent, inner.io_bound

    def send(self, action: Claimed, via: Via | None = None) -> Outcome:
        outcome = self.inner.send(action, via)
        self.proxy.cut()
        return outcome


def dies_during_the_call(email: Email, database_url: str, action_id: UUID) -> None:
    """Dispatch one row through a dispatcher that dies during its provider call, then let
    the tick recover the row as `stuck`."""
    settings = email.runtime.settings
    config = settings.action_types["email"]
    assert config.failover is not None
    with db_proxy(database_url) as proxy:
        providers = ProviderRegistry(settings)
        providers.register("email", CutAfterCall(
            email.runtime.providers.for_action_type("email"), proxy))  # fmt: skip
        for fallback in config.failover.providers:
            inner = email.runtime.providers.for_fallback("email", fallback.provider)
            providers.register("email", CutAfterCall(inner, proxy), fallback=fallback.provider)
        outage = Runtime(settings=settings, db=Database(proxy.url), queues=email.runtime.queues,
                         providers=providers, secrets=email.runtime.secrets)  # fmt: skip
        body = OutgoingMessage((action_id,), "email", email.now(), 0).body()
        result = Dispatcher(outage).dispatch([("m1", body)], end=time.monotonic() + 1)
        assert result.summary.unwritten == 1
        dispatch_module._Pending.outcomes = []  # the process died with it
        proxy.restore()
        outage.db.close()
    assert row(email.conn, action_id)["status"] == "submitted"
    claimed_an_hour_ago(email.conn, [action_id])
    assert recover_stuck(email.conn, settings) == 1
    assert row(email.conn, action_id)["error_code"] == "stuck"


def open_circuit(email: Email, provider: str, connection_id: UUID) -> None:
    email.conn.execute(
        "insert into provider_circuits (provider, connection_id, state, opened_at)"
        " values (%s, %s, 'open', now())",
        (provider, connection_id),
    )


def connection_of(email: Email, provider: str) -> UUID:
    found = email.conn.execute(
        "select id from connections where workspace_id = %s and provider = %s",
        (email.workspace, provider),
    ).fetchone()
    assert found is not None
    return UUID(str(found[0]))


def entry(email: Email, action_id: UUID, attempt: int = 1) -> dict[str, Any]:
    with email.conn.cursor(row_factory=dict_row) as cur:
        found = cur.execute(
            "select * from action_attempts where action_id = %s and attempt = %s",
            (action_id, attempt),
        ).fetchone()
    assert found is not None
    return found


def why_text(email: Email, action_id: UUID) -> str:
    """What `GET /v1/actions/{id}/why` says of the row, as one text."""
    facts = why.read(email.conn, email.workspace, action_id)
    assert facts is not None
    retention = retention_of(email.conn, email.runtime, facts.action)
    steps = why.explain(facts, email.runtime.settings, email.now(), ZoneInfo("UTC"),
                        lookup_retention=retention)  # fmt: skip
    return " ".join(step.text for step in steps)


@pytest.fixture
def asking(email: Email) -> Email:
    """The resolver asks again at once (no recheck interval)."""
    email.runtime.settings = email.runtime.settings.model_copy(
        update={"resolve_recheck_seconds": 0}
    )
    return email


def test_a_stuck_attempt_names_the_provider_and_connection_it_was_calling(asking, database_url):
    # Given Postmark's circuit open, so the row goes to SES through the workspace's SES
    # connection, and a dispatcher that dies during that call
    email = asking
    ses_connection = connection_of(email, "ses")
    open_circuit(email, "postmark", email.connection_id)
    [action_id] = email.schedule(1)
    dies_during_the_call(email, database_url, action_id)
    # Then the recovered attempt names SES and its connection, recorded before the call
    stuck = entry(email, action_id)
    assert (stuck["outcome"], stuck["provider"], stuck["connection_id"]) == (
        "stuck", "ses", ses_connection)  # fmt: skip
    assert len(email.ses.to(SEND)) == 1
    # When the resolver runs: SES offers no way to ask, and Postmark is not asked in its
    # place: the row stays failed for a person, and nothing is sent again
    summary = resolve_unsettled(email.conn, email.runtime)
    assert summary.examined == 0
    assert email.postmark.searches() == []
    told = resolve_one(email.conn, email.runtime, get(email.conn, email.workspace, action_id))
    assert isinstance(told, str)
    assert "went to ses, which offers no way to ask" in told
    assert "Its attempt went to ses, which the resolver cannot ask" in why_text(email, action_id)
    email.send()
    current = row(email.conn, action_id)
    assert (current["status"], current["error_code"]) == ("failed", "stuck")
    assert (len(email.ses.to(SEND)), email.postmark.emails()) == (1, [])
    # Nor when the type loses its fallbacks since: Postmark could call absent what SES sent
    email.runtime.settings = email.runtime.settings.model_copy(
        update={"action_types": {"email": ActionTypeConfig(provider="postmark")}}
    )
    assert resolve_unsettled(email.conn, email.runtime).examined == 0
    assert email.postmark.searches() == []
    told = resolve_one(email.conn, email.runtime, get(email.conn, email.workspace, action_id))
    assert "went to ses, no longer a provider of this type" in str(told)


def test_stuck_on_the_fallback_is_found_through_its_own_connection(asking, database_url):
    # Given a type sending through SES first, then Postmark, a row naming the workspace's
    # SES connection, SES's circuit open: the row goes to Postmark through the workspace's
    # Postmark connection, and its dispatcher dies during the call (Postmark has it)
    email = asking
    reversed_order = ActionTypeConfig(
        provider="ses",
        failover=FailoverConfig(providers=(FailoverProvider(provider="postmark"),), threshold=1),
    )
    email.runtime.settings = email.runtime.settings.model_copy(
        update={"action_types": {"email": reversed_order}}
    )
    email.runtime.providers.register(
        "email", SesProvider({"endpoint_url": email.ses.url}, 2.0, LOOPBACK))  # fmt: skip
    email.runtime.providers.register(
        "email", PostmarkProvider({"api_url": email.postmark.url}, 2.0, LOOPBACK),
        fallback="postmark",
    )  # fmt: skip
    ses_connection = connection_of(email, "ses")
    email.connection_id = ses_connection
    open_circuit(email, "ses", ses_connection)
    [action_id] = email.schedule(1)
    dies_during_the_call(email, database_url, action_id)
    stuck = entry(email, action_id)
    assert (stuck["provider"], stuck["connection_id"]) == ("postmark", email_postmark(email))
    # When the resolver runs, it asks Postmark with the Postmark connection's token (the
    # fake refuses any other): found, the row is published under Postmark's id
    summary = resolve_unsettled(email.conn, email.runtime)
    assert summary.delivered == {"postmark": 1}
    [search] = email.postmark.searches()
    assert search.headers["x-postmark-server-token"] == TOKEN
    current = row(email.conn, action_id)
    assert (current["status"], current["provider_id"]) == (
        "published", email.postmark.sent[0]["MessageID"])  # fmt: skip
    assert entry(email, action_id)["resolution"] == "delivered"
    # And nothing is sent again
    email.send()
    assert (len(email.postmark.emails()), email.ses.to(SEND)) == (1, [])


def email_postmark(email: Email) -> UUID:
    return connection_of(email, "postmark")


def test_stuck_on_postmark_absent_is_sent_once_more(asking, database_url):
    # Given a dispatcher that dies during Postmark's call, which Postmark refused (503: it
    # kept nothing)
    email = asking
    email.postmark.then("/email", DOWN)
    [action_id] = email.schedule(1)
    dies_during_the_call(email, database_url, action_id)
    assert entry(email, action_id)["provider"] == "postmark"
    # When the resolver asks Postmark, after the search's grace (the claim is an hour old)
    summary = resolve_unsettled(email.conn, email.runtime)
    # Then the row is queued again, once, and the failover route sends it: the attempt
    # settled absent pins nothing, so it goes to Postmark, now up, and nowhere else
    assert summary.requeued == {"postmark": 1}
    assert entry(email, action_id)["resolution"] == "requeued"
    email.send()
    current = row(email.conn, action_id)
    assert current["status"] == "published"
    assert email.attempts(action_id) == [
        ("stuck", "postmark", None), ("delivered", "postmark", None),
    ]  # fmt: skip
    # Two calls to Postmark (the refused one, the one it accepted), one message kept
    assert (len(email.postmark.emails()), len(email.postmark.sent)) == (2, 1)
    assert email.ses.to(SEND) == []


def test_an_inconclusive_lookup_never_sends_the_row_again(asking, database_url):
    # Given a row stuck on Postmark, which has it, and Postmark's search failing
    email = asking
    [action_id] = email.schedule(1)
    dies_during_the_call(email, database_url, action_id)
    email.postmark.then("/messages/outbound", DOWN, DOWN)
    # When the resolver runs, twice
    first = resolve_unsettled(email.conn, email.runtime)
    second = resolve_unsettled(email.conn, email.runtime)
    # Then it could not tell, and said why; the row stays failed and is never sent again,
    # by Postmark or by SES
    assert (first.unresolved, second.unresolved) == ({"postmark": 1}, {"postmark": 1})
    stuck = entry(email, action_id)
    assert stuck["resolution"] == "unresolved"
    assert "HTTP 503" in stuck["resolution_detail"]
    email.send()
    current = row(email.conn, action_id)
    assert (current["status"], current["error_code"]) == ("failed", "stuck")
    assert (len(email.postmark.emails()), email.ses.to(SEND)) == (1, [])


def test_an_attempt_recorded_without_its_provider_is_left_to_a_person(asking, database_url):
    # Given a stuck row whose attempt names no provider (recorded before providers were)
    email = asking
    [action_id] = email.schedule(1)
    dies_during_the_call(email, database_url, action_id)
    email.conn.execute(
        "update action_attempts set provider = null, connection_id = null where action_id = %s",
        (action_id,),
    )
    # When the resolver runs, nobody is asked, and on demand it says why
    summary = resolve_unsettled(email.conn, email.runtime)
    assert summary.examined == 0
    assert email.postmark.searches() == []
    told = resolve_one(email.conn, email.runtime, get(email.conn, email.workspace, action_id))
    assert isinstance(told, str)
    assert "recorded without the provider it called" in told
    assert "recorded without the provider it called" in why_text(email, action_id)
    # Then the row stays failed for a person and is never sent again
    email.send()
    current = row(email.conn, action_id)
    assert (current["status"], current["error_code"]) == ("failed", "stuck")
    assert (len(email.postmark.emails()), email.ses.to(SEND)) == (1, [])
