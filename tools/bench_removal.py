"""`make bench-scale`'s removal scenario: what the retention costs the engine beside it.

A workspace with a 30-day retention holds `--removal` finished rows (each with its ledger
attempt) finished 31 to 60 days ago, and a backlog of future rows. The same workload runs
twice: once alone, once while the retention (in a process of its own, as its Lambda is)
archives and removes the old rows:

- a burst: `BURST` rows due now, drained as the tick and the dispatchers do (mark a batch
  due, claim it, finalize it, in waves);
- the spread: beside it, one row at a time made due, marked, claimed and finalized, and a
  calendar page read, as steady traffic and the API would (latency of each round);
- a sampler reading pg_stat_activity every 10 ms for backends waiting on a lock: the
  longest wait seen, and how many lasted over 100 ms.

Printed: each figure with its ratio (with removal / without), the removal's rate (rows a
second, with their attempts), and the sizes of scheduled_actions and action_attempts
(table, indexes) before, after the removal and a vacuum, then after each of three cycles of
as many old rows added, removed by the retention alone and vacuumed: once the space removal
frees is used again, the sizes stop growing.

The issue's full size is `--removal 10000000`; the default here is modest so it runs in a
few minutes on a 2-core machine.
"""

from __future__ import annotations

import multiprocessing
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

from tickwork import calendar
from tickwork.actions import model, store
from tickwork.engine.retention import run_retention
from tickwork.local.embedded import with_database
from tickwork.platform import migrate
from tickwork.platform.archive import FolderArchiveStore
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection, connect
from tickwork.platform.wallclock import utcnow
from tools.statement_costs import tick_pass_rows

DATABASE = "tickwork_bench_scale_removal"
BURST = 50_000
WAVE = 1_000
FUTURE = 100_000
SLICE = 500_000
LOCK_WAIT_LIMIT = 0.100
TABLES = ("scheduled_actions", "action_attempts")
CYCLES = 3


def build(conn: Connection, removal: int) -> UUID:
    """The workspace (30-day retention), `removal` old finished rows with an attempt each,
    and FUTURE rows spread over the next 30 days. Loaded with triggers off (a restore)."""
    row = conn.execute(
        "insert into workspaces (name, retention_days) values ('removal', 30) returning id"
    ).fetchone()
    assert row is not None
    workspace: UUID = row[0]
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %(ws)s, 'log', 'f' || g, now() + interval '2 minutes'"
        "        + g * interval '30 days' / %(n)s from generate_series(1, %(n)s) g",
        {"ws": workspace, "n": FUTURE},
    )
    add_old(conn, workspace, removal)
    conn.execute("vacuum analyze scheduled_actions")
    conn.execute("vacuum analyze action_attempts")
    return workspace


def add_old(conn: Connection, workspace: UUID, count: int) -> None:
    """`count` rows published 31 to 60 days ago, each with its attempt."""
    conn.execute("set session_replication_role = replica")
    try:
        for first in range(1, count + 1, SLICE):
            params = {"ws": workspace, "n": count, "first": first,
                      "last": min(count, first + SLICE - 1)}  # fmt: skip
            conn.execute(
                "with made as ("
                " insert into scheduled_actions (workspace_id, action_type, target_key,"
                "  payload, publish_at, status, submitted_at, finished_at, attempt_count,"
                "  provider_id)"
                " select %(ws)s, 'log', 'p' || g, '{\"text\": \"hello there\"}',"
                "  now() - interval '31 days' - g * interval '29 days' / %(n)s, 'published',"
                "  now() - interval '31 days' - g * interval '29 days' / %(n)s,"
                "  now() - interval '31 days' - g * interval '29 days' / %(n)s, 1, 'log-' || g"
                " from generate_series(%(first)s::int, %(last)s::int) g"
                " returning id, workspace_id, submitted_at)"
                " insert into action_attempts (action_id, attempt, workspace_id, started_at,"
                "  finished_at, latency_ms, outcome, provider_code)"
                " select id, 1, workspace_id, submitted_at, submitted_at, 12, 'delivered', '200'"
                " from made",
                params,
            )
    finally:
        conn.execute("reset session_replication_role")


def sizes(conn: Connection) -> dict[str, tuple[int, int, int]]:
    """Per table: (rows, table bytes, index bytes)."""
    found = {}
    for table in TABLES:
        row = conn.execute(
            sql.SQL(
                "select (select count(*) from {}), pg_table_size(%s), pg_indexes_size(%s)"
            ).format(sql.Identifier(table)),
            (table, table),
        ).fetchone()
        assert row is not None
        found[table] = (int(row[0]), int(row[1]), int(row[2]))
    return found


