"""What each statement of the hot path costs per action: the tick's pass, the claim and the
finalize, each run alone over a burst of rows, one connection, in the batch sizes the engine
uses (the burst of `make bench`, section (f)).

Per action and per statement: the Postgres backend's CPU time, the row versions it wrote
(inserts and updates, of every table), how many of its updates were HOT (written beside the
old version, no index entry), the index entries it wrote, the rows it deleted, and its WAL
bytes. The counts come from the WAL itself (pg_walinspect, a contrib extension of Postgres
15 and newer, which needs a superuser or pg_read_server_files): exact, whichever tables the
statement's triggers and common table expressions write. Without it, only CPU and WAL bytes
are shown.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import psycopg

from tickwork.actions import store as actions
from tickwork.actions.model import published
from tickwork.platform.db import Connection, connect
from tickwork.platform.queues import enqueue
from tickwork.platform.wallclock import utcnow
from tools.proc import cpu_seconds

# WAL record kinds (pg_walinspect's resource_manager/record_type) by what they write. A
# posting-list insert adds an entry to a deduplicated btree tuple.
_INDEX_ENTRY_RECORDS = ("Btree/INSERT_LEAF", "Btree/INSERT_POST", "Gin/INSERT", "Hash/INSERT")


@dataclass
class Cost:
    """One statement's work over `rows` actions."""

    statement: str
    rows: int
    cpu_seconds: float | None = None
    wall_seconds: float = 0.0
    wal_bytes: int = 0
    records: dict[str, int] = field(default_factory=dict)  # WAL record kind -> count
    counted: bool = False  # records came from pg_walinspect

    def count(self, *prefixes: str) -> int:
        return sum(n for kind, n in self.records.items() if kind.startswith(prefixes))

    @property
    def inserts(self) -> int:
        return self.count("Heap/INSERT")

    @property
    def updates(self) -> int:
        return self.count("Heap/UPDATE")

    @property
    def hot_updates(self) -> int:
        return self.count("Heap/HOT_UPDATE")

    @property
    def deletes(self) -> int:
        return self.count("Heap/DELETE")

    @property
    def index_entries(self) -> int:
        return self.count(*_INDEX_ENTRY_RECORDS)

    def per_row(self, value: float) -> float:
        return value / max(self.rows, 1)


def _backend_cpu(conn: Connection) -> float | None:
    """CPU seconds the connection's backend has used, when the server runs on this machine."""
    row = conn.execute("select pg_backend_pid()").fetchone()
    assert row is not None
    return cpu_seconds(row[0])


def _lsn(conn: Connection) -> str:
    row = conn.execute("select pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def _wal_bytes(conn: Connection, start: str, end: str) -> int:
    row = conn.execute("select pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (end, start)).fetchone()
    assert row is not None
    return int(row[0])


def _records(conn: Connection, start: str, end: str) -> dict[str, int] | None:
    """WAL records by kind between two positions; None without pg_walinspect."""
    if start == end:
        return {}
    try:
        with conn.transaction():
            rows = conn.execute(
                'select "resource_manager/record_type", count'
                " from pg_get_wal_stats(%s::pg_lsn, %s::pg_lsn, true) where count > 0",
                (start, end),
            ).fetchall()
    except psycopg.Error:
        return None
    return {str(kind): int(n) for kind, n in rows}


def measured(conn: Connection, statement: str, rows: int, work: Callable[[], None]) -> Cost:
    """`work`'s cost, run on `conn` (autocommit: each statement its own transaction)."""
    cpu_before, start, started = _backend_cpu(conn), _lsn(conn), time.perf_counter()
    work()
    wall = time.perf_counter() - started
    cpu_after, end = _backend_cpu(conn), _lsn(conn)
    cost = Cost(statement, rows, wall_seconds=wall, wal_bytes=_wal_bytes(conn, start, end))
    if cpu_before is not None and cpu_after is not None:
        cost.cpu_seconds = cpu_after - cpu_before
    records = _records(conn, start, end)
    if records is not None:
        cost.records, cost.counted = records, True
    return cost


def tick_pass_rows(
    conn: Connection, horizon: datetime, batch: int, action_type: str = "log"
) -> list[enqueue.DueRow]:
    """One tick pass of `action_type` that sends nothing: the rows it takes, the watermark
    moved past them (the tools' stand-in for the tick, whose sends they do not measure)."""
    with enqueue.marking(conn):
        taken = enqueue.take_due(conn, action_type, horizon, batch)
        if not taken or not taken.rows:
            return []
        enqueue.finish_pass(conn, taken, set())
    return taken.rows


def run(url: str, workspace: object, count: int, batch: int, tick_batch: int) -> list[Cost]:
    """`count` rows of the `log` type due now (inserted by the caller's workspace), taken by
    the tick's passes, claimed and finalized published, each stage alone in its batches."""
    with connect(url) as setup:
        setup.execute("create extension if not exists pg_walinspect")
    with connect(url) as conn:
        conn.autocommit = True
        taken: list[enqueue.DueRow] = []

        def tick() -> None:
            while rows := tick_pass_rows(conn, utcnow() + timedelta(seconds=60), tick_batch):
                taken.extend(rows)

        def claim() -> None:
            for i in range(0, len(taken), batch):
                actions.claim(conn, "log", [r.id for r in taken[i : i + batch]],
                              early_tolerance=1.0)  # fmt: skip

        def finalize() -> None:
            for i in range(0, len(taken), batch):
                wave = taken[i : i + batch]
                # As the log provider answers: a provider id per row.
                actions.finalize(conn, [published(r.id, f"log-{r.id}") for r in wave])

        costs = [measured(conn, "tick pass", count, tick)]
        assert len(taken) == count, f"the tick took {len(taken)} of {count} rows"
        costs.append(measured(conn, "claim", count, claim))
        costs.append(measured(conn, "finalize", count, finalize))
    return costs


def report(costs: list[Cost]) -> None:
    total = Cost("all three", costs[0].rows if costs else 0)
    for cost in costs:
        total.wall_seconds += cost.wall_seconds
        total.wal_bytes += cost.wal_bytes
        total.counted = cost.counted
        if cost.cpu_seconds is not None:
            total.cpu_seconds = (total.cpu_seconds or 0.0) + cost.cpu_seconds
        for kind, n in cost.records.items():
            total.records[kind] = total.records.get(kind, 0) + n
    print("    per action   Postgres CPU  row versions  HOT updates  index entries  rows deleted"
          "  WAL bytes")  # fmt: skip
    for cost in [*costs, total]:
        cpu = (
            "n/a" if cost.cpu_seconds is None
            else f"{cost.per_row(cost.cpu_seconds) * 1e6:.1f} µs"
        )  # fmt: skip
        if cost.counted:
            versions = cost.per_row(cost.inserts + cost.updates + cost.hot_updates)
            changed = cost.updates + cost.hot_updates
            hot = f"{cost.hot_updates / changed:.0%}" if changed else "-"
            counts = (f"{versions:12.2f}  {hot:>11}  {cost.per_row(cost.index_entries):13.2f}"
                      f"  {cost.per_row(cost.deletes):12.2f}")  # fmt: skip
        else:
            counts = f"{'n/a':>12}  {'n/a':>11}  {'n/a':>13}  {'n/a':>12}"
        print(f"    {cost.statement:<11} {cpu:>13}  {counts}  {cost.per_row(cost.wal_bytes):9,.0f}")
    if costs and not costs[0].counted:
        print("    (row versions, HOT and index entries need pg_walinspect and a superuser)")
