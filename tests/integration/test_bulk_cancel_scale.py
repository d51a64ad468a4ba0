"""Scale (slow; `make test-slow`): cancelling 100,000 pending actions of one tag finishes,
leaves the tag's sent and claimed rows alone, and does not hold back another workspace's
due actions: a tick runs every TICK seconds meanwhile, as the cron would, and each of the
other workspace's rows due during the cancel is marked within TICK of the tick that would
have marked it anyway (lag from its due time under 2 x TICK). Prints rows/s and the lag."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest

from tests.conftest import make_workspace
from tickwork.actions import bulk
from tickwork.engine.tick import run_tick
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection, connect
from tickwork.platform.queues.memory import InProcessQueues

pytestmark = pytest.mark.slow

PENDING = 100_000
TICK = 1.0  # seconds between two ticks here (the local runtime's interval is a minute)
SPREAD = 0.1  # seconds between two of the other workspace's due rows
OTHERS = 600  # its rows: one due every SPREAD seconds for a minute


def _insert(conn: Connection, workspace: UUID, count: int, status: str, at: datetime) -> None:
    finished = None if status in ("queued", "submitted") else at
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
        " status, finished_at, tags, submitted_at, attempt_count, payload)"
        " select %s, 'webhook', 't' || g, %s + make_interval(secs => g), %s, %s,"
        " array['podcast:1', 'season:' || g %% 10],"
        " case when %s in ('submitted', 'published') then now() end,"
        " case when %s in ('submitted', 'published') then 1 else 0 end, '{\"text\": \"hi\"}'"
        " from generate_series(1, %s) g",
        (workspace, at, status, finished, status, status, count),
    )


class Ticker(threading.Thread):
    """The tick cron: a run every TICK seconds on a connection of its own; records how long
    each took."""

    def __init__(self, database_url: str, settings: Settings) -> None:
        super().__init__(daemon=True)
        self.database_url, self.settings = database_url, settings
        self.stop = threading.Event()
        self.elapsed: list[float] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with connect(self.database_url) as conn:
                queues = InProcessQueues(visibility_timeout=30)
                while not self.stop.is_set():
                    started = time.monotonic()
                    run_tick(conn, queues, self.settings, budget_seconds=TICK)
                    self.elapsed.append(time.monotonic() - started)
                    # The cron's period: the next run starts TICK after this one started.
                    self.stop.wait(max(0.0, TICK - (time.monotonic() - started)))
        except BaseException as exc:  # pragma: no cover - reported by the test
            self.error = exc


@pytest.mark.timeout(900)
def test_cancelling_100k_of_one_tag_finishes_and_spares_sent_rows_and_other_workspaces(
    database_url, conn
):
    settings = Settings(database_url=database_url, lookahead_seconds=0)
    podcast, other = make_workspace(conn, "Podcasts"), make_workspace(conn, "Other")
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    _insert(conn, podcast, PENDING, "queued", tomorrow)
    _insert(conn, podcast, 1000, "published", tomorrow - timedelta(days=2))
    _insert(conn, podcast, 100, "submitted", tomorrow - timedelta(days=1, minutes=5))
    conn.execute("analyze scheduled_actions")
    untouched = conn.execute(
        "select id, status, updated_at from scheduled_actions"
        " where workspace_id = %s and status <> 'queued' order by id",
        (podcast,),
    ).fetchall()
    # The other workspace: a row due every SPREAD seconds from a second from now.
    first_due = datetime.now(UTC) + timedelta(seconds=1)
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
        " payload) select %s, 'webhook', 'o' || g, %s + make_interval(secs => g * %s),"
        ' \'{"text": "hi"}\' from generate_series(0, %s) g',
        (other, first_due, SPREAD, OTHERS - 1),
    )

    ticker = Ticker(database_url, settings)
    ticker.start()
    calls = cancelled = 0
    started = time.monotonic()
    with connect(database_url) as worker:
        after: str | None = None
        while True:
            # One API call: one transaction, its batches within the call's budgets.
            with worker.transaction():
                result = bulk.cancel_matching(worker, podcast, bulk.Filter(tag="podcast:1"),
                                              after=after)  # fmt: skip
            calls += 1
            cancelled += result.changed
            after = result.next
            if after is None:
                break
    took = time.monotonic() - started
    finished_at = datetime.now(UTC)
    # Let the ticks mark what fell due up to the cancel's end, then stop the cron.
    deadline = time.monotonic() + 3 * TICK
    while time.monotonic() < deadline and conn.execute(
        "select count(*) from scheduled_actions where workspace_id = %s and publish_at <= %s"
        " and enqueued_at is null",
        (other, finished_at),
    ).fetchone() != (0,):
        ticker.stop.wait(0.05)
    ticker.stop.set()
    ticker.join(10)
    assert ticker.error is None, ticker.error

    # Every pending row of the tag is cancelled, the sent and claimed ones untouched.
    assert cancelled == PENDING
    counts = dict(
        conn.execute(
            "select status, count(*)::int from scheduled_actions where workspace_id = %s"
            " group by status",
            (podcast,),
        ).fetchall()
    )
    assert counts == {"cancelled": PENDING, "published": 1000, "submitted": 100}
    assert (
        conn.execute(
            "select id, status, updated_at from scheduled_actions"
            " where workspace_id = %s and status <> 'cancelled' order by id",
            (podcast,),
        ).fetchall()
        == untouched
    )
    # The other workspace's rows due during the cancel were marked in time.
    lags = [
        row[0]
        for row in conn.execute(
            "select extract(epoch from enqueued_at - publish_at)::float8"
            " from scheduled_actions where workspace_id = %s and publish_at <= %s",
            (other, finished_at),
        ).fetchall()
    ]
    assert lags, "the cancel ended before any of the other workspace's rows fell due"
    assert None not in lags, "a due row of the other workspace was never marked"
    worst = max(lags)
    print(
        f"\ncancelled {cancelled} rows in {took:.2f} s ({cancelled / took:,.0f} rows/s,"
        f" {calls} calls); the other workspace: {len(lags)} rows due meanwhile, lag"
        f" max {worst:.3f} s, mean {sum(lags) / len(lags):.3f} s; tick runs"
        f" max {max(ticker.elapsed):.3f} s over {len(ticker.elapsed)} runs"
    )
    assert worst < 2 * TICK, f"a due row waited {worst:.3f} s, more than a tick beyond its own"