@dataclass
class Figures:
    burst_seconds: float = 0.0
    spread_ms: list[float] = field(default_factory=list)
    lock_waits: list[float] = field(default_factory=list)

    @property
    def burst_rate(self) -> float:
        return BURST / self.burst_seconds

    def spread(self, quantile: float) -> float:
        ordered = sorted(self.spread_ms)
        return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]


def burst(conn: Connection, workspace: UUID) -> float:
    """Seconds to drain BURST rows due now: mark, claim, finalize, a wave at a time."""
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %s, 'log', 'b' || g, now() - interval '1 second'"
        " from generate_series(1, %s) g",
        (workspace, BURST),
    )
    started = time.perf_counter()
    done = 0
    while done < BURST:
        marked = tick_pass_rows(conn, utcnow(), WAVE)
        if not marked:
            break
        claimed = store.claim(conn, "log", [r.id for r in marked], early_tolerance=1.0)
        store.finalize(conn, [model.published(a.id, f"log-{a.id}") for a in claimed])
        done += len(claimed)
    return time.perf_counter() - started


def spread(url: str, workspace: UUID, stop: threading.Event, out: list[float]) -> None:
    """One row at a time through mark, claim and finalize, and a calendar page: ms a round."""
    with connect(url) as conn:
        start, end = calendar.default_range(None, None, utcnow())
        while not stop.is_set():
            began = time.perf_counter()
            conn.execute(
                "insert into scheduled_actions (workspace_id, action_type, target_key,"
                " publish_at) values (%s, 'log', 's', now() - interval '1 second')",
                (workspace,),
            )
            marked = tick_pass_rows(conn, utcnow(), 10)
            claimed = store.claim(conn, "log", [r.id for r in marked], early_tolerance=1.0)
            store.finalize(conn, [model.published(a.id, "s") for a in claimed])
            calendar.list_actions(conn, workspace, start, end, limit=100)
            out.append((time.perf_counter() - began) * 1000)
            time.sleep(0.005)


def sample_lock_waits(url: str, stop: threading.Event, out: list[float]) -> None:
    """The longest each lock wait lasted, as seen every 10 ms in pg_stat_activity."""
    seen: dict[tuple[int, Any], float] = {}
    with connect(url) as conn:
        while not stop.is_set():
            now = time.perf_counter()
            waiting = conn.execute(
                "select pid, query_start from pg_stat_activity"
                " where wait_event_type = 'Lock' and datname = current_database()"
            ).fetchall()
            current = {(pid, began) for pid, began in waiting}
            for key in current:
                seen.setdefault(key, now)
            for key in list(seen):
                if key not in current:
                    out.append(now - seen.pop(key))
            time.sleep(0.01)
        out.extend(time.perf_counter() - first for first in seen.values())


def remove(url: str, archive: str, pause: float, budget: int, result: Any, began: Any) -> None:
    """The retention as its Lambda runs it, in a process of its own, until nothing is left
    or its `budget` (seconds) is spent."""
    settings = Settings(database_url=url, retention_days=30, retention_batch_size=WAVE,
                        retention_budget_seconds=budget, retention_pause_seconds=pause)  # fmt: skip
    with connect(url) as conn:
        started = time.perf_counter()
        now = conn.execute("select now()").fetchone()
        assert now is not None
        began.set()
        done = run_retention(conn, settings, FolderArchiveStore(Path(archive)), now=now[0])
        result["removed"] = done.removed
        result["attempts"] = done.archived["attempts"]
        result["seconds"] = time.perf_counter() - started
        result["parts"] = done.parts


def workload(url: str, workspace: UUID, beside: Callable[[], None] | None) -> Figures:
    figures = Figures()
    stop = threading.Event()
    threads = [
        threading.Thread(target=spread, args=(url, workspace, stop, figures.spread_ms)),
        threading.Thread(target=sample_lock_waits, args=(url, stop, figures.lock_waits)),
    ]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # the spread's steady state before the burst
    if beside is not None:
        beside()
    with connect(url) as conn:
        figures.burst_seconds = burst(conn, workspace)
    time.sleep(1.0)
    stop.set()
    for thread in threads:
        thread.join()
    return figures


