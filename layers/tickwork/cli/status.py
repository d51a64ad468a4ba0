"""`tickwork status`: what is happening, from the database and the queues."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from psycopg.rows import dict_row

from tickwork import rollup
from tickwork.calendar import SMALL_READS
from tickwork.cli.queues import Depth
from tickwork.engine import circuits
from tickwork.platform.config import MAX_CLOCK_SKEW_TOLERANCE_SECONDS
from tickwork.platform.db import Connection
from tickwork.platform.sql import query
from tickwork.platform.text import duration, relative, stamp

_DUE = query("status_due")
# Due rows counted per state before the count stops (and shows as a lower bound, "N+").
DUE_CAP = 10_000
_NEXT_DUE = query("status_next_due")
_LAG = query("status_lag")
_ATTENTION = query("status_attention")


@dataclass
class Status:
    generated_at: datetime
    window_seconds: int
    workspace_id: UUID | None
    dispatch_enabled: bool
    paused_action_types: list[str]
    switches_from: str
    backlog: list[dict[str, Any]]
    lag_ms: dict[str, Any]
    outcomes: list[dict[str, Any]]
    attention: dict[str, int]
    queues: dict[str, Depth] | None = None
    queues_from: str | None = None
    notes: list[str] = field(default_factory=list)
    # The running `tickwork dev`: pid, where its API, receiver and sandbox listen, data dir.
    dev: dict[str, Any] | None = None
    # Provider circuits not closed (docs/failover.md): provider, connection, state, since.
    circuits: list[dict[str, Any]] = field(default_factory=list)

    @property
    def next_due(self) -> datetime | None:
        times = [row["next_due"] for row in self.backlog if row["next_due"] is not None]
        return min(times) if times else None

    @property
    def oldest_due_age_seconds(self) -> float | None:
        ages = [row["oldest_due_age_seconds"] for row in self.backlog]
        known = [age for age in ages if age is not None]
        return max(known) if known else None

    def as_json(self) -> dict[str, Any]:
        def iso(value: datetime | None) -> str | None:
            return value.isoformat() if value is not None else None

        return {
            "generated_at": iso(self.generated_at),
            "window_seconds": self.window_seconds,
            "workspace_id": str(self.workspace_id) if self.workspace_id else None,
            "dispatch": {
                "enabled": self.dispatch_enabled,
                "paused_action_types": self.paused_action_types,
                "from": self.switches_from,
            },
            "backlog": [{**row, "next_due": iso(row["next_due"])} for row in self.backlog],
            "next_due": iso(self.next_due),
            "oldest_due_age_seconds": self.oldest_due_age_seconds,
            "lag_ms": self.lag_ms,
            "outcomes": self.outcomes,
            "attention": self.attention,
            "queues": (
                {name: depth.as_dict() for name, depth in self.queues.items()}
                if self.queues is not None
                else None
            ),
            "queues_from": self.queues_from,
            "dev": self.dev,
            "circuits": [
                {
                    **c,
                    "connection_id": str(c["connection_id"]) if c["connection_id"] else None,
                    "opened_at": iso(c["opened_at"]),
                    "probe_taken_at": iso(c["probe_taken_at"]),
                }
                for c in self.circuits
            ],
            "notes": self.notes,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 1)


def gather(
    conn: Connection,
    *,
    now: datetime,
    workspace_id: UUID | None,
    window_seconds: int,
    stuck_timeout_seconds: int,
    dispatch_enabled: bool,
    paused_action_types: list[str],
    switches_from: str,
) -> Status:
    params = {
        "workspace_id": workspace_id,
        "window_seconds": window_seconds,
        "stuck_timeout_seconds": stuck_timeout_seconds,
        "due_cap": DUE_CAP,
        "due_within": MAX_CLOCK_SKEW_TOLERANCE_SECONDS,
    }
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        conn.execute(SMALL_READS)  # as /v1/stats: what it reads is small, whatever the plan says
        # How many are queued from the rollup; what is due and next from the due indexes:
        # neither reads the rows queued for later, however many.
        queued = {
            c["action_type"]: c["count"]
            for c in rollup.counts(conn, workspace_id)
            if c["status"] == "queued"
        }
        due = {row["action_type"]: row for row in cur.execute(_DUE, params).fetchall()}
        types = sorted(queued)
        next_due = {
            row["action_type"]: row["next_due"]
            for row in cur.execute(_NEXT_DUE, params | {"action_types": types}).fetchall()
        }
        backlog = [
            {
                "action_type": name,
                "queued": queued[name],
                "due": due[name]["due"] if name in due else 0,
                # More than DUE_CAP rows were due: `due` is a lower bound.
                "due_capped": bool(due[name]["capped"]) if name in due else False,
                "oldest_due_age_seconds": (
                    _round(due[name]["oldest_due_age_seconds"]) if name in due else None
                ),
                "next_due": next_due.get(name),
            }
            for name in types
        ]
        lag_rows = cur.execute(_LAG, params).fetchall()
        outcomes = [
            {"action_type": row["action_type"], "status": row["status"],
             "error_code": row["error_code"] or None, "count": row["count"]}
            for row in rollup.finished_between(
                conn, workspace_id, now - timedelta(seconds=window_seconds), now
            )
            if row["status"] in ("published", "failed")
        ]  # fmt: skip
        attention = rollup.needs_person(conn, workspace_id) | dict(
            cur.execute(_ATTENTION, params).fetchone() or {}
        )
        open_circuits = circuits.status(conn)
    overall = next((r for r in lag_rows if r["action_type"] is None), None)
    lag_ms: dict[str, Any] = {
        "sample": overall["sample"] if overall else 0,
        "p50": _round(overall["p50"]) if overall else None,
        "p99": _round(overall["p99"]) if overall else None,
        "by_action_type": {
            r["action_type"]: {"sample": r["sample"], "p50": _round(r["p50"]),
                               "p99": _round(r["p99"])}
            for r in lag_rows if r["action_type"] is not None
        },
    }  # fmt: skip
    return Status(
        generated_at=now,
        window_seconds=window_seconds,
        workspace_id=workspace_id,
        dispatch_enabled=dispatch_enabled,
        paused_action_types=sorted(paused_action_types),
        switches_from=switches_from,
        backlog=backlog,
        lag_ms=lag_ms,
        outcomes=outcomes,
        attention={key: int(value) for key, value in dict(attention).items()},
        circuits=open_circuits,
    )


def _dev_line(dev: dict[str, Any] | None) -> list[str]:
    """Where the running `tickwork dev` listens, if one runs."""
    if dev is None:
        return []
    sandbox = dev["sandbox_url"] or "(not recorded)"
    return [
        f"tickwork dev (pid {dev['pid']}): API at {dev['api_url']}, webhook receiver at"
        f" {dev['receiver_url']}, provider sandbox at {sandbox}; data in {dev['data_dir']}"
    ]


def _circuit_lines(open_circuits: list[dict[str, Any]]) -> list[str]:
    """One line per provider circuit not closed (docs/failover.md)."""
    lines: list[str] = []
    for c in open_circuits:
        through = f"connection {c['connection_id']}" if c["connection_id"] else "stack options"
        since = f" since {stamp(c['opened_at'])}" if c["opened_at"] else ""
        probe = c.get("probe_taken_at")
        probing = f", probe out since {stamp(probe)}" if probe else ""
        lines.append(
            f"circuit {c['state']}: {c['provider']} ({through}){since}{probing}; its rows fail over"
        )
    return lines


def render(status: Status) -> str:
    """The status as a person reads it in a terminal."""
    now = status.generated_at
    window = duration(status.window_seconds)
    scope = f"workspace {status.workspace_id}" if status.workspace_id else "all workspaces"
    lines = [f"Tickwork status at {stamp(now)} ({scope}; times in UTC)", ""]
    paused = ", ".join(status.paused_action_types) or "none"
    enabled = "on" if status.dispatch_enabled else "OFF (kill switch: TICKWORK_DISPATCH_ENABLED)"
    lines.append(f"dispatch: {enabled}; paused action types: {paused}  [{status.switches_from}]")
    lines.append("")
    if status.backlog:
        lines.append(f"{'backlog':<16}{'queued':>8}{'due now':>9}  {'oldest due':<18}next due")
        for row in status.backlog:
            oldest = row["oldest_due_age_seconds"]
            nxt = row["next_due"]
            lines.append(
                f"{row['action_type']:<16}{row['queued']:>8}"
                f"{str(row['due']) + ('+' if row['due_capped'] else ''):>9}  "
                f"{(duration(oldest) + ' ago') if oldest is not None else '-':<18}"
                f"{relative(nxt, now) + ' (' + stamp(nxt)[11:19] + ')' if nxt else '-'}"
            )
    else:
        lines.append("backlog: nothing queued")
    nxt = status.next_due
    oldest = status.oldest_due_age_seconds
    oldest_text = duration(oldest) + " ago" if oldest is not None else "none"
    lines.append(
        f"next due: {relative(nxt, now) + ' at ' + stamp(nxt) if nxt else 'nothing'};"
        f" oldest due and not yet sent: {oldest_text}"
    )
    lines.append("")
    lag = status.lag_ms
    if lag["sample"]:
        lines.append(
            f"lag (claimed - due, last {window}): p50 {duration(lag['p50'] / 1000)},"
            f" p99 {duration(lag['p99'] / 1000)} over {lag['sample']} actions"
        )
        for name, one in lag["by_action_type"].items():
            lines.append(
                f"  {name:<14}p50 {duration(one['p50'] / 1000)}, p99 {duration(one['p99'] / 1000)}"
                f" ({one['sample']})"
            )
    else:
        lines.append(f"lag: nothing was due and claimed in the last {window}")
    if status.outcomes:
        lines.append(f"outcomes (finished in the last {window}):")
        for row in status.outcomes:
            what = row["status"] + (f" {row['error_code']}" if row["error_code"] else "")
            lines.append(f"  {row['action_type']:<14}{what:<28}{row['count']:>6}")
    else:
        lines.append(f"outcomes: nothing finished in the last {window}")
    a = status.attention
    lines.append(
        f"needs a person: {a.get('stuck', 0)} stuck, {a.get('ambiguous', 0)} ambiguous"
        " (failed: the provider may have them; check, then `tickwork actions retry`),"
        f" {a.get('submitted_too_long', 0)} submitted longer than the stuck timeout"
    )
    lines += _circuit_lines(status.circuits)
    lines.append("")
    if status.queues is not None:
        # A message may ring for several rows due together (rows_per_message).
        lines.append(f"queue messages ({status.queues_from}):")
        for name, depth in status.queues.items():
            lines.append(
                f"  {name:<14}visible {depth.visible}, delayed {depth.delayed},"
                f" in flight {depth.in_flight}, dead letters {depth.dead_letters}"
                + ("  <- `tickwork redrive`" if depth.dead_letters else "")
            )
    lines += _dev_line(status.dev)
    for note in status.notes:
        lines.append(note)
    return "\n".join(lines).rstrip() + "\n"
