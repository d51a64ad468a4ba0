"""Rate limits at dispatch on a real Postgres: per action type across four dispatchers, each
with its own connection, and per connection against a fake provider over HTTP; rows over
a limit are held back to a later window (change log `throttled`), never failed."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest
from psycopg.rows import dict_row

from tests.engine import drain, row, seed
from tests.fakes import LOOPBACK, an_action
from tests.fakes.slack import TOKEN, FakeSlack
from tickwork import connections
from tickwork.actions import scheduling as actions
from tickwork.actions import why
from tickwork.actions.model import NewAction
from tickwork.engine.dispatch import Dispatcher
from tickwork.engine.throttle import throttle, type_scopes
from tickwork.engine.tick import run_tick
from tickwork.forecast import forecast
from tickwork.platform.config import ActionTypeConfig, RateLimit, Settings
from tickwork.platform.db import Database
from tickwork.platform.queues.memory import InProcessQueues
from tickwork.platform.queues.port import OutgoingMessage
from tickwork.providers import ProviderRegistry
from tickwork.providers.log import LogProvider
from tickwork.providers.slack import SlackProvider
from tickwork.runtime import Runtime

DISPATCHERS = 4
PER_MINUTE = 100
BURST = 1000


def limited_settings(database_url: str, **config: object) -> Settings:
    sms = ActionTypeConfig(provider="log", **config)  # type: ignore[arg-type]
    return Settings(database_url=database_url, action_types={"sms": sms})


@pytest.fixture
def dispatchers(database_url: str) -> Iterator[tuple[list[Runtime], LogProvider]]:
    """Four runtimes, each with its own database connection, sending through one provider
    that records every call."""
    settings = limited_settings(
        database_url, rate_limits=[RateLimit(limit=PER_MINUTE, per="minute")]
    )
    provider = LogProvider({"quiet": True})
    runtimes = []
    for _ in range(DISPATCHERS):
        rt = Runtime(settings=settings, db=Database(database_url),
                     queues=InProcessQueues(visibility_timeout=30),
                     providers=ProviderRegistry(settings))  # fmt: skip
        rt.providers.register("sms", provider)
        runtimes.append(rt)
    yield runtimes, provider
    for rt in runtimes:
        rt.db.close()


def due_rows(conn, at: datetime) -> list[tuple[UUID, datetime]]:
    return conn.execute(
        "select id, coalesce(next_attempt_at, publish_at) from scheduled_actions"
        " where status = 'queued' and coalesce(next_attempt_at, publish_at) <= %s order by 2",
        (at,),
    ).fetchall()


def dispatch_concurrently(runtimes: list[Runtime], rows, at: datetime) -> None:
    """Every due row's doorbell, ten rows a message, ten messages a batch, the batches
    shared by the dispatchers running at once, each reading the clock as `at`."""
    messages = []
    for start in range(0, len(rows), 10):
        chunk = rows[start : start + 10]
        ids = tuple(action_id for action_id, _ in chunk)
        message = OutgoingMessage(ids, "sms", chunk[0][1], at,
                                  offsets_us=tuple(int((due - chunk[0][1]).total_seconds()
                                                       * 1e6) for _, due in chunk))  # fmt: skip
        messages.append((f"m{start}", message.body()))
    batches = [messages[i : i + 10] for i in range(0, len(messages), 10)]
    barrier = threading.Barrier(len(runtimes))
    errors: list[BaseException] = []

    def run(index: int) -> None:
        dispatcher = Dispatcher(runtimes[index], clock=lambda: at)
        barrier.wait()
        try:
            for batch in batches[index :: len(runtimes)]:
                result = dispatcher.dispatch(batch)
                assert result.failed_message_ids == []
        except BaseException as exc:  # the thread's failure is the test's
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(runtimes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_type_limited_to_100_a_minute_sends_1000_due_at_once_100_a_minute(
    conn, workspace, dispatchers
):
    runtimes, provider = dispatchers
    # Given 1,000 rows due at once; the dispatchers' clock walks minute by minute from then
    # (in the past, so the database finds every row handed back due when its minute comes).
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=30)
    ids = seed(conn, workspace, BURST, start, action_type="sms")
    per_minute = []
    # When four dispatchers work through whatever is due, once a minute
    for minute in range(BURST // PER_MINUTE + 2):
        at = start + timedelta(minutes=minute, seconds=1)
        before = len(provider.deliveries)
        dispatch_concurrently(runtimes, due_rows(conn, at), at)
        per_minute.append(len(provider.deliveries) - before)
    # Then 100 go each minute (± 1), each row once, and none failed
    assert all(abs(sent - PER_MINUTE) <= 1 for sent in per_minute[: BURST // PER_MINUTE])
    assert sum(per_minute) == BURST
    assert Counter(d.action_id for d in provider.deliveries) == Counter(dict.fromkeys(ids, 1))
    statuses = conn.execute(
        "select status, attempt_count, count(*) from scheduled_actions group by 1, 2"
    ).fetchall()
    assert statuses == [("published", 1, BURST)]  # a hold is not an attempt
    # And each hold is in the change log, with the limit and the time it was due again
    with conn.cursor(row_factory=dict_row) as cur:
        holds = cur.execute(
            "select reason, new_at from action_changes where kind = 'throttled'"
        ).fetchall()
    # each held once: its place in line is kept, not fought for again every minute
    assert len(holds) == BURST - PER_MINUTE
    assert {h["reason"] for h in holds} == {"the sms limit of 100 a minute is reached"}
    assert {h["new_at"].second for h in holds} == {0}


def test_a_limit_not_reached_holds_nothing(conn, workspace, dispatchers):
    runtimes, provider = dispatchers
    now = datetime.now(UTC)
    seed(conn, workspace, 50, now - timedelta(seconds=1), action_type="sms")
    dispatch_concurrently(runtimes, due_rows(conn, now), now)
    assert len(provider.deliveries) == 50
    assert conn.execute("select count(*) from action_changes").fetchone() == (0,)


def test_a_held_row_says_why_and_until_when(conn, workspace, database_url):
    settings = limited_settings(database_url, quota_per_hour=1)
    rt = Runtime(settings=settings, db=Database(database_url),
                 queues=InProcessQueues(visibility_timeout=30),
                 providers=ProviderRegistry(settings))  # fmt: skip
    rt.providers.register("sms", LogProvider({"quiet": True}))
    now = datetime.now(UTC)
    first, second = seed(conn, workspace, 2, now - timedelta(seconds=1), action_type="sms")
    run_tick(conn, rt.queues, settings)
    drain(rt, "sms")
    statuses = {row(conn, i)["status"] for i in (first, second)}
    assert statuses == {"published", "queued"}
    held = first if row(conn, first)["status"] == "queued" else second
    next_hour = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    assert row(conn, held)["next_attempt_at"] == next_hour
    facts = why.read(conn, workspace, held)
    assert facts is not None
    steps = {s.code: s for s in why.explain(facts, settings, now, ZoneInfo("UTC"))}
    assert "throttled" in steps
    assert "the sms limit of 1 an hour is reached" in steps["throttled"].text
    assert "backing_off" not in steps
    rt.db.close()


@pytest.fixture
def slack(conn, workspace, runtime, now) -> Iterator[tuple[FakeSlack, UUID, UUID]]:
    fake = FakeSlack()
    runtime.settings = runtime.settings.model_copy(
        update={"action_types": {"slack": ActionTypeConfig(provider="slack")}}
    )
    runtime.providers.register("slack", SlackProvider({"api_url": fake.url}, 2.0, LOOPBACK))
    limited = connections.create(
        conn, workspace, name="Limited", provider="slack",
        settings={"rate_limits": [{"limit": 2, "per": "hour"}]},
        credentials={"bot_token": TOKEN}, store=runtime.secrets, created_by=None,
    )  # fmt: skip
    free = connections.create(
        conn, workspace, name="Free", provider="slack", settings={},
        credentials={"bot_token": TOKEN}, store=runtime.secrets, created_by=None,
    )  # fmt: skip
    yield fake, limited.id, free.id
    fake.close()


def post(conn, workspace, runtime, now, connection_id: UUID, n: int) -> UUID:
    return actions.schedule(conn, workspace, NewAction(
        action_type="slack", target_key=f"t{connection_id}{n}", publish_at=now,
        payload={"channel": "C1", "text": f"message {n}"}, connection_id=connection_id,
    ), runtime.settings, now).action.id  # fmt: skip


def test_a_connection_limited_to_2_an_hour_sends_2_and_holds_the_third(
    conn, workspace, runtime, now, slack
):
    fake, limited, free = slack
    through_limited = [post(conn, workspace, runtime, now, limited, n) for n in range(3)]
    through_free = [post(conn, workspace, runtime, now, free, n) for n in range(3)]
    run_tick(conn, runtime.queues, runtime.settings)
    summary = drain(runtime, "slack")
    assert (summary.published, summary.throttled) == (5, 1)
    assert len(fake.posts()) == 5
    assert {row(conn, i)["status"] for i in through_free} == {"published"}
    statuses = Counter(row(conn, i)["status"] for i in through_limited)
    assert statuses == Counter({"published": 2, "queued": 1})
    [held] = [i for i in through_limited if row(conn, i)["status"] == "queued"]
    [change] = conn.execute(
        "select reason from action_changes where action_id = %s and kind = 'throttled'", (held,)
    ).fetchall()
    assert change[0] == f"connection {limited}'s limit of 2 an hour is reached"
    # The connection shows its limits back; the provider never saw them.
    shown = connections.get(conn, workspace, limited).settings
    assert shown["rate_limits"] == [{"limit": 2, "per": "hour"}]


def test_the_forecast_reads_the_limits_the_dispatchers_enforce(conn, workspace, database_url):
    # Given the older quota_per_hour and a per-minute limit, as an operator writes them
    env = {"DATABASE_URL": database_url, "TICKWORK_ACTION_TYPES": json.dumps({
        "sms": {"provider": "log", "quota_per_hour": 5000,
                "rate_limits": [{"limit": 100, "per": "minute"}]},
        "email": {"provider": "log", "rate_limits": [{"limit": 1, "per": "second"}]},
        "log": {"provider": "log"}})}  # fmt: skip
    settings = Settings.from_env(env)
    sms = settings.action_type("sms")
    assert sms is not None
    assert sms.limits == (RateLimit(limit=100, per="minute"), RateLimit(limit=5000, per="hour"))
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=3)
    for action_type in ("sms", "email", "log"):
        seed(conn, workspace, 2, hour, action_type=action_type)
    # When the forecast is read
    buckets = forecast(conn, workspace, 24, settings, datetime.now(UTC))
    # Then each type's bucket holds its lowest limit scaled to the hour
    limits = {b.action_type: (b.limit_per_hour, b.quota_per_hour) for b in buckets}
    assert limits == {"sms": (5000, 5000), "email": (3600, 3600), "log": (None, None)}


def test_the_forecast_reads_a_connections_limit(conn, workspace, runtime, slack):
    _, limited, free = slack
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=2)
    for connection_id in (limited, free):
        post(conn, workspace, runtime, hour, connection_id, 1)
    buckets = forecast(conn, workspace, 24, runtime.settings, datetime.now(UTC))
    assert {b.connection_id: b.limit_per_hour for b in buckets} == {limited: 2, free: None}


@pytest.mark.parametrize("limited", [False, True])
def test_a_type_without_limits_asks_nothing_more_and_one_not_binding_one_statement(
    conn, workspace, database_url, monkeypatch, limited
):
    config = {"rate_limits": [RateLimit(limit=1_000_000, per="second")]} if limited else {}
    settings = limited_settings(database_url, **config)
    rt = Runtime(settings=settings, db=Database(database_url),
                 queues=InProcessQueues(visibility_timeout=30),
                 providers=ProviderRegistry(settings))  # fmt: skip
    rt.providers.register("sms", LogProvider({"quiet": True}))
    statements: list[str] = []
    real_execute = type(rt.db.connection()).execute

    def counted(self, query, *args, **kwargs):  # type: ignore[no-untyped-def]
        statements.append(str(query))
        return real_execute(self, query, *args, **kwargs)

    now = datetime.now(UTC)
    ids = seed(conn, workspace, 20, now - timedelta(seconds=1), action_type="sms")
    message = OutgoingMessage(tuple(ids), "sms", now - timedelta(seconds=1), now)
    monkeypatch.setattr(type(rt.db.connection()), "execute", counted)
    summary = Dispatcher(rt).dispatch([("m", message.body())]).summary
    monkeypatch.undo()
    assert (summary.published, summary.throttled) == (20, 0)
    takes = [s for s in statements if "tickwork_take_rate_slots" in s]
    assert len(takes) == (1 if limited else 0)
    assert not [s for s in statements if "throttled" in s]
    rt.db.close()


def counting_takes(monkeypatch: pytest.MonkeyPatch, conn_type: type) -> list[tuple[dict, int]]:
    """Each rate-limit statement's parameters and how many rows it answered."""
    takes: list[tuple[dict, int]] = []
    real_execute = conn_type.execute

    def counted(self, query, params=None, *args, **kwargs):  # type: ignore[no-untyped-def]
        cur = real_execute(self, query, params, *args, **kwargs)
        if "tickwork_take_rate_slots" in str(query):
            takes.append((dict(params), cur.rowcount))
        return cur

    monkeypatch.setattr(conn_type, "execute", counted)
    return takes


