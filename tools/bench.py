"""`make bench`: throughput and lag of the engine on this machine, against a baseline run
in the same process (these machines are noisy; compare ratios, not absolute figures).

(a) burst: N rows due at the same second → tick, in-process queue, dispatcher handlers,
    `log` provider. Tick enqueue rate, claim+finalize rate, end-to-end drain, lag.
(b) spread: M rows due uniformly over S seconds → lag p50/p99/max, and the disk's sync
    stalls meanwhile, against the deliveries that were late.
(e) sustained: each of a rising series of row counts due uniformly over S seconds, every
    row at its own instant (100,000 to 2,000,000 over 60 s), until the lag's p99 passes
    100 ms: the highest sustained rate that stays on time, and where each step's time went.
(c) baseline: the same burst through the playbook's literal algorithm: select 200 due rows
    per tick, one claim UPDATE and one finalize UPDATE per row.
(d) floor: the burst's own SQL (the tick's mark, the claim, the finalize, in the same batch
    sizes) driven with no Python work between the statements: the database's own limit.

Each burst also prints where its time went: rows/s inside each stage's statements,
statements per action, and CPU seconds of this Python process against those of the
Postgres backends serving it (read from /proc when the server runs on this machine).

DATABASE_URL selects a server (a `tickwork_bench` database is created on it); otherwise an
embedded Postgres in a temporary directory is used.
"""

from __future__ import annotations

import argparse
import os
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Self
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from tickwork.actions import store as actions
from tickwork.actions.model import action_from_row
from tickwork.engine.dispatch import Dispatcher
from tickwork.local.embedded import EmbeddedPostgres, with_database
from tickwork.local.handlers import quiet_powertools
from tickwork.local.runner import LocalRuntime
from tickwork.platform import migrate
from tickwork.platform.config import ActionTypeConfig, RateLimit, Settings
from tickwork.platform.db import Connection, connect
from tickwork.platform.queues import enqueue
from tickwork.platform.queues.port import MESSAGE_WINDOW
from tickwork.platform.sql import query
from tickwork.platform.wallclock import utcnow
from tickwork.providers.log import Delivery, LogProvider
from tools import statement_costs
from tools.proc import cpu_seconds

BENCH_DATABASE = "tickwork_bench"
# Rows of the `log` type due within the message window share messages of up to this many
# ids (a type sending thousands a second would set as much: see docs/deploy.md); a burst's
# dispatch takes `--batch` rows, in as many messages as that makes.
ROWS_PER_MESSAGE = 100
# The sustained search's steps (rows over --sustained-seconds), and the p99 a step must keep.
SUSTAINED_STEPS = (100_000, 200_000, 500_000, 1_000_000, 2_000_000)
SUSTAINED_P99_MS = 100.0
# A step whose rows are not all delivered this long after the last one's due time failed.
SUSTAINED_PATIENCE = 60.0


@dataclass
class Lags:
    p50: float
    p95: float
    p99: float
    max: float

    @classmethod
    def of(cls, deliveries: Sequence[Delivery]) -> Lags:
        lags = sorted(d.called_at - d.due_at for d in deliveries)
        if not lags:
            return cls(0, 0, 0, 0)

        def pct(p: float) -> float:
            return lags[min(len(lags) - 1, int(p * len(lags)))]

        return cls(pct(0.50), pct(0.95), pct(0.99), lags[-1])

    def __str__(self) -> str:
        ms = [round(v * 1000, 1) for v in (self.p50, self.p95, self.p99, self.max)]
        return f"lag p50 {ms[0]} ms, p95 {ms[1]} ms, p99 {ms[2]} ms, max {ms[3]} ms"


class Stages:
    """Where a run's time went: seconds and rows inside the claim and the finalize, and
    every statement this process sent (psycopg's Cursor.execute, counted)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seconds: dict[str, float] = {"claim": 0.0, "finalize": 0.0}
        self.rows: dict[str, int] = {"claim": 0, "finalize": 0}
        self.calls: dict[str, int] = {"claim": 0, "finalize": 0}
        self.statements = 0
        self.dispatches = 0  # dispatcher invocations
        self.messages = 0  # queue messages they received

    def add(self, stage: str, seconds: float, rows: int) -> None:
        with self.lock:
            self.seconds[stage] += seconds
            self.rows[stage] += rows
            self.calls[stage] += 1

    def rate(self, stage: str) -> float:
        return self.rows[stage] / max(self.seconds[stage], 1e-9)


@contextmanager
def measured(stages: Stages) -> Iterator[None]:
    """Time actions.claim and actions.finalize and count statements while the block runs."""
    claim, finalize, execute = actions.claim, actions.finalize, psycopg.Cursor.execute
    dispatch = Dispatcher.dispatch

    def timed_claim(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        result = claim(*args, **kwargs)
        stages.add("claim", time.perf_counter() - started, len(result))
        return result

    def timed_finalize(conn: Connection, outcomes: Sequence[Any], **options: Any) -> Any:
        started = time.perf_counter()
        result = finalize(conn, outcomes, **options)
        stages.add("finalize", time.perf_counter() - started, len(outcomes))
        return result

    def counted_dispatch(self: Dispatcher, messages: Sequence[Any], *args: Any,
                         **kwargs: Any) -> Any:  # fmt: skip
        with stages.lock:
            stages.dispatches += 1
            stages.messages += len(messages)
        return dispatch(self, messages, *args, **kwargs)

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        stages.statements += 1  # a race may lose a count: a bench figure, not a ledger
        return execute(self, *args, **kwargs)

    actions.claim, actions.finalize = timed_claim, timed_finalize
    psycopg.Cursor.execute = counted  # type: ignore[method-assign]
    Dispatcher.dispatch = counted_dispatch  # type: ignore[method-assign]
    try:
        yield
    finally:
        actions.claim, actions.finalize = claim, finalize
        Dispatcher.dispatch = dispatch  # type: ignore[method-assign]
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]


def backend_cpu_seconds(conn: Connection) -> float | None:
    """CPU seconds the Postgres backends of the bench database have used since they
    started; None when the server is not on this machine."""
    pids = [row[0] for row in conn.execute(
        "select pid from pg_stat_activity where datname = current_database()"
        " and pid <> pg_backend_pid()"
    ).fetchall()]  # fmt: skip
    total = 0.0
    for pid in pids:
        seconds = cpu_seconds(pid)
        if seconds is None:
            return None
        total += seconds
    return total


def transactions(conn: Connection) -> int:
    """Transactions of the bench database so far, by Postgres's count (every process's)."""
    conn.execute("select pg_stat_clear_snapshot()")
    row = conn.execute(
        "select xact_commit + xact_rollback from pg_stat_database"
        " where datname = current_database()"
    ).fetchone()
    return int(row[0]) if row else 0


class Sampler:
    """A thread that samples while the block runs: `_sample` loops until `_stop` is set."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name=type(self).__name__,
                                        daemon=True)  # fmt: skip

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        raise NotImplementedError


