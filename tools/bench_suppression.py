"""The claim's cost with and without suppression: a wave of email rows claimed by main's
statement (`claim_actions`, what every type without an address channel runs) and by the
suppression-checking one (`claim_addressed_actions`), in turns, each claim rolled back so
every turn claims the same rows. Three lists: empty, `--entries` other addresses, and the
same with one row in ten suppressed (cancelled by the claim). Prints the median of each.

    .venv/bin/python -m tools.bench_suppression [--rows 1000] [--entries 100000] [--named]

against DATABASE_URL (a database it may fill: it empties the tables it uses first)."""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from psycopg.types.json import Jsonb

from tickwork.actions import store
from tickwork.platform.db import Connection, connect
from tickwork.platform.migrate import migrate

STATEMENTS = {"claim_actions": None, "claim_addressed_actions": "email"}


def _payload(n: int, named: bool) -> dict[str, Any]:
    to = f"User {n} <user{n}@example.com>" if named else f"user{n}@example.com"
    return {"to": to, "subject": "s", "text": "t"}


def _setup(conn: Connection, rows: int, named: bool) -> tuple[Any, list[Any]]:
    conn.execute("truncate scheduled_actions, suppressions, workspaces cascade")
    [(workspace,)] = conn.execute(
        "insert into workspaces (name) values ('Bench') returning id"
    ).fetchall()
    ids = [
        conn.execute(
            "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
            " payload) values (%s, 'email', %s, now() - interval '1 second', %s) returning id",
            (workspace, f"t{n}", Jsonb(_payload(n, named))),
        ).fetchone()[0]  # type: ignore[index]
        for n in range(rows)
    ]
    conn.execute("analyze scheduled_actions")
    return workspace, ids


def _time(conn: Connection, ids: list[Any], channel: str | None) -> tuple[float, int]:
    with conn.transaction(force_rollback=True):
        start = time.perf_counter()
        claimed = store.claim(conn, "email", ids, early_tolerance=1.0, channel=channel)
        return (time.perf_counter() - start) * 1000, len(claimed)


def measure(conn: Connection, ids: list[Any], turns: int) -> dict[str, tuple[float, int]]:
    """Median milliseconds per claim of `ids`, and rows claimed, per statement."""
    samples: dict[str, list[float]] = {name: [] for name in STATEMENTS}
    claimed: dict[str, int] = {}
    for turn in range(turns + 1):
        for name, channel in STATEMENTS.items():
            ms, claimed[name] = _time(conn, ids, channel)
            if turn:  # the first turn warms caches
                samples[name].append(ms)
    return {name: (statistics.median(v), claimed[name]) for name, v in samples.items()}


def run(url: str, rows: int, entries: int, turns: int, named: bool) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with connect(url) as conn:
        conn.autocommit = True
        workspace, ids = _setup(conn, rows, named)
        results["empty list"] = measure(conn, ids, turns)
        conn.execute(
            "insert into suppressions (workspace_id, channel, address, reason, source)"
            " select %s, 'email', 'other' || g || '@example.com', 'manual', 'bench'"
            " from generate_series(1, %s) g",
            (workspace, entries),
        )
        conn.execute("analyze suppressions")
        results[f"{entries} entries, none of these rows"] = measure(conn, ids, turns)
        conn.execute(
            "insert into suppressions (workspace_id, channel, address, reason, source)"
            " select %s, 'email', 'user' || g || '@example.com', 'manual', 'bench'"
            " from generate_series(0, %s - 1, 10) g",
            (workspace, rows),
        )
        conn.execute("analyze suppressions")
        results[f"{entries} entries, one row in ten suppressed"] = measure(conn, ids, turns)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1000, help="rows in the claimed wave")
    parser.add_argument("--entries", type=int, default=100_000, help="other list entries")
    parser.add_argument("--turns", type=int, default=30, help="claims per statement")
    parser.add_argument("--named", action="store_true", help="'Name <addr>' recipients")
    args = parser.parse_args()
    url = os.environ["DATABASE_URL"]
    migrate(url)
    print(f"a claim of {args.rows} email rows ({'named' if args.named else 'plain'} `to`),"
          f" median of {args.turns}:")  # fmt: skip
    for case, by_statement in run(url, args.rows, args.entries, args.turns, args.named).items():
        base = by_statement["claim_actions"][0]
        print(f"  {case}:")
        for name, (ms, claimed) in by_statement.items():
            extra = f" ({(ms / base - 1) * 100:+.0f} %)" if name != "claim_actions" else ""
            print(f"    {name:<24} {ms:7.1f} ms{extra}, {claimed} claimed")


if __name__ == "__main__":
    main()