def test_a_wave_sharing_a_window_takes_its_slots_in_one_counter_update(
    conn, workspace, monkeypatch
):
    # Given 500 claimed rows due at once, under a limit of 1,000 a minute that they do not reach
    now = datetime.now(UTC)
    wave = [an_action(workspace_id=workspace, action_type="sms",
                      publish_at=now - timedelta(seconds=1)) for _ in range(500)]  # fmt: skip
    limit = type_scopes("sms", [RateLimit(limit=1000, per="minute")])
    takes = counting_takes(monkeypatch, type(conn))
    # When the wave takes its slots (in a transaction, to read what it touched)
    with conn.transaction():
        admitted, held = throttle(conn, wave, {a.id: limit for a in wave}, now)
        touched = conn.execute(
            "select n_tup_ins, n_tup_upd from pg_stat_xact_user_tables"
            " where relname = 'rate_windows'"
        ).fetchone()
    monkeypatch.undo()
    # Then every row is admitted, through one statement whose size is the wave's one group
    # (not its 500 rows), answered by one row, and the counter row is written once
    assert (admitted, held) == (wave, [])
    [(params, answered)] = takes
    assert params["group_sizes"] == [500]
    assert (params["entry_groups"], params["entry_scopes"]) == ([1], [1])
    assert params["entry_windows"] == [now.replace(second=0, microsecond=0)]
    assert answered == 1
    assert touched == (1, 1)  # its counter made, then updated once: not once per row
    counter = conn.execute("select window_start, taken, deferred from rate_windows").fetchall()
    assert counter == [(now.replace(second=0, microsecond=0), 500, 0)]