class HorizonWatch(Sampler):
    """Samples, every 0.1 s while the block runs, whether another session of the server
    holds a transaction id: while one does, no row version newer than it can be pruned,
    so an update finds no room beside the old version on its page and cannot be HOT (on a
    shared server, another suite's transactions do this to the bench's)."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.held = 0
        self.samples = 0

    def _sample(self) -> None:
        # Through libpq directly, so the bench's count of statements leaves these out.
        with connect(self.url) as conn:
            while not self._stop.wait(0.1):
                result = conn.pgconn.exec_(
                    b"select count(*) from pg_stat_activity where backend_xid is not null"
                    b" and datname is distinct from current_database()"
                )
                self.samples += 1
                self.held += result.get_value(0, 0) not in (None, b"0")


def row_updates(conn: Connection) -> tuple[int, int]:
    """Row updates of scheduled_actions so far, and how many of them were HOT (written
    beside the old version with no index entry); backends report theirs when they end."""
    conn.execute("select pg_stat_clear_snapshot()")
    row = conn.execute(
        "select n_tup_upd, n_tup_hot_upd from pg_stat_user_tables"
        " where relname = 'scheduled_actions'"
    ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def wal_written(conn: Connection) -> tuple[int, int]:
    """WAL bytes and full-page images the whole server has written so far (pg_stat_wal).
    Many full-page images in a burst mean a checkpoint began just before or during it:
    the first change to each page after one logs the whole 8 KB page."""
    conn.execute("select pg_stat_clear_snapshot()")
    row = conn.execute("select wal_bytes, wal_fpi from pg_stat_wal").fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def load_average() -> str:
    """The 1, 5 and 15 minute load averages: a shared machine's figures need them."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def cpu_times() -> list[int] | None:
    """The machine's CPU time so far, by kind: user, nice, system, idle, iowait, irq,
    softirq, steal (the first line of /proc/stat); None where there is no /proc."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    return [int(value) for value in fields[1:9]]


def steal_share(before: list[int] | None, after: list[int] | None) -> float | None:
    """The share of the CPU time between two readings that the host gave to others (steal):
    a virtual machine runs that much slower whatever its load average says."""
    if before is None or after is None:
        return None
    spent = [later - earlier for earlier, later in zip(before, after, strict=True)]
    total = sum(spent)
    return spent[7] / total if total > 0 else 0.0


class SyncProbe(Sampler):
    """While the block runs, a thread times 8 KB writes each made durable (fdatasync, as a
    commit's WAL flush is) every 10 ms in `directory` (where the embedded server keeps its
    data): a disk that stalls now and then shows in the lag of every commit waiting on it,
    and a run's late deliveries can be set against the stalls. fdatasync releases the GIL,
    so the probe takes the interpreter from the dispatchers only to loop."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory
        self.samples: list[tuple[float, float]] = []  # (started, Unix time; seconds)

    def _sample(self) -> None:
        fd, name = tempfile.mkstemp(dir=self.directory)
        try:
            while not self._stop.wait(0.01):
                started, clock = time.time(), time.perf_counter()
                os.pwrite(fd, b"\0" * 8192, 0)
                os.fdatasync(fd)
                self.samples.append((started, time.perf_counter() - clock))
        finally:
            os.close(fd)
            os.unlink(name)

    def stalls(self, over: float = 0.02) -> list[tuple[float, float]]:
        """The syncs that took longer than `over` seconds, as (started, seconds)."""
        return [(started, took) for started, took in self.samples if took > over]

    def __str__(self) -> str:
        latencies = sorted(took for _, took in self.samples)
        if not latencies:
            return f"disk sync (8 KB + fdatasync in {self.directory}): no sample"
        p99 = latencies[int(0.99 * (len(latencies) - 1))]
        slow = sum(latency > 0.05 for latency in latencies)
        return (f"disk sync (8 KB + fdatasync in {self.directory}, {len(latencies):,}):"
                f" p50 {latencies[len(latencies) // 2] * 1000:.2f} ms, p99 {p99 * 1000:.2f}"
                f" ms, max {latencies[-1] * 1000:.1f} ms, {slow} over 50 ms")  # fmt: skip


def disk_sync_latency(directory: Path, seconds: float = 5.0) -> str:
    with SyncProbe(directory) as probe:
        time.sleep(seconds)
    return f"{probe} in {seconds:g} s"


def late_behind_stalls(
    deliveries: Sequence[Delivery], stalls: Sequence[tuple[float, float]], late: float = 0.05
) -> tuple[int, int]:
    """How many deliveries were more than `late` seconds late, and how many of those were
    waiting (between their due time and their call) while a disk sync stalled."""
    overdue = [d for d in deliveries if d.called_at - d.due_at > late]
    behind = sum(
        any(started < d.called_at and started + took > d.due_at for started, took in stalls)
        for d in overdue
    )
    return len(overdue), behind


