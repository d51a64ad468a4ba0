"""`make bench-scale`: is the cost of the hot statements flat in the backlog?

The same operations are timed on a small table (10k future rows) and on a large one
(`--future` future rows, 10M by default, plus `--terminal` finished rows of history, 1M):
the tick's pass (a batch due), the claim and the finalize of a wave, a calendar
page, `/v1/stats` and `tickwork status`, and for reference the scan `/v1/stats` made before
its rollup. Each is run inside a transaction that is rolled back, several times; the
median is printed with its ratio large / small (the target: within 2x). Last, one
run of the rollup after a wave finished.

The large table is loaded as a restore would (indexes and keys rebuilt after the rows):
about 4 minutes for 11M rows on a 2-core machine; `--future 1000000 --terminal 100000`
takes 20 s.

DATABASE_URL selects a server (`tickwork_bench_scale_small` and `_large` databases are
created on it);
otherwise an embedded Postgres in a temporary directory is used.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from tickwork import calendar, rollup
from tickwork.actions import model, store
from tickwork.cli import status as ops_status
from tickwork.local.embedded import EmbeddedPostgres, with_database
from tickwork.platform import migrate
from tickwork.platform.db import Connection, connect
from tickwork.platform.sql import query
from tickwork.platform.wallclock import utcnow
from tools import bench_removal
from tools.statement_costs import tick_pass_rows

DATABASE = "tickwork_bench_scale"
DUE_ROWS = 2000  # due now in both sizes: what the tick and the dispatcher work on
WAVE = 1000  # rows per claim and finalize, as in `make bench`
SMALL_FUTURE = 10_000
SLICE = 1_000_000


def _ddl(conn: Connection, query_text: str) -> list[str]:
    return [row[0] for row in conn.execute(query_text).fetchall()]


def build(conn: Connection, future: int, terminal: int) -> Any:
    """A workspace with DUE_ROWS due now, `future` rows spread over the next 30 days and
    `terminal` published rows over the last 30 days, then the rollup advanced over them.

    Loaded as a restore would: without the indexes and foreign keys (rebuilt after, in
    bulk) and, where the role may, without triggers (the rollup's row counts are then
    taken once, as migration 0015 does)."""
    conn.execute("truncate scheduled_actions, workspaces cascade")
    row = conn.execute("insert into workspaces (name) values ('scale') returning id").fetchone()
    assert row is not None
    workspace = row[0]
    indexes = _ddl(
        conn,
        "select indexdef from pg_indexes where schemaname = 'public'"
        " and tablename = 'scheduled_actions' and indexname <> 'scheduled_actions_pkey'",
    )
    # The primary key, and the foreign keys that hang on its indexes (on (workspace_id, id)
    # since migration 0037), as `alter table` statements: the key first, the foreign keys
    # after the indexes they need.
    constraint_ddl = (
        "select format('alter table %s add constraint %I %s', conrelid::regclass, conname,"
        "              pg_get_constraintdef(oid))"
        " from pg_constraint"
    )
    primary = _ddl(
        conn,
        constraint_ddl + " where conrelid = 'scheduled_actions'::regclass and contype = 'p'",
    )
    foreign = _ddl(
        conn, constraint_ddl + " where confrelid = 'scheduled_actions'::regclass order by conname"
    )
    for table, name in conn.execute(
        "select conrelid::regclass::text, conname from pg_constraint"
        " where confrelid = 'scheduled_actions'::regclass"
    ).fetchall():
        conn.execute(
            sql.SQL("alter table {} drop constraint {}").format(
                sql.Identifier(table), sql.Identifier(name)
            )
        )
    conn.execute("alter table scheduled_actions drop constraint scheduled_actions_pkey")
    for definition in indexes:
        name = definition.split(" INDEX ", 1)[1].split(" ON ", 1)[0]
        conn.execute(sql.SQL("drop index {}").format(sql.Identifier(name)))
    triggers_off = True
    try:
        conn.execute("set session_replication_role = replica")
    except psycopg.errors.InsufficientPrivilege:
        triggers_off = False
    params = {"ws": workspace, "due": DUE_ROWS, "future": future, "terminal": terminal}
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %(ws)s, 'log', 'd' || g, now() - interval '1 second'"
        " from generate_series(1, %(due)s) g",
        params,
    )
    # In slices, so no one statement holds millions of rows in memory (the rollup's insert
    # trigger keeps each statement's rows for itself when triggers run).
    for first in range(1, future + 1, SLICE):
        conn.execute(
            "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
            " select %(ws)s, 'log', 'f' || g,"
            "        now() + interval '2 minutes' + g * interval '30 days' / %(future)s"
            " from generate_series(%(first)s::int, %(last)s::int) g",
            params | {"first": first, "last": min(future, first + SLICE - 1)},
        )
    for first in range(1, terminal + 1, SLICE):
        conn.execute(
            "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
            " status, submitted_at, finished_at, attempt_count, provider_id)"
            " select %(ws)s, 'log', 'p' || g, now() - g * interval '30 days' / %(terminal)s,"
            "        'published', now() - g * interval '30 days' / %(terminal)s,"
            "        now() - g * interval '30 days' / %(terminal)s, 1, 'log-' || g"
            " from generate_series(%(first)s::int, %(last)s::int) g",
            params | {"first": first, "last": min(terminal, first + SLICE - 1)},
        )
    if triggers_off:
        conn.execute("reset session_replication_role")
    conn.execute("set maintenance_work_mem = '512MB'")
    for definition in primary + indexes + foreign:
        conn.execute(definition)  # the catalog's own text
    conn.execute("reset maintenance_work_mem")
    if triggers_off:
        # What the triggers keep, rebuilt from the rows as after a restore (migration 0039).
        conn.execute("select tickwork_rebuild_derived()")
    for table in ("scheduled_actions", "action_queue"):
        conn.execute(sql.SQL("vacuum analyze {}").format(sql.Identifier(table)))
    rollup.compact(conn)
    return workspace


Operation = Callable[[Connection, Any], object]
Setup = Callable[[Connection], Any]


def _none(conn: Connection) -> None:
    return None


def sample(conn: Connection, operation: Operation, setup: Setup) -> float:
    """Seconds of one `operation` (given what `setup` returned, untimed), in a transaction
    rolled back."""
    conn.execute("begin")
    try:
        prepared = setup(conn)
        started = time.perf_counter()
        operation(conn, prepared)
        return time.perf_counter() - started
    finally:
        conn.execute("rollback")


# A table of one small closure per timed statement: its branches are theirs, not its own.
def operations(conn: Connection, workspace: Any) -> dict[str, tuple[Operation, Setup, bool]]:
    """What is timed, by label: (operation, setup, whether it is a slow reference)."""
    due_ids = due_wave(conn)
    now = utcnow()

    def mark(c: Connection, _: Any) -> object:
        return tick_pass_rows(c, now + timedelta(seconds=60), DUE_ROWS)

    def claim(c: Connection, _: Any) -> object:
        return store.claim(c, "log", due_ids, early_tolerance=1.0)

    def claimed(c: Connection) -> object:
        return store.claim(c, "log", due_ids, early_tolerance=1.0)

    def finalize(c: Connection, rows: Any) -> object:
        return store.finalize(c, [model.published(a.id, f"log-{a.id}") for a in rows])

    def page(c: Connection, _: Any) -> object:
        start, end = calendar.default_range(None, None, utcnow())
        return calendar.list_actions(c, workspace, start, end, limit=100)

    def stats(c: Connection, _: Any) -> object:
        return calendar.stats(c, workspace)

    def part(name: str) -> Callable[[Connection, Any], object]:
        statement = query(name)

        def run(c: Connection, _: Any) -> object:
            c.execute(calendar.SMALL_READS)
            return c.execute(statement, {"workspace_id": workspace}).fetchall()

        return run

    def counts(c: Connection, _: Any) -> object:
        c.execute(calendar.SMALL_READS)  # as /v1/stats and `tickwork status` read them
        return rollup.counts(c, workspace)

    def scanned_stats(c: Connection, _: Any) -> object:
        # What /v1/stats counted before the rollup (migration 0015): every row.
        return c.execute(
            "select status, action_type, count(*) from scheduled_actions"
            " where workspace_id = %s group by status, action_type",
            (workspace,),
        ).fetchall()

    def status(c: Connection, _: Any) -> object:
        return ops_status.gather(
            c, now=utcnow(), workspace_id=None, window_seconds=3600,
            stuck_timeout_seconds=900, dispatch_enabled=True, paused_action_types=[],
            switches_from="bench",
        )  # fmt: skip

    # Reads first: the writes, rolled back, leave dead row versions behind (as real ones do
    # until vacuum) in the window the lag reads.
    return {
        "calendar page (100)": (page, _none, False),
        "/v1/stats": (stats, _none, False),
        "  its counts (the rollup)": (counts, _none, False),
        "  its due backlog": (part("stats_backlog"), _none, False),
        "  its lag (rows due in 1 h)": (part("stats_lag"), _none, False),
        "`tickwork status`": (status, _none, False),
        "(/v1/stats before: a scan)": (scanned_stats, _none, True),
        "tick pass (2,000)": (mark, _none, False),
        "claim (1,000)": (claim, _none, False),
        "finalize (1,000)": (finalize, claimed, False),
    }


def claim_io(conn: Connection, due_ids: list[Any]) -> str:
    """Where a claim's time goes: pages touched and WAL written (EXPLAIN ANALYZE, rolled
    back)."""
    conn.execute("begin")
    try:
        with psycopg.ClientCursor(conn) as cur:
            cur.execute(
                "explain (analyze, buffers, wal, format json) " + query("claim_actions"),
                {"ids": store.uuid_array(due_ids), "action_type": "log",
                 "early_tolerance": 1.0, "max_lateness": None, "reclaim_after": None,
                 "route_provider": None},
            )  # fmt: skip
            row = cur.fetchone()
    finally:
        conn.execute("rollback")
    assert row is not None
    plan = row[0][0]["Plan"]
    return (
        f"buffers hit {plan['Shared Hit Blocks']:,}, read {plan['Shared Read Blocks']:,},"
        f" dirtied {plan['Shared Dirtied Blocks']:,}; WAL {plan['WAL Records']:,} records,"
        f" {plan['WAL FPI']:,} full pages, {plan['WAL Bytes'] / 1e6:.1f} MB"
    )


def due_wave(conn: Connection) -> list[Any]:
    return [
        row[0]
        for row in conn.execute(
            "select id from scheduled_actions where status = 'queued'"
            " and publish_at <= now() order by publish_at, id limit %s",
            (WAVE,),
        ).fetchall()
    ]


def advanced(conn: Connection, due_ids: list[Any]) -> float:
    """One run of the rollup after a wave finished (committed: measured last)."""
    claimed = store.claim(conn, "log", due_ids, early_tolerance=1.0)
    store.finalize(conn, [model.published(a.id, f"log-{a.id}") for a in claimed])
    started = time.perf_counter()
    rollup.compact(conn)
    return time.perf_counter() - started


def measure(
    conns: dict[str, Connection], workspaces: dict[str, Any], repeat: int
) -> dict[str, dict[str, float]]:
    """Median seconds by size and operation. Small and large alternate, sample by sample,
    so the machine's noise falls on both."""
    plans = {label: operations(conn, workspaces[label]) for label, conn in conns.items()}
    results: dict[str, dict[str, float]] = {label: {} for label in conns}
    for operation, (_, _, slow) in next(iter(plans.values())).items():
        samples: dict[str, list[float]] = {label: [] for label in conns}
        for _ in range(min(repeat, 3) if slow else repeat):
            for label, taken in samples.items():
                run, setup, _ = plans[label][operation]
                taken.append(sample(conns[label], run, setup))
        for label, taken in samples.items():
            results[label][operation] = statistics.median(taken)
    return results


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tickwork-bench-scale", description=__doc__)
    parser.add_argument("--future", type=int, default=10_000_000, help="future rows (large)")
    parser.add_argument("--terminal", type=int, default=1_000_000, help="finished rows (large)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--removal", type=int, default=0,
        help="then the removal scenario with this many old finished rows (0: none;"
        " the issue's full size is 10000000)",
    )  # fmt: skip
    parser.add_argument("--removal-only", action="store_true", help="only the removal scenario")
    parser.add_argument(
        "--removal-rounds", type=int, default=1,
        help="alternating rounds (alone, then beside a removal stopped at --removal-budget)",
    )  # fmt: skip
    parser.add_argument(
        "--removal-budget", type=int, default=None,
        help="seconds each round's removal runs (needed for more than one round)",
    )  # fmt: skip
    parser.add_argument(
        "--removal-steady", type=int, default=None,
        help="old rows added and removed per steady-state cycle (default: --removal)",
    )  # fmt: skip
    parser.add_argument(
        "--removal-no-finish", action="store_true",
        help="after budgeted rounds, leave the rest (no removal to the end, no steady state)",
    )  # fmt: skip
    parser.add_argument(
        "--keep", action="store_true", help=f"leave the {DATABASE}_* databases for a look"
    )
    args = parser.parse_args(argv)
    load_before = _load()
    admin_url = os.environ.get("DATABASE_URL")
    server = None
    where = "the server in DATABASE_URL"
    if not admin_url:
        where = "an embedded Postgres"
        server = EmbeddedPostgres(Path(tempfile.mkdtemp()) / "pgdata", delete_on_exit=True)
        admin_url = server.url()
    if not args.removal_only:
        hot_statements(admin_url, args, where, load_before)
    if args.removal:
        bench_removal.run(
            admin_url, args.removal, rounds=args.removal_rounds, budget=args.removal_budget,
            steady=args.removal_steady, finish_after=not args.removal_no_finish,
        )  # fmt: skip
    if server is not None:
        server.stop()
    return 0


