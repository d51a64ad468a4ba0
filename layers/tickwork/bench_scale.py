"""`make bench-scale`: is the cost of the hot statements flat in the backlog?

The same operations are timed on a small table (10k future rows) and on a large one
(`--future` future rows, 1M by default, plus `--terminal` finished rows of history): the
tick's due query (mark a batch due), the claim and the finalize of a wave, a calendar page,
and `/v1/stats`. Each is run inside a transaction that is rolled back, several times; the
median is printed with its ratio large / small (the target: within 2x).

DATABASE_URL selects a server (a `tickwork_bench_scale` database is created on it);
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

from tickwork import actions, calendar, migrate, tick
from tickwork.db import Connection, connect
from tickwork.local.embedded import EmbeddedPostgres, with_database
from tickwork.wallclock import utcnow

DATABASE = "tickwork_bench_scale"
DUE_ROWS = 2000  # due now in both sizes: what the tick and the dispatcher work on
WAVE = 1000  # rows per claim and finalize, as in `make bench`
SMALL_FUTURE = 10_000


def build(conn: Connection, future: int, terminal: int) -> Any:
    """A workspace with DUE_ROWS due now, `future` rows spread over the next 30 days and
    `terminal` published rows over the last 30 days."""
    conn.execute("truncate scheduled_actions, workspaces cascade")
    row = conn.execute("insert into workspaces (name) values ('scale') returning id").fetchone()
    assert row is not None
    workspace = row[0]
    params = {"ws": workspace, "due": DUE_ROWS, "future": future, "terminal": terminal}
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %(ws)s, 'log', 'd' || g, now() - interval '1 second'"
        " from generate_series(1, %(due)s) g",
        params,
    )
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %(ws)s, 'log', 'f' || g,"
        "        now() + interval '2 minutes' + g * interval '30 days' / %(future)s"
        " from generate_series(1, %(future)s) g",
        params,
    )
    if terminal:
        conn.execute(
            "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
            " status, submitted_at, finished_at, attempt_count, provider_id)"
            " select %(ws)s, 'log', 'p' || g, now() - g * interval '30 days' / %(terminal)s,"
            "        'published', now() - g * interval '30 days' / %(terminal)s,"
            "        now() - g * interval '30 days' / %(terminal)s, 1, 'log-' || g"
            " from generate_series(1, %(terminal)s) g",
            params,
        )
    conn.execute("vacuum analyze scheduled_actions")
    return workspace


def timed(conn: Connection, operation: Callable[[Connection], object], repeat: int) -> float:
    """Median seconds of `operation`, each run in a transaction rolled back."""
    samples = []
    for _ in range(repeat):
        conn.execute("begin")
        started = time.perf_counter()
        operation(conn)
        samples.append(time.perf_counter() - started)
        conn.execute("rollback")
    return statistics.median(samples)


def measure(conn: Connection, workspace: Any, repeat: int) -> dict[str, float]:
    due_ids = [
        row[0]
        for row in conn.execute(
            "select id from scheduled_actions where status = 'queued'"
            " and publish_at <= now() order by publish_at, id limit %s",
            (WAVE,),
        ).fetchall()
    ]
    now = utcnow()

    def mark(c: Connection) -> object:
        return tick.mark_due(c, now + timedelta(seconds=60), DUE_ROWS, ["log"])

    def claim(c: Connection) -> object:
        return actions.claim(c, "log", due_ids, early_tolerance=1.0)

    def claim_and_finalize(c: Connection) -> object:
        claimed = actions.claim(c, "log", due_ids, early_tolerance=1.0)
        return actions.finalize(c, [actions.published(a.id, f"log-{a.id}") for a in claimed])

    def page(c: Connection) -> object:
        start, end = calendar.default_range(None, None, utcnow())
        return calendar.list_actions(c, workspace, start, end, limit=100)

    def stats(c: Connection) -> object:
        return calendar.stats(c, workspace)

    claim_seconds = timed(conn, claim, repeat)
    return {
        "tick due query (mark 2,000)": timed(conn, mark, repeat),
        "claim (1,000)": claim_seconds,
        "finalize (1,000)": max(0.0, timed(conn, claim_and_finalize, repeat) - claim_seconds),
        "calendar page (100)": timed(conn, page, repeat),
        "/v1/stats": timed(conn, stats, repeat),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tickwork-bench-scale", description=__doc__)
    parser.add_argument("--future", type=int, default=1_000_000, help="future rows (large)")
    parser.add_argument("--terminal", type=int, default=100_000, help="finished rows (large)")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    admin_url = os.environ.get("DATABASE_URL")
    server = None
    if not admin_url:
        server = EmbeddedPostgres(Path(tempfile.mkdtemp()) / "pgdata", delete_on_exit=True)
        admin_url = server.url()
    name = sql.Identifier(DATABASE)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("drop database if exists {} with (force)").format(name))
        admin.execute(sql.SQL("create database {}").format(name))
    url = with_database(admin_url, DATABASE)
    migrate.migrate(url)
    results = {}
    with connect(url) as conn:
        for label, future, terminal in (
            ("small", SMALL_FUTURE, 0),
            ("large", args.future, args.terminal),
        ):
            started = time.monotonic()
            workspace = build(conn, future, terminal)
            print(f"{label}: {DUE_ROWS:,} due + {future:,} future + {terminal:,} terminal rows"
                  f" (built in {time.monotonic() - started:.0f} s)", flush=True)  # fmt: skip
            results[label] = measure(conn, workspace, args.repeat)
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"\nmedian of {args.repeat}, each in a rolled-back transaction; target large <= 2x"
          f" small; load average {load}")  # fmt: skip
    print(f"    {'operation':<30}{'small ms':>10}{'large ms':>10}{'ratio':>8}")
    for operation, small in results["small"].items():
        large = results["large"][operation]
        ratio = large / max(small, 1e-9)
        flag = "" if ratio <= 2 else "  over 2x"
        print(f"    {operation:<30}{small * 1000:>10.1f}{large * 1000:>10.1f}{ratio:>7.1f}x{flag}")
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("drop database if exists {} with (force)").format(name))
    if server is not None:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