def prepare_database(admin_url: str, name: str = BENCH_DATABASE) -> str:
    """A migrated database `name`, made afresh on the server of `admin_url`."""
    drop_database(admin_url, name)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    url = with_database(admin_url, name)
    migrate.migrate(url)
    return url


def drop_database(admin_url: str, name: str = BENCH_DATABASE) -> None:
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
        )


def reset(conn: Connection) -> Any:
    conn.execute("truncate scheduled_actions, workspaces cascade")
    row = conn.execute("insert into workspaces (name) values ('bench') returning id").fetchone()
    assert row is not None
    return row[0]


def add_event_endpoint(conn: Connection, workspace: Any) -> None:
    """An active outcome-event endpoint taking every action event: each finalized row then
    makes its event row in the finalize's statement (migration 0026)."""
    conn.execute(
        "with c as (insert into connections (workspace_id, name, provider, settings)"
        " values (%(ws)s, 'events:bench', 'event', '{\"url\": \"https://example.com/e\"}')"
        " returning id)"
        " insert into event_endpoints (workspace_id, connection_id, event_types)"
        " select %(ws)s, c.id, array['action.published', 'action.failed', 'action.cancelled']"
        " from c",
        {"ws": workspace},
    )


def insert_rows(conn: Connection, workspace: Any, count: int, start: Any, spread: float) -> None:
    """`count` rows due from `start`, spread over `spread` seconds. `start` must leave
    time for the insert (see due_after_insert): rows that fell due while being written
    would charge the insert to the drain."""
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %(ws)s, 'log', 't' || g,"
        "        %(start)s + (g - 1) * %(spread)s / %(n)s * interval '1 second'"
        " from generate_series(1, %(n)s) g",
        {"ws": workspace, "start": start, "spread": spread, "n": count},
    )
    # Both tables that hold a queued row: the queue's index would otherwise still hold the
    # entries of the last burst's finished rows (autovacuum's work, between two bursts).
    conn.execute("vacuum analyze scheduled_actions")
    conn.execute("vacuum analyze action_queue")


def due_after_insert(count: int, lead: float = 0.0) -> datetime:
    """A due time `lead` seconds after the insert of `count` rows is over: the insert
    and its vacuum take about 25 µs a row here; allowed twice that, and a second."""
    return utcnow() + timedelta(seconds=lead + 1.0 + count / 20_000)


def wait_until(moment: datetime, what: str) -> None:
    """Sleep until `moment`; say so when the setup overran it (the figure is then long)."""
    remaining = (moment - utcnow()).total_seconds()
    if remaining < 0:
        print(f"    (setup overran {what} by {-remaining:.2f} s: this drain includes it)")
    time.sleep(max(0.0, remaining))


# A rate limit no burst here reaches: what configuring a limit costs when it does not bind.
LOOSE_LIMIT = RateLimit(limit=1_000_000, per="second")


def bench_settings(
    ledger: bool = True, rows_per_message: int = ROWS_PER_MESSAGE, throttle: bool = False
) -> Settings:
    log = ActionTypeConfig(provider="log", options={"quiet": True},
                           rows_per_message=rows_per_message,
                           rate_limits=(LOOSE_LIMIT,) if throttle else ())  # fmt: skip
    return Settings(
        action_types={"log": log},
        tick_batch_size=2000,
        tick_budget_seconds=600,
        attempts_ledger=ledger,
    )


