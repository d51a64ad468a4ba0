"""A recurring schedule on the local runtime, end to end: it fires N times at the right
seconds, through the same handlers (tick, expander, dispatcher) Lambda runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from tests.conftest import make_workspace
from tests.waiting import wait_for
from tickwork.local.runner import LocalRuntime
from tickwork.platform.config import Settings
from tickwork.recurring import store as recurring
from tickwork.recurring.store import NewSchedule


def test_a_schedule_every_two_seconds_fires_three_times_at_the_right_seconds(database_url):
    # The floor is lowered so that a test can watch a rule fire a few times in seconds.
    settings = Settings(recurring_min_interval_seconds=1)
    with LocalRuntime(database_url, settings, tick_interval=60) as local:
        conn = local.runtime.db.connection()
        workspace = make_workspace(conn)
        # Given a schedule every 2 seconds, three times, from 2 seconds from now (Berlin time)
        berlin = ZoneInfo("Europe/Berlin")
        now = datetime.now(UTC)
        dtstart = (
            (now + timedelta(seconds=2)).astimezone(berlin).replace(tzinfo=None, microsecond=0)
        )
        new = NewSchedule(action_type="webhook", target_key="primary", timezone="Europe/Berlin",
                          rrule="FREQ=SECONDLY;INTERVAL=2;COUNT=3", dtstart=dtstart,
                          payload={"hello": "again"})  # fmt: skip
        # When it is created: its occurrences are within the look-ahead, so queued at once
        result = recurring.create_schedule(
            conn, workspace, new, local.settings, now, queues=local.queues
        )
        assert len(result.created) == 3
        # (and nothing more is on its way: the queue is empty and the expander has run)
        queue = local.queues.queue("webhook")
        wait_for(
            lambda: len(local.receiver.deliveries) >= 3 and len(queue) == 0 and local.expansions,
            timeout=20,
            message=lambda: f"{len(local.receiver.deliveries)} deliveries, {queue.depth()}",
        )
        # Then it fired exactly three times, 2 s apart, each within 300 ms of its second
        deliveries = local.receiver.deliveries
        assert len(deliveries) == 3
        first = dtstart.replace(tzinfo=berlin).astimezone(UTC)
        due = sorted(datetime.fromisoformat(d.body["data"]["publish_at"]) for d in deliveries)
        assert due == [first + timedelta(seconds=s) for s in (0, 2, 4)]
        lags = [d.lag_seconds for d in deliveries]
        assert all(lag is not None and 0 <= lag < 1.0 for lag in lags), lags
        assert all(d.verified for d in deliveries)
        assert {d.body["data"]["payload"]["hello"] for d in deliveries} == {"again"}
        # and the expander ran beside the tick, through its Lambda handler
        assert local.expansions
        assert local.expansions[0]["errors"] == 0