def _mb(value: int) -> str:
    return f"{value / 1e6:,.1f}"


def print_sizes(label: str, found: dict[str, tuple[int, int, int]]) -> None:
    text = "; ".join(
        f"{table} {rows:,} rows, table {_mb(t)} MB, indexes {_mb(i)} MB"
        for table, (rows, t, i) in found.items()
    )
    print(f"    {label:<50} {text}", flush=True)


def ratios(alone: Figures, beside: Figures, again: Figures) -> list[tuple[str, float, float]]:
    """(figure, alone: the mean of the runs before and after, with the removal beside)."""
    return [
        ("burst drain (rows/s)", (alone.burst_rate + again.burst_rate) / 2, beside.burst_rate),
        ("spread round p50 (ms)", (alone.spread(0.5) + again.spread(0.5)) / 2,
         beside.spread(0.5)),
        ("spread round p99 (ms)", (alone.spread(0.99) + again.spread(0.99)) / 2,
         beside.spread(0.99)),
    ]  # fmt: skip


def report(alone: Figures, beside: Figures, again: Figures, result: dict[str, Any],
           pause: float) -> None:  # fmt: skip
    """The workload's figures with and without the removal, and the removal's rate."""
    removed, seconds = int(result.get("removed", 0)), float(result.get("seconds", 0.0))
    print(f"    {'figure (alone: mean of the runs before and after)':<52}{'alone':>10}"
          f"{'+ removal':>11}{'ratio':>8}")  # fmt: skip
    for label, a, b in ratios(alone, beside, again):
        print(f"    {label:<52}{a:>10,.1f}{b:>11,.1f}{b / max(a, 1e-9):>7.2f}x")
    print(f"    (burst alone: {alone.burst_rate:,.0f} then {again.burst_rate:,.0f} rows/s;"
          f" removal paused {pause} s between batches of {WAVE:,})")  # fmt: skip
    for label, fig in (("alone", alone), ("+ removal", beside), ("alone again", again)):
        longest = max(fig.lock_waits, default=0.0)
        over = sum(1 for w in fig.lock_waits if w > LOCK_WAIT_LIMIT)
        print(f"    lock waits ({label}): {len(fig.lock_waits)} seen, longest"
              f" {longest * 1000:.0f} ms, over 100 ms: {over}")  # fmt: skip
    print(f"    removal: {removed:,} rows and {int(result.get('attempts', 0)):,} attempts in"
          f" {seconds:.1f} s = {removed / max(seconds, 1e-9):,.0f} rows/s"
          f" ({int(result.get('parts', 0)):,} archive parts; the burst took"
          f" {beside.burst_seconds:.1f} s of it)")  # fmt: skip


def steady_state(conn: Connection, workspace: UUID, removal: int, pause: float,
                 archive: str) -> None:  # fmt: skip
    """Cycles of a retention's worth of new history in, the retention's run and autovacuum's
    pass: the sizes stop growing once the space removal frees is used again."""
    settings = Settings(database_url="postgresql://unused", retention_days=30,
                        retention_batch_size=WAVE, retention_budget_seconds=3600,
                        retention_pause_seconds=pause)  # fmt: skip
    for table in TABLES:
        conn.execute(sql.SQL("vacuum analyze {}").format(sql.Identifier(table)))
    print_sizes("after vacuum", sizes(conn))
    for cycle in range(1, CYCLES + 1):
        add_old(conn, workspace, removal)
        now = conn.execute("select now()").fetchone()
        assert now is not None
        started = time.perf_counter()
        done = run_retention(conn, settings, FolderArchiveStore(Path(archive)), now=now[0])
        seconds = time.perf_counter() - started
        for table in TABLES:
            conn.execute(sql.SQL("vacuum analyze {}").format(sql.Identifier(table)))
        print_sizes(f"cycle {cycle}: +{removal:,}, -{done.removed:,}"
                    f" ({done.removed / seconds:,.0f}/s), vacuum", sizes(conn))  # fmt: skip