def hot_statements(admin_url: str, args: argparse.Namespace, where: str, load_before: str) -> None:
    """The hot statements on a small and a large table, each with its ratio."""
    sizes = (("small", SMALL_FUTURE, 0), ("large", args.future, args.terminal))
    urls = {}
    with psycopg.connect(admin_url, autocommit=True) as admin:
        for label, _, _ in sizes:
            name = sql.Identifier(f"{DATABASE}_{label}")
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(name))
            admin.execute(sql.SQL("create database {}").format(name))
            urls[label] = with_database(admin_url, f"{DATABASE}_{label}")
    conns = {label: connect(url) for label, url in urls.items()}
    workspaces = {}
    for label, future, terminal in sizes:
        migrate.migrate(urls[label])
        started = time.monotonic()
        workspaces[label] = build(conns[label], future, terminal)
        print(f"{label}: {DUE_ROWS:,} due + {future:,} future + {terminal:,} terminal rows"
              f" (built in {time.monotonic() - started:.0f} s)", flush=True)  # fmt: skip
    load_measured = _load()
    results = measure(conns, workspaces, args.repeat)
    io = {label: claim_io(conn, due_wave(conn)) for label, conn in conns.items()}
    for label, conn in conns.items():
        results[label]["rollup (1,000 finished)"] = advanced(conn, due_wave(conn))
    version = conns["large"].execute("show server_version").fetchone()
    print(f"\nmedian of {args.repeat} (the scan: of 3), small and large alternating, each in a"
          f" rolled-back transaction; target large <= 2x small; on {where}"
          f" (PostgreSQL {version[0] if version else '?'}); load average before"
          f" {load_before}, when measuring {load_measured}, after {_load()}")  # fmt: skip
    print(f"    {'operation':<38}{'small ms':>10}{'large ms':>10}{'ratio':>8}")
    for operation, small in results["small"].items():
        large = results["large"][operation]
        ratio = large / max(small, 1e-9)
        flag = "" if ratio <= 2 else "  over 2x"
        print(f"    {operation:<38}{small * 1000:>10.1f}{large * 1000:>10.1f}{ratio:>7.1f}x{flag}")
    for label, text in io.items():
        print(f"    claim (1,000), {label}: {text}")
    for conn in conns.values():
        conn.close()
    if not args.keep:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            for label in urls:
                name = sql.Identifier(f"{DATABASE}_{label}")
                admin.execute(sql.SQL("drop database if exists {} with (force)").format(name))


if __name__ == "__main__":
    raise SystemExit(main())