def test_a_wave_over_its_limit_sends_the_first_in_line_and_holds_the_rest_in_place(
    conn, workspace, database_url, monkeypatch
):
    # Given 250 rows due over the last half minute, one after another, at 100 a minute
    settings = limited_settings(database_url, rate_limits=[RateLimit(limit=100, per="minute")])
    rt = Runtime(settings=settings, db=Database(database_url),
                 queues=InProcessQueues(visibility_timeout=30),
                 providers=ProviderRegistry(settings))  # fmt: skip
    provider = LogProvider({"quiet": True})
    rt.providers.register("sms", provider)
    now = datetime.now(UTC)
    first = now - timedelta(seconds=30)
    ids = seed(conn, workspace, 250, first, action_type="sms", spread=timedelta(seconds=25))
    step = timedelta(seconds=25) / 250
    message = OutgoingMessage(tuple(ids), "sms", first, now,
                              offsets_us=tuple(int((step * i).total_seconds() * 1e6)
                                               for i in range(250)))  # fmt: skip
    takes = counting_takes(monkeypatch, type(rt.db.connection()))
    # When one dispatcher claims them as one wave
    summary = Dispatcher(rt, clock=lambda: now).dispatch([("m", message.body())]).summary
    monkeypatch.undo()
    # Then the first 100 in due order are sent, the next 100 wait for the next minute and
    # the last 50 for the one after, through one statement answered by one row
    assert (summary.published, summary.throttled) == (100, 150)
    assert sorted(d.action_id for d in provider.deliveries) == sorted(ids[:100])
    minute = now.replace(second=0, microsecond=0)
    again = dict(conn.execute(
        "select id, next_attempt_at from scheduled_actions where status = 'queued'"
    ).fetchall())  # fmt: skip
    assert [again[i] for i in ids[100:]] == (
        [minute + timedelta(minutes=1)] * 100 + [minute + timedelta(minutes=2)] * 50
    )
    [(params, answered)] = takes
    assert (params["group_sizes"], answered) == ([250], 1)
    rt.db.close()