def run(
    admin_url: str,
    removal: int,
    pause: float | None = None,
    *,
    rounds: int = 1,
    budget: int | None = None,
    steady: int | None = None,
    finish_after: bool = True,
) -> int:
    """The scenario; `pause` between batches (None: the setting's default). With `budget`
    (seconds), each of `rounds` alternating rounds (alone, then with a removal that stops at
    its budget) measures beside the same table; the old rows the rounds leave are then
    removed to the end (unless not `finish_after`: then neither that nor the steady state
    runs). The steady state adds and removes `steady` rows a cycle (None: as many as
    `removal`)."""
    if rounds > 1 and budget is None:
        raise ValueError("more than one round needs a budget: the first would remove all")
    if pause is None:
        pause = Settings().retention_pause_seconds
    name = sql.Identifier(DATABASE)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("drop database if exists {} with (force)").format(name))
        admin.execute(sql.SQL("create database {}").format(name))
    url = with_database(admin_url, DATABASE)
    migrate.migrate(url)
    with connect(url) as conn:
        started = time.monotonic()
        workspace = build(conn, removal)
        print(f"\nremoval scenario: {removal:,} finished rows (+ an attempt each) 31-60 days"
              f" old, {FUTURE:,} future rows; retention 30 days; burst {BURST:,} rows in waves"
              f" of {WAVE:,} (built in {time.monotonic() - started:.0f} s)",
              flush=True)  # fmt: skip
        before = sizes(conn)
    archive = tempfile.mkdtemp(prefix="tickwork-bench-archive-")
    context = multiprocessing.get_context("spawn")
    manager = context.Manager()
    alone = [workload(url, workspace, None)]
    beside: list[Figures] = []
    results: list[dict[str, Any]] = []
    for _ in range(rounds):
        result = manager.dict()
        began = manager.Event()
        process = context.Process(
            target=remove, args=(url, archive, pause, budget or 3600 * 24, result, began)
        )

        def start_removal(process: Any = process, began: Any = began) -> None:
            process.start()
            began.wait(60)
            time.sleep(0.5)  # into its batches

        beside.append(workload(url, workspace, start_removal))
        process.join()
        results.append(dict(result))
        # alone once more: the table's drift is on both sides of each round
        alone.append(workload(url, workspace, None))
    manager.shutdown()
    for n, (removed, figures) in enumerate(zip(results, beside, strict=True)):
        if rounds > 1:
            print(f"  round {n + 1} of {rounds} (the removal's budget {budget} s):")
        report(alone[n], figures, alone[n + 1], removed, pause)
    if rounds > 1:
        summarize(alone, beside, results)
    print_sizes("sizes before", before)
    with connect(url) as conn:
        print_sizes("after the rounds" if budget else "after the removal", sizes(conn))
        if budget is not None and not finish_after:
            print("    (the old rows the rounds left stay: no removal to the end, no steady"
                  " state)")  # fmt: skip
        else:
            if budget is not None:
                finish(conn, archive, pause)
            steady_state(conn, workspace, steady or removal, pause, archive)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("drop database if exists {} with (force)").format(name))
    return 0


def summarize(alone: list[Figures], beside: list[Figures], results: list[dict[str, Any]]) -> None:
    """Each figure's ratio per round, and their median; the removal's rate per round."""
    print("  over the rounds (ratio: with the removal / alone before and after):")
    per_round = [ratios(alone[n], b, alone[n + 1]) for n, b in enumerate(beside)]
    for i, (label, _, _) in enumerate(per_round[0]):
        values = [r[i][2] / max(r[i][1], 1e-9) for r in per_round]
        shown = ", ".join(f"{v:.2f}x" for v in values)
        print(f"    {label:<30} {shown}  median {statistics.median(values):.2f}x")
    rates = [r.get("removed", 0) / max(r.get("seconds", 0.0), 1e-9) for r in results]
    print(f"    removal rate (rows/s): {', '.join(f'{r:,.0f}' for r in rates)}"
          f"  median {statistics.median(rates):,.0f}")  # fmt: skip


def finish(conn: Connection, archive: str, pause: float) -> None:
    """The old rows the rounds left, removed to the end by the retention alone."""
    settings = Settings(database_url="postgresql://unused", retention_days=30,
                        retention_batch_size=WAVE, retention_budget_seconds=3600 * 24,
                        retention_pause_seconds=pause)  # fmt: skip
    now = conn.execute("select now()").fetchone()
    assert now is not None
    started = time.perf_counter()
    done = run_retention(conn, settings, FolderArchiveStore(Path(archive)), now=now[0])
    seconds = time.perf_counter() - started
    print(f"    the rest: {done.removed:,} rows removed alone in {seconds:,.0f} s ="
          f" {done.removed / max(seconds, 1e-9):,.0f} rows/s", flush=True)  # fmt: skip
    print_sizes("after all the old rows left", sizes(conn))
