"""The calendar (a workspace's actions in a time range, keyset-paginated) and its stats."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from tickwork import rollup
from tickwork.actions.model import Action
from tickwork.actions.store import rows_as
from tickwork.platform import paging
from tickwork.platform.db import Connection
from tickwork.platform.errors import InputError
from tickwork.platform.sql import query
from tickwork.recurring import projection

_LIST = query("list_actions")
_COUNTS = query("calendar_counts")
_FIRSTS = query("calendar_firsts")
_BACKLOG = query("stats_backlog")
_LAG = query("stats_lag")

NIL = UUID(int=0)
MAX_PAGE = 500
# Without `from`, the calendar starts this long ago (what just fired is still on it); without
# `to`, it ends this long after `from`.
DEFAULT_LOOKBACK = timedelta(hours=24)
DEFAULT_SPAN = timedelta(days=31)


def default_range(
    start: datetime | None, end: datetime | None, now: datetime
) -> tuple[datetime, datetime]:
    """The range a calendar request means: as given; `from` else 24 h ago (31 days before
    `to` when `to` is earlier than that); `to` else 31 days after `from`."""
    if start is None:
        start = now - DEFAULT_LOOKBACK
        if end is not None and end <= start:
            start = end - DEFAULT_SPAN
    if end is None:
        end = start + DEFAULT_SPAN
    return start, end


# A summary covers at most this much: a month view's six weeks by day, a week by hour.
MAX_SUMMARY_SPAN = {"day": timedelta(days=62), "hour": timedelta(days=8)}
MAX_PER_BUCKET = 100


# The pseudo-status of an occurrence a recurring schedule will make, not made yet.
PROJECTED = "projected"


@dataclass(frozen=True)
class Glimpse:
    """An action as a calendar cell shows it, or an occurrence projected (no id yet)."""

    id: UUID | None
    action_type: str
    target_key: str
    status: str
    publish_at: datetime
    recurring_schedule_id: UUID | None = None

    @property
    def projected(self) -> bool:
        return self.status == PROJECTED


@dataclass
class Bucket:
    """A local day or hour: how many actions it holds by status, and its first few."""

    start: datetime  # the local wall time it starts at (naive)
    counts: dict[str, int]
    items: list[Glimpse]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass
class Summary:
    buckets: list[Bucket]
    # False when the projected occurrences were cut short by their bounds (there may be
    # more than the counts say); True when none were asked for.
    projection_complete: bool = True


def summary(
    conn: Connection,
    workspace_id: UUID,
    start: datetime,
    end: datetime,
    *,
    zone: str,
    unit: str,
    per_bucket: int,
    status: str | None = None,
    action_type: str | None = None,
    projected_from: datetime | None = None,
) -> Summary:
    """The range by local day or hour in `zone` (a valid IANA name): counts by status and
    the first `per_bucket` actions of each, in two statements, whatever the range holds.

    With `projected_from` (now) and no `status`, the occurrences active recurring schedules
    will make after it and have not made yet count too, under the status `projected`
    (tickwork.recurring.projection): the expander makes rows 14 days ahead only."""
    if end <= start:
        raise InputError("`to` must be after `from`", field="to")
    if end - start > MAX_SUMMARY_SPAN[unit]:
        days = MAX_SUMMARY_SPAN[unit].days
        raise InputError(f"a summary by {unit} covers at most {days} days", field="to")
    params = {
        "workspace_id": workspace_id, "from": start, "to": end, "zone": zone, "unit": unit,
        "per_bucket": per_bucket, "status": status, "action_type": action_type,
    }  # fmt: skip
    buckets: dict[datetime, Bucket] = {}
    for bucket, row_status, n in conn.execute(_COUNTS, params).fetchall():
        buckets.setdefault(bucket, Bucket(bucket, {}, [])).counts[row_status] = n
    if per_bucket:
        for bucket, *fields in conn.execute(_FIRSTS, params).fetchall():
            # (a row made between the two statements may bring its own bucket)
            buckets.setdefault(bucket, Bucket(bucket, {}, [])).items.append(Glimpse(*fields))
    found = Summary([])
    if projected_from is not None and status is None:
        ahead = projection.project(
            conn, workspace_id, start, end, now=projected_from, action_type=action_type
        )
        _add_projected(buckets, ahead.occurrences, ZoneInfo(zone), unit, per_bucket)
        found.projection_complete = ahead.complete
    found.buckets = [buckets[key] for key in sorted(buckets)]
    return found


def _add_projected(
    buckets: dict[datetime, Bucket], occurrences: list[projection.Projected], zone: ZoneInfo,
    unit: str, per_bucket: int,
) -> None:  # fmt: skip
    """Each projected occurrence counted in its local day or hour, and among the bucket's
    first `per_bucket` by due time beside the rows (as the SQL buckets them)."""
    for o in occurrences:
        local = o.at.astimezone(zone).replace(tzinfo=None, minute=0, second=0, microsecond=0)
        key = local.replace(hour=0) if unit == "day" else local
        bucket = buckets.setdefault(key, Bucket(key, {}, []))
        bucket.counts[PROJECTED] = bucket.counts.get(PROJECTED, 0) + 1
        if per_bucket:
            glimpse = Glimpse(None, o.action_type, o.target_key, PROJECTED, o.at, o.schedule_id)
            bucket.items.append(glimpse)
    for bucket in buckets.values():
        # rows first at a tie: a row is there, a projection only expected
        bucket.items.sort(key=lambda g: (g.publish_at, g.projected))
        del bucket.items[per_bucket:]


@dataclass(frozen=True)
class Page:
    items: list[Action]
    next_cursor: str | None


def list_actions(
    conn: Connection,
    workspace_id: UUID,
    start: datetime,
    end: datetime,
    *,
    status: str | None = None,
    action_type: str | None = None,
    thing_id: str | None = None,
    error_code: str | None = None,
    target_key: str | None = None,
    tag: str | None = None,
    limit: int = 100,
    cursor: str | None = None,
) -> Page:
    if end <= start:
        raise InputError("`to` must be after `from`", field="to")
    if not 1 <= limit <= MAX_PAGE:
        raise InputError(f"limit must be between 1 and {MAX_PAGE}", field="limit")
    after_at, after_id = paging.decode_cursor(cursor) if cursor else (start, NIL)
    params = {
        "workspace_id": workspace_id, "after_at": max(after_at, start), "after_id": after_id,
        "to": end, "status": status, "action_type": action_type, "thing_id": thing_id,
        "error_code": error_code, "target_key": target_key, "tag": tag, "limit": limit + 1,
    }  # fmt: skip
    if after_at < start:
        params["after_id"] = NIL
    with conn.cursor() as cur:
        # by column name: the table has columns (derived, for indexes) an Action has not
        rows = rows_as(Action, cur, cur.execute(_LIST, params).fetchall())
    more = len(rows) > limit
    items = rows[:limit]
    return Page(items, paging.encode_cursor(items[-1].publish_at, items[-1].id) if more else None)


@dataclass(frozen=True)
class Stats:
    counts: list[dict[str, Any]]
    due_backlog: int
    oldest_due_age_seconds: float | None
    lag_sample: int
    lag_ms: dict[str, float] | None


# For this transaction only: the reads below are built for small partial indexes, but rows
# finished in the past are "due before now" too in the planner's statistics, so with 1M of
# them it expects ~1M due rows, and then starts parallel workers, compiles with JIT, or scans
# the table (measured at 10M rows: 5-10 ms, 370 ms, 2.5 s) for what is a read of a few
# index entries.
SMALL_READS = query("small_reads")


def stats(conn: Connection, workspace_id: UUID) -> Stats:
    with conn.transaction():
        conn.execute(SMALL_READS)
        return _stats(conn, workspace_id)


def _stats(conn: Connection, workspace_id: UUID) -> Stats:
    params = {"workspace_id": workspace_id}
    # From the rollup (tickwork.rollup): a scan of every row would grow with the backlog.
    counts = rollup.counts(conn, workspace_id)
    backlog = conn.execute(_BACKLOG, params).fetchone()
    lag = conn.execute(_LAG, params).fetchone()
    assert backlog is not None
    assert lag is not None
    sample, percentiles = lag
    lag_ms = None
    if sample and percentiles:
        lag_ms = {
            name: round(value, 1)
            for name, value in zip(("p50", "p95", "p99"), percentiles, strict=True)
        }
    return Stats(counts, backlog[0], backlog[1], sample, lag_ms)
