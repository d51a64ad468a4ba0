"""What a workspace's operations view shows (GET /v1/operations, admins): per action type,
the rows due, published and failed, the backlog and the lag over the last hours in
buckets; outcomes by error code; the queues' depths and dead letters (stack-wide); the
kill switches; and warnings in plain words, as pg-boss's dashboard gives them.

Reads are bounded ranges of indexes (platform/sql/operations.sql); nothing here writes.
A queue that cannot be read is said so in the answer, never a failed request."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, cast
from uuid import UUID

from psycopg.rows import dict_row

from tickwork.calendar import SMALL_READS
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection
from tickwork.platform.errors import UnknownActionTypeError
from tickwork.platform.queues.admin import (
    Depth,
    QueueAdmin,
    QueueAdminError,
    QueueSource,
    Redriven,
)
from tickwork.platform.sql import query
from tickwork.platform.text import duration, stamp
from tickwork.platform.wallclock import utcnow

_SERIES = query("operations_series")
_OUTCOMES = query("operations_outcomes")
_CLOCK = query("operations_clock")
_OLDEST_TRANSACTION = query("operations_oldest_transaction")

WarningCode = Literal[
    "dispatch_off",
    "paused",
    "dead_letters",
    "backlog_growing",
    "clock_skew",
    "old_transaction",
    "queues_unreadable",
]
FinishedStatus = Literal["published", "failed", "cancelled"]

MAX_HOURS = 48
DEFAULT_HOURS = 6
# Queues read at once (SQS: two calls each).
QUEUE_READERS = 8


def bucket_seconds(hours: int) -> int:
    """10-minute buckets up to 6 hours, 30-minute up to 24, hourly beyond: at most 48
    whole buckets, plus the current one."""
    if hours <= 6:
        return 600
    if hours <= 24:
        return 1800
    return 3600


def window_start(now: datetime, hours: int) -> datetime:
    """The first bucket's start: `hours` before the start of the bucket `now` is in (buckets
    are aligned to the clock, in UTC), so the window holds `hours` of whole buckets and the
    current, partial one."""
    width = bucket_seconds(hours)
    epoch = now.timestamp()
    return datetime.fromtimestamp(epoch - epoch % width, tz=now.tzinfo) - timedelta(hours=hours)


@dataclass(frozen=True)
class Bucket:
    start: datetime
    due: int
    published: int
    failed: int
    backlog: int
    lag_sample: int
    lag_p50_ms: float | None
    lag_p99_ms: float | None


@dataclass(frozen=True)
class Series:
    action_type: str
    backlog_at_start: int
    buckets: list[Bucket]


@dataclass(frozen=True)
class Outcome:
    action_type: str
    status: FinishedStatus
    error_code: str | None
    count: int


@dataclass(frozen=True)
class QueueState:
    action_type: str
    depth: Depth | None
    error: str | None = None


@dataclass(frozen=True)
class Warning:
    code: WarningCode
    message: str
    action_type: str | None = None


@dataclass(frozen=True)
class Clock:
    database: datetime
    function: datetime
    skew_seconds: float  # database - function; positive: the database is ahead
    uncertainty_seconds: float  # half the round trip of the reading


@dataclass(frozen=True)
class OldestTransaction:
    started_at: datetime | None
    state: str | None
    sessions_hidden: bool


@dataclass
class Operations:
    generated_at: datetime
    hours: int
    bucket_seconds: int
    start: datetime
    series: list[Series]
    outcomes: list[Outcome]
    queues: list[QueueState]
    queues_source: QueueSource | None
    dispatch_enabled: bool
    paused_action_types: list[str]
    clock: Clock
    oldest_transaction: OldestTransaction
    warnings: list[Warning] = field(default_factory=list)


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 1)


def read_clock(
    conn: Connection, clock: Callable[[], datetime] | None = None
) -> tuple[datetime, Clock]:
    """The transaction's now() and the skew between the database's clock and `clock` (this
    process's, by default): the database's reading against the midpoint of ours around it.
    clock_timestamp(), not now(): inside a transaction now() is when it began."""
    clock = clock or utcnow
    before = clock()
    row = conn.execute(_CLOCK).fetchone()
    after = clock()
    assert row is not None
    now, database = row
    function = before + (after - before) / 2
    return now, Clock(
        database=database,
        function=function,
        skew_seconds=(database - function).total_seconds(),
        uncertainty_seconds=(after - before).total_seconds() / 2,
    )


def _series(rows: list[dict[str, Any]], start: datetime, width: int) -> list[Series]:
    by_type: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_type.setdefault(row["action_type"], []).append(row)
    found = []
    for action_type, lines in sorted(by_type.items()):
        before = next(line for line in lines if line["bucket"] == -1)
        buckets = [
            Bucket(
                start=start + timedelta(seconds=width * line["bucket"]),
                due=line["due"],
                published=line["published"],
                failed=line["failed"],
                backlog=line["backlog"],
                lag_sample=line["lag_sample"],
                lag_p50_ms=_round(line["lag_p50_ms"]),
                lag_p99_ms=_round(line["lag_p99_ms"]),
            )
            for line in lines
            if line["bucket"] >= 0
        ]
        found.append(Series(action_type, before["backlog"], buckets))
    return found


def read_queues(
    admin: QueueAdmin | None, action_types: list[str]
) -> tuple[list[QueueState], QueueSource | None]:
    """Each type's queue depth, or why it cannot be read."""
    if admin is None:
        reason = "the queues cannot be reached from this process"
        return [QueueState(name, None, reason) for name in action_types], None

    def one(action_type: str) -> QueueState:
        try:
            return QueueState(action_type, admin.depth(action_type))
        except QueueAdminError as exc:
            return QueueState(action_type, None, exc.message)

    if len(action_types) <= 1:
        return [one(name) for name in action_types], admin.source
    with ThreadPoolExecutor(max_workers=min(QUEUE_READERS, len(action_types))) as pool:
        return list(pool.map(one, action_types)), admin.source


def gather(
    conn: Connection,
    workspace_id: UUID,
    settings: Settings,
    admin: QueueAdmin | None,
    *,
    hours: int = DEFAULT_HOURS,
    clock: Callable[[], datetime] | None = None,
) -> Operations:
    """The operations view of a workspace over the last `hours`, read in the caller's
    transaction (the API's tenant transaction: the workspace's rows only)."""
    width = bucket_seconds(hours)
    configured = sorted(settings.action_types)
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        conn.execute(SMALL_READS)  # what it reads is bounded, whatever the estimates say
        now, skew = read_clock(conn, clock)
        start = window_start(now, hours)
        params = {
            "workspace_id": workspace_id,
            "start": start,
            "stop": now,
            "width": width,
            "buckets": int((now - start).total_seconds() // width) + 1,
            "action_types": configured,
        }
        rows = cur.execute(_SERIES, params).fetchall()
        outcomes = [
            Outcome(
                r["action_type"],
                cast(FinishedStatus, r["status"]),
                r["error_code"] or None,
                r["count"],
            )
            for r in cur.execute(_OUTCOMES, params).fetchall()
        ]
        oldest = cur.execute(_OLDEST_TRANSACTION).fetchone()
    assert oldest is not None
    queues, source = read_queues(admin, configured)
    found = Operations(
        generated_at=now,
        hours=hours,
        bucket_seconds=width,
        start=start,
        series=_series(rows, start, width),
        outcomes=outcomes,
        queues=queues,
        queues_source=source,
        dispatch_enabled=settings.dispatch_enabled,
        paused_action_types=sorted(settings.paused_action_types),
        clock=skew,
        oldest_transaction=OldestTransaction(
            started_at=oldest["xact_start"],
            state=oldest["state"],
            sessions_hidden=bool(oldest["sessions_hidden"]),
        ),
    )
    found.warnings = warnings(found, settings)
    return found


# ------------------------------------------------------------------------------ warnings


def warnings(found: Operations, settings: Settings) -> list[Warning]:
    """What an operator should look at, in plain words, most pressing first."""
    out: list[Warning] = []
    if not found.dispatch_enabled:
        out.append(Warning(
            "dispatch_off",
            "Dispatch is off (the kill switch TICKWORK_DISPATCH_ENABLED is false): nothing is"
            " sent; rows stay queued and are sent once it is on again.",
        ))  # fmt: skip
    for name in found.paused_action_types:
        out.append(Warning(
            "paused",
            f"{name} is paused (TICKWORK_PAUSED_ACTION_TYPES): its rows stay queued and are"
            " sent once it is resumed.",
            name,
        ))  # fmt: skip
    for queue in found.queues:
        if queue.depth is not None and queue.depth.dead_letters:
            n = queue.depth.dead_letters
            out.append(Warning(
                "dead_letters",
                f"{queue.action_type}: {n} message{'s' if n != 1 else ''} in the"
                " dead-letter queue (a dispatcher kept failing on infrastructure). The rows"
                " are safe in the database; fix the cause, then redrive.",
                queue.action_type,
            ))  # fmt: skip
    threshold = settings.ops_backlog_warning_rows
    for series in found.series:
        end = series.buckets[-1].backlog if series.buckets else series.backlog_at_start
        if end > series.backlog_at_start and end > threshold:
            out.append(Warning(
                "backlog_growing",
                f"{series.action_type}: {end} rows are due and not sent, up from"
                f" {series.backlog_at_start} at {stamp(found.start)}"
                f" ({duration((found.generated_at - found.start).total_seconds())} ago)."
                " Check the dispatcher's errors and throttles, and the provider.",
                series.action_type,
            ))  # fmt: skip
    clock = found.clock
    tolerance = settings.clock_skew_tolerance_seconds
    if abs(clock.skew_seconds) - clock.uncertainty_seconds > tolerance:
        ahead = "ahead of" if clock.skew_seconds > 0 else "behind"
        out.append(Warning(
            "clock_skew",
            f"The database's clock is {abs(clock.skew_seconds):.2f} s {ahead} this function's"
            f" (tolerance {tolerance:g} s, TICKWORK_CLOCK_SKEW_TOLERANCE_SECONDS): rows may be"
            " claimed late or refused as not yet due. Check the time sync of both.",
        ))  # fmt: skip
    oldest = found.oldest_transaction
    limit = settings.ops_old_transaction_seconds
    if oldest.started_at is not None:
        age = (clock.database - oldest.started_at).total_seconds()
        if age > limit:
            state = f", {oldest.state}" if oldest.state else ""
            out.append(Warning(
                "old_transaction",
                f"A transaction has been open for {duration(age)} (since"
                f" {stamp(oldest.started_at)}{state}): it holds back vacuum's clean-up of"
                " dead rows, and with it the room the dispatchers' writes reuse. End it if"
                " nothing needs it (pg_stat_activity shows it; pg_terminate_backend ends it).",
            ))  # fmt: skip
    unreadable = [q for q in found.queues if q.error is not None]
    if unreadable:
        names = ", ".join(q.action_type for q in unreadable)
        out.append(Warning(
            "queues_unreadable",
            f"The queue depths of {names} cannot be read: {unreadable[0].error}",
        ))  # fmt: skip
    return out


# ------------------------------------------------------------------------------- redrive


@dataclass(frozen=True)
class RedriveResult:
    action_type: str
    redriven: Redriven | None
    error: str | None = None


def redrive(
    admin: QueueAdmin | None, settings: Settings, action_type: str | None = None
) -> list[RedriveResult]:
    """Dead letters back to their queues: every configured type's, or one type's."""
    known = sorted(settings.action_types)
    if action_type is not None and action_type not in known:
        raise UnknownActionTypeError(
            f"unknown action_type {action_type!r}; known types: {', '.join(known)}",
            field="action_type",
        )
    names = [action_type] if action_type is not None else known
    if admin is None:
        return [RedriveResult(n, None, "the queues cannot be reached from this process")
                for n in names]  # fmt: skip
    results = []
    for name in names:
        try:
            results.append(RedriveResult(name, admin.redrive(name)))
        except QueueAdminError as exc:
            results.append(RedriveResult(name, None, exc.message))
    return results