def wait_for(deliveries: list[Delivery], count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(deliveries) < count and time.monotonic() < deadline:
        time.sleep(0.01)


def run_engine(
    url: str, count: int, spread: float, workers: int, batch: int, lead: float,
    ledger: bool = True, tick_process: bool = True, rows_per_message: int = ROWS_PER_MESSAGE,
    patience: float = 600.0, events: bool = False, throttle: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """`count` rows due `lead` seconds after a tick, spread over `spread` seconds, through
    the local runtime's handlers (already running, as after any deploy). With a lead inside
    the look-ahead the tick enqueues them ahead (the design case); with no lead they fall
    due as the tick runs (rows created late, or after an outage). `tick_process`: the tick
    in its own process, as `tickwork dev` runs it, or in a thread beside the dispatchers.
    `batch`: messages per dispatch, each of up to `rows_per_message` rows due together.
    `patience`: how long after the last row's due time to wait for the rest."""
    with connect(url) as conn:
        workspace = reset(conn)
        if events:
            add_event_endpoint(conn, workspace)
    local = LocalRuntime(
        url, bench_settings(ledger, rows_per_message, throttle), tick_interval=3600,
        batch_size=batch,
        workers_per_type=workers, tick_process=tick_process,
    )  # fmt: skip
    provider = LogProvider({"quiet": True})
    local.runtime.providers.register("log", provider)
    local.start()  # its first tick finds nothing
    wait_for_ticks(local, 1)
    with connect(url) as conn:
        due = due_after_insert(count, lead)
        insert_rows(conn, workspace, count, due, spread)
    wait_until(due - timedelta(seconds=lead), "the tick")
    with connect(url) as conn:
        updates_before = row_updates(conn)
        transactions_before = transactions(conn)
        wal_before = wal_written(conn)
    stages = Stages()
    cpu_before = time.process_time()
    tick_cpu_before = (cpu_seconds(local.tick_pid) if local.tick_pid else None) or 0.0
    with measured(stages), HorizonWatch(url) as horizon:
        local.trigger_tick()
        wait_for(provider.deliveries, count, timeout=lead + spread + patience)
    python_cpu = time.process_time() - cpu_before
    tick_cpu = (cpu_seconds(local.tick_pid) or 0.0) - tick_cpu_before if local.tick_pid else None
    with connect(url) as conn:
        postgres_cpu = backend_cpu_seconds(conn)
    wait_for_ticks(local, 2)
    local.stop()
    time.sleep(0.5)  # the runtime's backends report their counts as they exit
    with connect(url) as conn:
        updates_after = row_updates(conn)
        transactions_after = transactions(conn)
        wal_after = wal_written(conn)
    deliveries = list(provider.deliveries)
    calls = [d.called_at for d in deliveries]
    tick = local.ticks[1]
    return {
        "delivered": len(deliveries),
        "distinct": len({d.action_id for d in deliveries}),
        "drain_seconds": max(calls) - due.timestamp(),
        "dispatch_seconds": max(calls) - min(calls),
        "tick_seconds": tick.get("elapsed_seconds", 0.0),
        "tick_enqueued": tick.get("enqueued", 0),
        "lags": Lags.of(deliveries),
        "stages": stages,
        "python_cpu": python_cpu,
        "tick_cpu": tick_cpu,
        "postgres_cpu": postgres_cpu,
        # Less the watch's own samples, one transaction each.
        "transactions": transactions_after - transactions_before - horizon.samples,
        "row_updates": updates_after[0] - updates_before[0],
        "hot_updates": updates_after[1] - updates_before[1],
        "wal_bytes": wal_after[0] - wal_before[0],
        "wal_full_pages": wal_after[1] - wal_before[1],
        "horizon_held": horizon.held,
        "horizon_samples": horizon.samples,
        "deliveries": deliveries,
    }


def wait_for_ticks(local: LocalRuntime, count: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while len(local.ticks) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the tick ran {len(local.ticks)} times, not {count}")
        time.sleep(0.01)


def report_burst(
    title: str, count: int, result: dict[str, Any], workers: int, batch: int, per_message: int
) -> None:
    tick_rate = result["tick_enqueued"] / max(result["tick_seconds"], 1e-9)
    print(f"\n{title}")
    print(f"    delivered {result['delivered']:,} ({result['distinct']:,} distinct)")
    print(f"    tick enqueue: {result['tick_enqueued']:,} rows in {result['tick_seconds']:.2f} s"
          f" = {tick_rate:,.0f} rows/s")  # fmt: skip
    print(f"    dispatch (claim + provider + finalize): {count / result['dispatch_seconds']:,.0f}"
          f" rows/s ({workers} workers, batches of {batch} messages of up to {per_message}"
          " rows)")  # fmt: skip
    print(f"    end-to-end drain {result['drain_seconds']:.2f} s from the due time"
          f" = {count / result['drain_seconds']:,.0f} actions/s")  # fmt: skip
    print(f"    {result['lags']}")
    report_costs(count, result)


def report_costs(count: int, result: dict[str, Any]) -> None:
    stages: Stages = result["stages"]
    print(f"    inside the statements: claim {stages.rate('claim'):,.0f} rows/s"
          f" ({stages.seconds['claim']:.2f} s), finalize {stages.rate('finalize'):,.0f} rows/s"
          f" ({stages.seconds['finalize']:.2f} s)")  # fmt: skip
    where = "sent by the dispatchers" if result["tick_cpu"] is not None else "sent by this process"
    print(f"    statements per action {where}: {stages.statements / count:.4f}"
          f" ({stages.statements:,} for {count:,}); transactions per action, every process"
          f" (Postgres's count): {result['transactions'] / count:.4f}")  # fmt: skip
    updates, hot = result["row_updates"], result["hot_updates"]
    print(f"    row versions written per action: {updates / count:.2f}"
          f" ({hot / max(updates, 1):.0%} HOT: no index entry written)")  # fmt: skip
    print(f"    WAL written, the whole server's: {result['wal_bytes'] / count:,.0f} bytes per"
          f" action, {result['wal_full_pages']:,} full-page images (many: a checkpoint began"
          " just before or during it)")  # fmt: skip
    if result["horizon_held"]:
        print(f"    another transaction held back the clean-up of old row versions in"
              f" {result['horizon_held']} of {result['horizon_samples']} samples: fewer"
              " updates can be HOT on a shared server")  # fmt: skip
    print(f"    dispatcher invocations: {stages.dispatches:,}, {stages.messages:,} messages,"
          f" {count / max(stages.messages, 1):.1f} rows per message,"
          f" {stages.messages / max(stages.dispatches, 1):.1f} messages per invocation;"
          f" claims {stages.calls['claim']:,} ({count / max(stages.calls['claim'], 1):.1f} rows"
          f" each), finalizes {stages.calls['finalize']:,}"
          f" ({count / max(stages.calls['finalize'], 1):.1f} rows each)")  # fmt: skip
    pg = result["postgres_cpu"]
    pg_text = "not on this machine" if pg is None else f"{pg:.2f} s"
    python = f"Python process {result['python_cpu']:.2f} s"
    if result["tick_cpu"] is not None:
        python = (f"Python: runtime process {result['python_cpu']:.2f} s, tick process"
                  f" {result['tick_cpu']:.2f} s")  # fmt: skip
    print(f"    CPU from the tick on: {python}, Postgres backends {pg_text},"
          f" over {result['drain_seconds']:.2f} s of drain")  # fmt: skip


def run_floor(
    url: str, count: int, workers: int, batch: int, tick_batch: int, ledger: bool = True,
    events: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """The burst's statements with no Python work between them: one connection takes due
    rows as the tick's passes do, `workers` connections claim and finalize them in `batch`es
    (ids kept as the text of a Postgres array, every row published)."""
    with connect(url) as conn:
        workspace = reset(conn)
        if events:
            add_event_endpoint(conn, workspace)
        start = due_after_insert(count)
        insert_rows(conn, workspace, count, start, 0)
    wait_until(start, "the due time")
    claim, finalize = query("claim_actions"), query("finalize_actions")
    waves: queue.SimpleQueue[list[Any] | None] = queue.SimpleQueue()
    finished: list[float] = []

    def work() -> None:
        with connect(url) as conn:
            while (ids := waves.get()) is not None:
                claimed = conn.execute(claim, {
                    "ids": ids, "action_type": "log", "early_tolerance": 1.0,
                    "max_lateness": None, "reclaim_after": None, "route_provider": None,
                }).fetchall()  # fmt: skip
                n = len(claimed)
                ids = [row[0] for row in claimed]
                conn.execute(finalize, {
                    "ids": ids, "statuses": ["published"] * n,
                    "provider_ids": [None] * n, "error_codes": [None] * n,
                    "last_errors": [None] * n, "next_attempt_ats": [None] * n,
                    "attempt_deltas": [0] * n,
                } | actions.attempt_columns([], ledger)).fetchall()  # fmt: skip
        finished.append(time.time())

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for thread in threads:
        thread.start()
    with connect(url) as conn:
        while True:
            # The tick's pass: its type's next rows after the watermark, which it moves.
            with enqueue.marking(conn):
                taken = enqueue.take_due(conn, "log", utcnow(), tick_batch)
                if not taken or not taken.rows:
                    break
                enqueue.finish_pass(conn, taken, set())
            ids = [row.id for row in taken.rows]
            for i in range(0, len(ids), batch):
                waves.put(ids[i : i + batch])
    for _ in threads:
        waves.put(None)
    for thread in threads:
        thread.join()
    with connect(url) as conn:
        row = conn.execute(
            "select count(*) from scheduled_actions where status = 'published'"
        ).fetchone()
    assert row is not None
    return {"published": row[0], "drain_seconds": max(finished) - start.timestamp()}


def run_seed_baseline(url: str, count: int, workers: int) -> dict[str, Any]:
    """The playbook's scheduler-tick + dispatch worker, literally: 200 due rows per tick,
    each claimed, sent and finalized with its own statements, ticks back to back."""
    with connect(url) as conn:
        workspace = reset(conn)
        start = due_after_insert(count)
        insert_rows(conn, workspace, count, start, 0)
    wait_until(start, "the due time")
    provider = LogProvider({"quiet": True})
    local = threading.local()

    def worker_conn() -> Connection:
        if not hasattr(local, "conn"):
            local.conn = connect(url)
        return local.conn  # type: ignore[no-any-return]

    def dispatch_one(row_id: UUID) -> None:
        conn = worker_conn()
        with conn.cursor(row_factory=dict_row) as cur:
            claimed = cur.execute(
                "update scheduled_actions set status = 'submitted', submitted_at = now()"
                " where id = %s and status = 'queued' returning *",
                (row_id,),
            ).fetchone()
        if claimed is None:
            return
        result = provider.send(action_from_row(claimed))
        conn.execute(
            "update scheduled_actions set status = 'published', provider_id = %s,"
            " finished_at = now() where id = %s",
            (getattr(result, "provider_id", None), row_id),
        )

    with connect(url) as conn, ThreadPoolExecutor(max_workers=workers) as pool:
        while True:
            due = conn.execute(
                "select id from scheduled_actions where status = 'queued' and publish_at <= now()"
                " order by publish_at, id limit 200"
            ).fetchall()
            if not due:
                break
            list(pool.map(dispatch_one, [row[0] for row in due]))
    deliveries = list(provider.deliveries)
    return {
        "delivered": len(deliveries),
        "drain_seconds": max(d.called_at for d in deliveries) - start.timestamp(),
        "lags": Lags.of(deliveries),
    }


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tickwork-bench", description=__doc__)
    parser.add_argument("--burst", type=int, default=100_000)
    parser.add_argument("--spread-rows", type=int, default=5_000)
    parser.add_argument("--spread-seconds", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=2, help="dispatcher workers")
    parser.add_argument("--batch", type=int, default=1000,
                        help="rows per dispatch and per floor statement (burst)")  # fmt: skip
    parser.add_argument("--rows-per-message", type=int, default=ROWS_PER_MESSAGE,
                        help="rows due together a queue message carries (burst)")  # fmt: skip
    parser.add_argument("--lead", type=float, default=20.0,
                        help="seconds between the tick and the burst's due time")  # fmt: skip
    parser.add_argument("--tick-in-thread", action="store_true",
                        help="the tick in a thread beside the dispatchers, not in its own"
                        " process")  # fmt: skip
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--skip-floor", action="store_true")
    parser.add_argument("--skip-costs", action="store_true",
                        help="skip (f): each hot statement's cost per action")  # fmt: skip
    parser.add_argument("--costs-only", action="store_true",
                        help="only (f): each hot statement's cost per action")  # fmt: skip
    parser.add_argument("--skip-spread", action="store_true")
    parser.add_argument("--sustained-steps", type=steps, default=SUSTAINED_STEPS,
                        help="rows of each step of the sustained search (e), comma-separated,"
                        " rising")  # fmt: skip
    parser.add_argument("--sustained-seconds", type=float, default=60.0)
    parser.add_argument("--skip-sustained", action="store_true")
    parser.add_argument("--sustained-only", action="store_true",
                        help="only the sustained search (e)")  # fmt: skip
    parser.add_argument("--spread-only", action="store_true", help="only the spread (b)")
    parser.add_argument("--ledger-off", action="store_true",
                        help="every stage without the delivery ledger's writes")  # fmt: skip
    parser.add_argument("--events-compare", type=int, default=0, metavar="ROUNDS",
                        help="only the burst (a), with and without an outcome-event endpoint"
                        " registered alternately, ROUNDS times each: the events' cost")  # fmt: skip
    parser.add_argument("--throttle-compare", type=int, default=0, metavar="ROUNDS",
                        help="only the burst (a), with a rate limit configured that it does"
                        " not reach and without, alternately, ROUNDS times each: what a"
                        " limit costs when it does not bind")  # fmt: skip
    parser.add_argument("--ledger-compare", type=int, default=0, metavar="ROUNDS",
                        help="only the burst (a), ledger on and off alternately, ROUNDS"
                        " times each: the ledger's cost")  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    quiet_powertools()
    cpu_at_start = cpu_times()

    admin_url = os.environ.get("DATABASE_URL")
    server = None
    if not admin_url:
        server = EmbeddedPostgres(Path(tempfile.mkdtemp()) / "pgdata", delete_on_exit=True)
        admin_url = server.url()
    url = prepare_database(admin_url)
    where = "the server at DATABASE_URL" if server is None else "an embedded Postgres"
    tick = "its own process" if not args.tick_in_thread else "a thread of the runtime"
    print(f"tickwork bench on {where}, {os.cpu_count()} CPUs, in-process queue, log provider,"
          f" the tick in {tick}; load average {load_average()}\n"
          f"{disk_sync_latency(Path(tempfile.gettempdir()))}")  # fmt: skip

    n, workers, batch, per_message = args.burst, args.workers, args.batch, args.rows_per_message
    messages = max(1, batch // per_message)  # per dispatch: `batch` rows of a burst
    ledger = not args.ledger_off
    tick_process = not args.tick_in_thread
    if (only := one_section(args, url)) is not None:
        only()
        return finish(admin_url, server, cpu_at_start)
    if not ledger:
        print("the delivery ledger is off (--ledger-off): no action_attempts rows")
    ahead = run_engine(url, n, 0.0, workers, messages, args.lead, ledger, tick_process,
                       per_message)  # fmt: skip
    report_burst(f"(a) burst: {n:,} rows due at the same second, enqueued ahead by the tick",
                 n, ahead, workers, messages, per_message)  # fmt: skip
    late = run_engine(url, n, 0.0, workers, messages, 0.0, ledger, tick_process, per_message)
    report_burst(f"(a') burst: {n:,} rows already due when the tick first sees them",
                 n, late, workers, messages, per_message)  # fmt: skip
    print(f"    already due took {late['drain_seconds'] / ahead['drain_seconds']:.2f}x the time of"
          " enqueued ahead")  # fmt: skip

    if not args.skip_spread:
        report_spread(url, args.spread_rows, args.spread_seconds, ledger, tick_process)
    if not args.skip_sustained:
        report_sustained(url, args.sustained_steps, args.sustained_seconds, ledger, tick_process)

    if not args.skip_floor:
        report_floor(url, n, workers, batch, ledger, ahead, late)
    if not args.skip_costs:
        report_costs_per_statement(url, n, batch)
    if not args.skip_baseline:
        report_baseline(url, n, workers, ahead, late)
    return finish(admin_url, server, cpu_at_start)


def one_section(args: argparse.Namespace, url: str) -> Callable[[], None] | None:
    """The one section an option asks for alone (a comparison, or an --*-only), if any."""
    n, workers, batch, per_message = args.burst, args.workers, args.batch, args.rows_per_message
    ledger, tick_process = not args.ledger_off, not args.tick_in_thread
    sections: list[tuple[bool, Callable[[], None]]] = [
        (args.events_compare, lambda: compare_events(
            url, n, workers, batch, args.lead, args.events_compare, per_message)),
        (args.throttle_compare, lambda: compare_throttle(
            url, n, workers, batch, args.lead, args.throttle_compare, per_message)),
        (args.ledger_compare, lambda: compare_ledger(
            url, n, workers, batch, args.lead, args.ledger_compare, per_message)),
        (args.spread_only, lambda: report_spread(
            url, args.spread_rows, args.spread_seconds, ledger, tick_process)),
        (args.sustained_only, lambda: report_sustained(
            url, args.sustained_steps, args.sustained_seconds, ledger, tick_process)),
        (args.costs_only, lambda: report_costs_per_statement(url, n, batch)),
    ]  # fmt: skip
    return next((section for wanted, section in sections if wanted), None)


def report_spread(url: str, rows: int, seconds: float, ledger: bool, tick_process: bool) -> None:
    with SyncProbe(Path(tempfile.gettempdir())) as disk:
        spread = run_engine(url, rows, seconds, 2, 10, 3.0, ledger, tick_process)
    print(f"\n(b) spread: {rows:,} rows due uniformly over {seconds:g} s (2 workers,"
          " batches of 10)")  # fmt: skip
    print(f"    delivered {spread['delivered']:,}; {spread['lags']}")
    report_costs(rows, spread)
    overdue, behind = late_behind_stalls(spread["deliveries"], disk.stalls())
    print(f"    the disk meanwhile: {disk}; {len(disk.stalls())} syncs over 20 ms;"
          f" {overdue} deliveries more than 50 ms late, {behind} of them while a sync"
          " stalled")  # fmt: skip


def steps(text: str) -> tuple[int, ...]:
    """--sustained-steps: rising row counts, comma-separated."""
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        counts = ()
    if not counts or any(c <= 0 for c in counts) or list(counts) != sorted(set(counts)):
        raise argparse.ArgumentTypeError("steps are rising positive row counts, e.g. 1000,5000")
    return counts


@dataclass
class Step:
    rows: int
    seconds: float
    result: dict[str, Any]

    @property
    def rate(self) -> float:
        return self.rows / self.seconds

    @property
    def on_time(self) -> bool:
        lags: Lags = self.result["lags"]
        return self.result["distinct"] == self.rows and lags.p99 * 1000 <= SUSTAINED_P99_MS


def search_sustained(
    url: str, counts: Sequence[int], seconds: float, ledger: bool = True,
    tick_process: bool = True, on_step: Callable[[Step], None] | None = None,
) -> list[Step]:  # fmt: skip
    """Each count of rows due uniformly over `seconds`, rising, until a step's lag p99
    passes SUSTAINED_P99_MS or a row is not delivered within SUSTAINED_PATIENCE seconds of
    the last one's due time (that step included): 2 dispatcher workers taking batches of
    up to 10 messages, as the spread and a Lambda's SQS batch do."""
    done: list[Step] = []
    for count in counts:
        result = run_engine(url, count, seconds, 2, 10, 3.0, ledger, tick_process,
                            patience=SUSTAINED_PATIENCE)  # fmt: skip
        step = Step(count, seconds, result)
        done.append(step)
        if on_step is not None:
            on_step(step)
        if not step.on_time:
            break
    return done


def report_sustained(
    url: str, counts: Sequence[int], seconds: float, ledger: bool, tick_process: bool
) -> None:
    print(f"\n(e) sustained: rows due uniformly over {seconds:g} s, each at its own instant, in"
          f" rising steps until the lag's p99 passes {SUSTAINED_P99_MS:g} ms (2 workers,"
          f" batches of 10 messages of up to {ROWS_PER_MESSAGE} rows due within"
          f" {MESSAGE_WINDOW.total_seconds() * 1000:g} ms)")  # fmt: skip

    def report(step: Step) -> None:
        result = step.result
        verdict = "on time" if step.on_time else f"p99 over {SUSTAINED_P99_MS:g} ms"
        if result["distinct"] < step.rows:
            verdict = f"{step.rows - result['distinct']:,} not delivered {SUSTAINED_PATIENCE:g} s"
            verdict += " after the last was due"
        print(
            f"\n    {step.rows:,} rows = {step.rate:,.0f} actions/s: delivered"
            f" {result['distinct']:,} of {step.rows:,}; {result['lags']}; {verdict}"
        )
        print(f"    the tick's run from the lead on: {result['tick_enqueued']:,} rows handed to"
              f" their queues in {result['tick_seconds']:.1f} s")  # fmt: skip
        report_costs(step.rows, step.result)

    found = search_sustained(url, counts, seconds, ledger, tick_process, report)
    held = [step for step in found if step.on_time]
    if held:
        best = held[-1]
        more = "" if len(found) > len(held) else " (the largest step tried)"
        print(
            f"\n    highest sustained rate with p99 <= {SUSTAINED_P99_MS:g} ms:"
            f" {best.rate:,.0f} actions/s ({best.rows:,} over {seconds:g} s){more}"
        )
    else:
        print(f"\n    no step kept p99 <= {SUSTAINED_P99_MS:g} ms")


def report_costs_per_statement(url: str, n: int, batch: int) -> None:
    """(f): the tick's pass, the claim and the finalize of a burst, each alone."""
    with connect(url) as conn:
        workspace = reset(conn)
        insert_rows(conn, workspace, n, utcnow(), 0)
    print(f"\n(f) each hot statement alone, {n:,} rows due now, one connection, batches of"
          f" {batch} (the tick's passes of {bench_settings().tick_batch_size}); the log"
          " provider's answers")  # fmt: skip
    statement_costs.report(
        statement_costs.run(url, workspace, n, batch, bench_settings().tick_batch_size)
    )


def report_floor(
    url: str, n: int, workers: int, batch: int, ledger: bool,
    ahead: dict[str, Any], late: dict[str, Any],
) -> None:  # fmt: skip
    floor = run_floor(url, n, workers, batch, bench_settings().tick_batch_size, ledger)
    rate = n / floor["drain_seconds"]
    print(f"\n(d) floor: the same statements, no Python work between them ({workers}"
          f" connections claiming and finalizing, batches of {batch})")  # fmt: skip
    print(f"    {floor['published']:,} published; drain {floor['drain_seconds']:.2f} s ="
          f" {rate:,.0f} actions/s; the engine reaches"
          f" {floor['drain_seconds'] / ahead['drain_seconds']:.0%} of it enqueued ahead,"
          f" {floor['drain_seconds'] / late['drain_seconds']:.0%} already due")  # fmt: skip


def report_baseline(
    url: str, n: int, workers: int, ahead: dict[str, Any], late: dict[str, Any]
) -> None:
    baseline = run_seed_baseline(url, n, workers)
    base = baseline["drain_seconds"]
    print(f"\n(c) baseline: the playbook's literal loop (200 due rows per tick, one claim and"
          f" one finalize per row, ticks back to back, {workers} worker threads)")  # fmt: skip
    print(f"    drain {base:.2f} s = {n / base:,.0f} actions/s; {baseline['lags']}")
    print("\nratios against the baseline, same run:")
    for label, result in (("(a) ", ahead), ("(a')", late)):
        lag_ratio = baseline["lags"].p99 / max(result["lags"].p99, 1e-9)
        print(f"    {label} drain {base / result['drain_seconds']:.1f}x faster,"
              f" p99 lag {lag_ratio:.1f}x lower")  # fmt: skip


def compare_ledger(
    url: str, n: int, workers: int, batch: int, lead: float, rounds: int, per_message: int
) -> None:
    """The burst (a) with the ledger on and off, alternately (on, off, on, off, ...) so the
    machine's drift falls on both; medians, and their ratio."""
    drains: dict[bool, list[float]] = {True: [], False: []}
    floors: dict[bool, list[float]] = {True: [], False: []}
    for i in range(rounds):
        for ledger in (True, False):
            result = run_engine(url, n, 0.0, workers, max(1, batch // per_message), lead=lead,
                                ledger=ledger, rows_per_message=per_message)  # fmt: skip
            assert result["distinct"] == n
            drains[ledger].append(result["drain_seconds"])
            pg = result["postgres_cpu"]
            print(f"    round {i + 1}, ledger {'on ' if ledger else 'off'}:"
                  f" drain {result['drain_seconds']:.2f} s = {n / result['drain_seconds']:,.0f}"
                  f" actions/s; finalize {result['stages'].rate('finalize'):,.0f} rows/s;"
                  f" CPU Python {result['python_cpu']:.1f} s, Postgres"
                  f" {'?' if pg is None else f'{pg:.1f}'} s; load {load_average()}")  # fmt: skip
            floor = run_floor(url, n, workers, batch, bench_settings().tick_batch_size, ledger)
            floors[ledger].append(floor["drain_seconds"])
            print(f"    round {i + 1}, ledger {'on ' if ledger else 'off'}, floor (SQL only):"
                  f" {floor['drain_seconds']:.2f} s")  # fmt: skip

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    for label, runs in (("(a) burst", drains), ("(d) floor", floors)):
        on, off = median(runs[True]), median(runs[False])
        print(f"\n{label} of {n:,}, {rounds} rounds each, medians: ledger on {on:.2f} s"
              f" ({n / on:,.0f} actions/s), off {off:.2f} s ({n / off:,.0f} actions/s);"
              f" on/off drain time {on / off:.3f}")  # fmt: skip


def compare_events(
    url: str, n: int, workers: int, batch: int, lead: float, rounds: int, per_message: int
) -> None:
    """The burst (a) with an outcome-event endpoint registered and without, alternately (on,
    off, on, ...) so the machine's drift falls on both; medians, and their ratio. With it,
    every published row's outcome goes to the event outbox in its finalize; the tick, run
    once here, turns none into event rows during the drain (that work is the tick's, off
    the dispatch path), so this is the cost the burst itself pays.
    """
    drains: dict[bool, list[float]] = {True: [], False: []}
    floors: dict[bool, list[float]] = {True: [], False: []}
    for i in range(rounds):
        for events in (True, False):
            result = run_engine(url, n, 0.0, workers, max(1, batch // per_message), lead=lead,
                                rows_per_message=per_message, events=events)  # fmt: skip
            assert result["distinct"] == n
            drains[events].append(result["drain_seconds"])
            made = outbox_entries(url)
            print(f"    round {i + 1}, events {'on ' if events else 'off'}:"
                  f" drain {result['drain_seconds']:.2f} s = {n / result['drain_seconds']:,.0f}"
                  f" actions/s; outbox entries {made:,}; load {load_average()}")  # fmt: skip
            floor = run_floor(url, n, workers, batch, bench_settings().tick_batch_size,
                              events=events)  # fmt: skip
            floors[events].append(floor["drain_seconds"])
            print(
                f"    round {i + 1}, events {'on ' if events else 'off'}, floor (SQL only):"
                f" {floor['drain_seconds']:.2f} s; outbox entries {outbox_entries(url):,}"
            )

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    for label, runs in (("(a) burst", drains), ("(d) floor", floors)):
        on, off = median(runs[True]), median(runs[False])
        print(f"\n{label} of {n:,}, {rounds} rounds each, medians: events on {on:.2f} s"
              f" ({n / on:,.0f} actions/s), off {off:.2f} s ({n / off:,.0f} actions/s);"
              f" on/off drain time {on / off:.3f} (the target: at most 1.05)")  # fmt: skip


def compare_throttle(
    url: str, n: int, workers: int, batch: int, lead: float, rounds: int, per_message: int
) -> None:
    """The burst (a) with a rate limit on its type that it does not reach (LOOSE_LIMIT) and
    without, alternately (limited, unlimited, ...) so the machine's drift falls on both;
    medians, and their ratio. With the limit, every claimed wave takes its slots in one
    more statement; without, the dispatch path is unchanged."""
    drains: dict[bool, list[float]] = {True: [], False: []}
    for i in range(rounds):
        for limited in (True, False):
            result = run_engine(url, n, 0.0, workers, max(1, batch // per_message), lead=lead,
                                rows_per_message=per_message, throttle=limited)  # fmt: skip
            assert result["distinct"] == n
            drains[limited].append(result["drain_seconds"])
            drain = result["drain_seconds"]
            print(f"    round {i + 1}, limit {'on ' if limited else 'off'}: drain {drain:.2f} s"
                  f" = {n / drain:,.0f} actions/s; held back {throttled_entries(url):,};"
                  f" load {load_average()}")  # fmt: skip

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    on, off = median(drains[True]), median(drains[False])
    print(f"\n(a) burst of {n:,}, {rounds} rounds each, medians: limit configured, not binding"
          f" {on:.2f} s ({n / on:,.0f} actions/s), no limit {off:.2f} s ({n / off:,.0f}"
          f" actions/s); with/without drain time {on / off:.3f} (the target: at most"
          " 1.05)")  # fmt: skip


def throttled_entries(url: str) -> int:
    """Rows a limit held back in the last run (none, when it does not bind)."""
    with connect(url) as conn:
        held = conn.execute("select count(*) from action_changes where kind = 'throttled'")
        found = held.fetchone()
    return int(found[0]) if found else 0


def outbox_entries(url: str) -> int:
    """The outbox's entries, which are then dropped (the next run starts with none)."""
    with connect(url) as conn:
        made = conn.execute("select count(*) from event_outbox").fetchone()
        conn.execute("truncate event_outbox")
    return int(made[0]) if made else 0


def finish(admin_url: str, server: EmbeddedPostgres | None, cpu_at_start: list[int] | None) -> int:
    print(f"\nload average at the end {load_average()}")
    steal = steal_share(cpu_at_start, cpu_times())
    if steal is not None:
        print(f"CPU steal over the run: {steal:.1%} of the machine's CPU time (the host's"
              " other guests had it)")  # fmt: skip
    drop_database(admin_url)
    if server is not None:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
