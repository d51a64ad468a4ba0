"""Recurring schedules on a real Postgres: materialization, the expander, the lifecycle,
catch-up, run-now, the failure policy and the limits."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.conftest import make_workspace
from tests.engine import drain
from tests.handlers import FakeLambdaContext, load_handler
from tickwork import runtime as runtime_slot
from tickwork.actions import model, scheduling, store
from tickwork.engine import expander
from tickwork.engine.tick import run_tick
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection, connect
from tickwork.platform.errors import (
    ConflictError,
    InputError,
    InvalidRecurrenceError,
    InvalidTimeError,
    InvalidTimezoneError,
    NotFoundError,
    PayloadTooLargeError,
    UnknownActionTypeError,
)
from tickwork.recurring import store as recurring
from tickwork.recurring.store import NewSchedule, Schedule, ScheduleChanges

DAILY_9 = "FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSECOND=0"
EVERY_2H = "FREQ=HOURLY;INTERVAL=2;BYMINUTE=0;BYSECOND=0"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def new_schedule(rrule: str = DAILY_9, **overrides: Any) -> NewSchedule:
    values: dict[str, Any] = {
        "action_type": "log",
        "target_key": "reports",
        "rrule": rrule,
        "timezone": "UTC",
        "dtstart": datetime(2026, 3, 1),
        "payload": {"report": "daily"},
    }
    values.update(overrides)
    return NewSchedule(**values)


def rows(conn: Connection, schedule_id: UUID) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "select * from scheduled_actions where recurring_schedule_id = %s"
            " order by publish_at, created_at",
            (schedule_id,),
        ).fetchall()


def queued_times(conn: Connection, schedule_id: UUID) -> list[datetime]:
    return [
        r["publish_at"]
        for r in rows(conn, schedule_id)
        if r["status"] == "queued" and r["source"] == "recurring"
    ]


def count(conn: Connection, table: str) -> int:
    sql = {"schedules": "select count(*) from recurring_schedules",
           "actions": "select count(*) from scheduled_actions"}[table]  # fmt: skip
    row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def fail(conn: Connection, action_id: UUID, message: str = "HTTP 404 from the endpoint") -> None:
    """Drive a queued row to failed through the state machine, as a dispatcher would."""
    assert store.claim(conn, "log", [action_id], early_tolerance=60 * 86400)
    store.finalize(conn, [model.failed(action_id, "provider_rejected", message)])


def publish(conn: Connection, action_id: UUID) -> None:
    assert store.claim(conn, "log", [action_id], early_tolerance=60 * 86400)
    store.finalize(conn, [model.published(action_id, "ok")])


# ----------------------------------------------------------------------------- create


def test_the_schema_matches_what_the_code_reads(conn):
    columns = [
        row[0]
        for row in conn.execute(
            "select column_name from information_schema.columns"
            " where table_name = 'recurring_schedules' order by ordinal_position"
        ).fetchall()
    ]
    assert columns == list(Schedule.__dataclass_fields__)


def test_create_materializes_the_window_at_once(conn, workspace, settings):
    # Given "every day at 09:00 Sydney time", created at 08:50 Sydney on 2026-03-02
    now = at("2026-03-01T21:50")
    new = new_schedule(timezone="Australia/Sydney")
    # When it is created
    result = recurring.create_schedule(conn, workspace, new, settings, now)
    # Then the next 14 days are queued rows, the first ten minutes away, all from the template
    schedule = result.schedule
    times = queued_times(conn, schedule.id)
    assert times[0] == at("2026-03-01T22:00")  # 09:00 AEDT
    assert len(times) == 14
    assert len(result.created) == 14
    assert schedule.last_materialized_through == now + timedelta(days=14)
    first = rows(conn, schedule.id)[0]
    assert first["payload"] == {"report": "daily"}
    assert (first["action_type"], first["target_key"], first["source"]) == (
        "log", "reports", "recurring",
    )  # fmt: skip
    assert schedule.status == "active"
    assert schedule.max_failures_before_pause == 5
    assert schedule.catch_up_window_seconds == 3600


def test_dtstart_defaults_to_now_in_the_zone_to_the_minute(conn, workspace, settings):
    now = at("2026-03-02T10:17:42")
    new = new_schedule("FREQ=WEEKLY", dtstart=None, timezone="Europe/Berlin")
    schedule = recurring.create_schedule(conn, workspace, new, settings, now).schedule
    assert schedule.dtstart == datetime(2026, 3, 2, 11, 17)
    assert queued_times(conn, schedule.id) == [at("2026-03-09T10:17"), at("2026-03-16T10:17")]


def test_occurrences_share_a_thing_without_tripping_the_one_off_rules(conn, workspace, settings):
    # The one-active-row index and the publish guard are for one-off actions of a thing.
    now = at("2026-03-01T00:00")
    result = recurring.create_schedule(
        conn, workspace, new_schedule(thing_id="customer-7"), settings, now
    )
    first, second = rows(conn, result.schedule.id)[:2]
    publish(conn, first["id"])
    assert len(queued_times(conn, result.schedule.id)) == 13
    assert second["thing_id"] == "customer-7"
    # and a one-off action for the same thing and target is still allowed
    one_off = model.NewAction(action_type="log", target_key="reports", thing_id="customer-7",
                                publish_at=datetime.now(UTC) + timedelta(hours=1))  # fmt: skip
    assert scheduling.schedule(conn, workspace, one_off, settings, datetime.now(UTC)).created


BAD_INPUT = [
    (new_schedule(action_type="fax"), UnknownActionTypeError, "unknown action_type"),
    (new_schedule(timezone="Mars/Olympus"), InvalidTimezoneError, "unknown time zone"),
    (new_schedule(payload={"x": "y" * 70_000}), PayloadTooLargeError, "limit is 65536"),
    (new_schedule("FREQ=MINUTELY"), InvalidRecurrenceError, "at least 300 s apart"),
    (new_schedule("FREQ=DAILY;COUNT=3;UNTIL=20260401T000000Z"), InvalidRecurrenceError,
     "both COUNT and UNTIL"),
    (new_schedule("FREQ=MONTHLY;BYMONTHDAY=31;BYMONTH=2,4"), InvalidRecurrenceError,
     "selects no date"),
    (new_schedule("FREQ=DAILY;UNTIL=20260201T000000Z"), InvalidRecurrenceError, "no occurrence"),
    (new_schedule("FREQ=FORTNIGHTLY"), InvalidRecurrenceError, "cannot be read"),
    (new_schedule(dtstart=datetime(2026, 3, 1, tzinfo=UTC)), InvalidTimeError, "without an offset"),
    (new_schedule(until=at("2026-02-01T00:00")), InvalidTimeError, "until"),
    (new_schedule(catch_up_window_seconds=2 * 86400), InputError, "catch_up_window_seconds"),
    (new_schedule(max_failures_before_pause=0), InputError, "max_failures_before_pause"),
]  # fmt: skip


@pytest.mark.parametrize(("new", "error", "says"), BAD_INPUT)
def test_bad_input_is_refused_and_nothing_is_written(conn, workspace, settings, new, error, says):
    with pytest.raises(error, match=says):
        recurring.create_schedule(conn, workspace, new, settings, at("2026-03-01T00:00"))
    assert count(conn, "schedules") == 0
    assert count(conn, "actions") == 0


def test_a_payload_postgres_cannot_store_is_refused(conn, workspace, settings):
    new = new_schedule(payload={"text": "nul \u0000 inside"})
    with pytest.raises(InputError, match="cannot be stored"):
        recurring.create_schedule(conn, workspace, new, settings, at("2026-03-01T00:00"))
    assert count(conn, "schedules") == 0


def test_a_missing_workspace_is_not_found(conn, settings):
    with pytest.raises(NotFoundError, match="workspace"):
        recurring.create_schedule(conn, uuid4(), new_schedule(), settings, at("2026-03-01T00:00"))


# ----------------------------------------------------------------------------- expander


def test_the_expander_rolls_the_window_and_twice_creates_nothing_twice(conn, workspace, settings):
    # Given a schedule created on 1 March (materialized to the 15th)
    created = at("2026-03-01T00:00")
    schedule = recurring.create_schedule(conn, workspace, new_schedule(), settings, created)
    # When the expander runs a day later, twice
    later = created + timedelta(days=1)
    first = expander.expand_all(conn, settings, now=later)
    second = expander.expand_all(conn, settings, now=later)
    # Then the first run added the one new day and the second nothing
    assert (first.schedules, first.created, first.conflicts) == (1, 1, 0)
    assert (second.schedules, second.created) == (0, 0)
    times = queued_times(conn, schedule.schedule.id)
    assert times == [at(f"2026-03-{d:02d}T09:00") for d in range(1, 16)]


def test_re_expanding_a_window_already_materialized_creates_nothing(conn, workspace, settings):
    # Given a schedule whose progress was lost (as if the expander died before recording it)
    created = at("2026-03-01T00:00")
    result = recurring.create_schedule(conn, workspace, new_schedule(), settings, created)
    conn.execute("update recurring_schedules set last_materialized_through = %s", (created,))
    # When the expander runs again over the same window
    summary = expander.expand_all(conn, settings, now=created)
    # Then every occurrence is a conflict, dropped alone, and none exists twice
    assert (summary.created, summary.conflicts) == (0, 14)
    assert len(queued_times(conn, result.schedule.id)) == 14


def test_two_expanders_at_once_create_each_occurrence_once(database_url, conn, workspace, settings):
    # Given 30 schedules whose windows must all be materialized again
    now = at("2026-03-01T00:00")
    ids = [
        recurring.create_schedule(conn, workspace, new_schedule(), settings, now).schedule.id
        for _ in range(30)
    ]
    conn.execute("delete from scheduled_actions")
    conn.execute("update recurring_schedules set last_materialized_through = %s", (now,))
    small = settings.model_copy(update={"expander_batch_size": 4})
    start = threading.Barrier(2)
    summaries: list[expander.ExpandSummary] = []

    def run() -> None:
        with connect(database_url) as own:
            start.wait()
            summaries.append(expander.expand_all(own, small, now=now))

    # When two expanders run concurrently, each on its own connection
    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then between them every schedule was expanded once, and no occurrence exists twice
    assert sum(s.schedules for s in summaries) == 30
    assert sum(s.created for s in summaries) == 30 * 14
    assert sum(s.errors for s in summaries) == 0
    duplicates = conn.execute(
        "select count(*) from (select 1 from scheduled_actions"
        " group by recurring_schedule_id, publish_at having count(*) > 1) d"
    ).fetchone()
    assert duplicates == (0,)
    assert all(len(queued_times(conn, i)) == 14 for i in ids)


def test_the_expander_ends_a_schedule_whose_rule_is_over(conn, workspace, settings):
    # Given "the next two days at 09:00"
    now = at("2026-03-01T00:00")
    new = new_schedule("FREQ=DAILY;COUNT=2;BYHOUR=9;BYMINUTE=0;BYSECOND=0")
    schedule = recurring.create_schedule(conn, workspace, new, settings, now).schedule
    # When the expander runs after the second one
    summary = expander.expand_all(conn, settings, now=now + timedelta(days=2))
    # Then the schedule has ended, saying why, and its two rows are untouched
    assert summary.ended == 1
    ended = recurring.get_schedule(conn, workspace, schedule.id)
    assert ended.status == "ended"
    assert ended.ended_reason == "the rule has no occurrence left"
    assert len(queued_times(conn, schedule.id)) == 2


def test_the_expander_pauses_a_stored_rule_it_cannot_expand(conn, workspace, settings):
    # Given a schedule whose stored rule no longer reads (written behind the API's back)
    now = at("2026-03-01T00:00")
    schedule = recurring.create_schedule(conn, workspace, new_schedule(), settings, now).schedule
    conn.execute("update recurring_schedules set rrule = 'FREQ=NEVER'")
    # When the expander meets it
    summary = expander.expand_all(conn, settings, now=now + timedelta(days=1))
    # Then it is paused with the reason, its rows not yet due cancelled (the one already due
    # is left to fire), and the run carries on
    assert (summary.paused, summary.errors) == (1, 0)
    paused = recurring.get_schedule(conn, workspace, schedule.id)
    assert paused.status == "paused"
    assert paused.paused_reason is not None
    assert paused.paused_reason.startswith("cannot expand: the RRULE cannot be read")
    assert queued_times(conn, schedule.id) == [at("2026-03-01T09:00")]


def test_the_expander_handler_returns_its_summary(conn, workspace, runtime):

    now = datetime.now(UTC)
    recurring.create_schedule(conn, workspace, new_schedule(dtstart=None), runtime.settings, now)
    conn.execute("update recurring_schedules set last_materialized_through = %s", (now,))
    runtime_slot.install(runtime)
    try:
        summary = load_handler("expander").handler({}, FakeLambdaContext(remaining_ms=300_000))
    finally:
        runtime_slot.install(None)
    assert summary["schedules"] == 1
    assert summary["conflicts"] == 14
    assert summary["created"] == 0
    assert set(summary) >= {"skipped", "ended", "paused", "errors", "elapsed_seconds"}


# ----------------------------------------------------------------------------- lifecycle


def test_an_edit_moves_only_future_queued_rows_and_history_stays(conn, workspace, settings):
    # Given a daily 09:00 schedule created on 1 March, three days of which have happened:
    # the 1st published, the 2nd failed, the 3rd cancelled by hand
    created = at("2026-03-01T00:00")
    schedule = recurring.create_schedule(conn, workspace, new_schedule(), settings, created)
    sid = schedule.schedule.id
    first, second, third = rows(conn, sid)[:3]
    publish(conn, first["id"])
    fail(conn, second["id"])
    store.cancel(conn, workspace, third["id"])
    # When the rule moves to 10:30 on 3 March at noon
    now = at("2026-03-03T12:00")
    changes = ScheduleChanges(rrule="FREQ=DAILY;BYHOUR=10;BYMINUTE=30;BYSECOND=0")
    result = recurring.edit_schedule(conn, workspace, sid, changes, settings, now)
    # Then the history rows are as they were
    by_id = {r["id"]: r for r in rows(conn, sid)}
    assert by_id[first["id"]]["status"] == "published"
    assert by_id[second["id"]]["status"] == "failed"
    assert by_id[third["id"]]["status"] == "cancelled"
    # the queued 09:00 rows after now were cancelled, and 10:30 rows materialized from now
    assert len(result.cancelled) == 11  # 4th..14th
    assert all(by_id[i]["publish_at"] > now for i in result.cancelled)
    assert queued_times(conn, sid) == [at(f"2026-03-{d:02d}T10:30") for d in range(4, 18)]
    assert result.schedule.revision == 2
    assert result.schedule.rrule == changes.rrule


def test_an_edit_of_the_payload_rematerializes_the_same_instants(conn, workspace, settings):
    now = at("2026-03-01T00:00")
    sid = recurring.create_schedule(conn, workspace, new_schedule(), settings, now).schedule.id
    later = now + timedelta(hours=1)
    changes = ScheduleChanges(payload={"report": "weekly"})
    result = recurring.edit_schedule(conn, workspace, sid, changes, settings, later)
    assert len(result.cancelled) == 14
    assert len(result.created) == 14
    queued = [r for r in rows(conn, sid) if r["status"] == "queued"]
    assert {r["payload"]["report"] for r in queued} == {"weekly"}


def test_an_edit_of_a_policy_moves_no_rows_and_an_empty_edit_changes_nothing(
    conn, workspace, settings
):
    now = at("2026-03-01T00:00")
    sid = recurring.create_schedule(conn, workspace, new_schedule(), settings, now).schedule.id
    policy = ScheduleChanges(catch_up_window_seconds=600)
    result = recurring.edit_schedule(conn, workspace, sid, policy, settings, now)
    assert (result.cancelled, result.created) == ((), ())
    assert result.schedule.catch_up_window_seconds == 600
    unchanged = recurring.edit_schedule(conn, workspace, sid, ScheduleChanges(), settings, now)
    assert not unchanged.changed
    assert unchanged.schedule.revision == 2


def test_a_bad_edit_is_refused_and_nothing_changes(conn, workspace, settings):
    now = at("2026-03-01T00:00")
    sid = recurring.create_schedule(conn, workspace, new_schedule(), settings, now).schedule.id
    before = rows(conn, sid)
    with pytest.raises(InvalidRecurrenceError, match="300 s apart"):
        recurring.edit_schedule(conn, workspace, sid, ScheduleChanges(rrule="FREQ=MINUTELY"),
                                settings, now)  # fmt: skip
    assert rows(conn, sid) == before
    assert recurring.get_schedule(conn, workspace, sid).revision == 1


def test_pause_then_resume_after_two_missed_occurrences_fires_none_of_them(
    conn, workspace, settings
):
    # Given "every two hours" (10:00, 12:00, 14:00, ...), paused at 09:40
    created = at("2026-03-02T09:30")
    new = new_schedule(EVERY_2H)
    sid = recurring.create_schedule(conn, workspace, new, settings, created).schedule.id
    paused = recurring.pause_schedule(conn, workspace, sid, created + timedelta(minutes=10))
    assert paused.schedule.status == "paused"
    assert paused.schedule.paused_reason == "paused by request"
    assert len(paused.cancelled) == 14 * 12
    assert queued_times(conn, sid) == []
    # and the expander materializes nothing for it while paused
    assert expander.expand_all(conn, settings, now=at("2026-03-02T11:00")).schedules == 0
    # When it resumes at 13:30: 10:00 and 12:00 were missed, 12:00 by more than the 1 h window
    resumed = recurring.resume_schedule(conn, workspace, sid, settings, at("2026-03-02T13:30"))
    # Then neither fires, both are counted, and the next one (14:00) is queued on time
    assert resumed.skipped == 2
    assert resumed.schedule.skipped_occurrences == 2
    assert resumed.schedule.status == "active"
    assert queued_times(conn, sid)[0] == at("2026-03-02T14:00")
    assert all(t > at("2026-03-02T13:30") for t in queued_times(conn, sid))


def test_resume_within_the_catch_up_window_fires_the_latest_missed_one(conn, workspace, settings):
    created = at("2026-03-02T09:30")
    sid = recurring.create_schedule(conn, workspace, new_schedule(EVERY_2H), settings,
                                    created).schedule.id  # fmt: skip
    recurring.pause_schedule(conn, workspace, sid, created)
    # resumed at 12:20: 10:00 is older than an hour, 12:00 is not
    result = recurring.resume_schedule(conn, workspace, sid, settings, at("2026-03-02T12:20"))
    assert result.skipped == 1
    assert queued_times(conn, sid)[:2] == [at("2026-03-02T12:00"), at("2026-03-02T14:00")]


def test_pause_resume_and_end_are_idempotent_and_end_is_final(conn, workspace, settings):
    now = at("2026-03-01T00:00")
    sid = recurring.create_schedule(conn, workspace, new_schedule(), settings, now).schedule.id
    assert recurring.pause_schedule(conn, workspace, sid, now).changed
    assert not recurring.pause_schedule(conn, workspace, sid, now).changed
    assert recurring.resume_schedule(conn, workspace, sid, settings, now).changed
    assert not recurring.resume_schedule(conn, workspace, sid, settings, now).changed
    ended = recurring.end_schedule(conn, workspace, sid, now)
    assert ended.schedule.status == "ended"
    assert ended.schedule.ended_reason == "ended by request"
    assert len(ended.cancelled) == 14
    assert not recurring.end_schedule(conn, workspace, sid, now).changed
    for attempt in (
        lambda: recurring.pause_schedule(conn, workspace, sid, now),
        lambda: recurring.resume_schedule(conn, workspace, sid, settings, now),
        lambda: recurring.edit_schedule(conn, workspace, sid, ScheduleChanges(rrule="FREQ=WEEKLY"),
                                        settings, now),
        lambda: recurring.run_now(conn, workspace, sid, settings, now),
    ):  # fmt: skip
        with pytest.raises(ConflictError, match="has ended"):
            attempt()


def test_another_workspaces_schedule_is_not_found(conn, workspace, settings):
    now = at("2026-03-01T00:00")
    sid = recurring.create_schedule(conn, workspace, new_schedule(), settings, now).schedule.id
    other = make_workspace(conn, "Other")
    with pytest.raises(NotFoundError):
        recurring.get_schedule(conn, other, sid)
    with pytest.raises(NotFoundError):
        recurring.pause_schedule(conn, other, sid, now)
    assert recurring.list_schedules(conn, other) == []


def test_list_pages_in_creation_order_and_filters(conn, workspace, settings):
    now = at("2026-03-01T00:00")
    made = [
        recurring.create_schedule(conn, workspace, new_schedule(), settings, now).schedule
        for _ in range(5)
    ]
    recurring.pause_schedule(conn, workspace, made[1].id, now)
    page = recurring.list_schedules(conn, workspace, limit=3)
    rest = recurring.list_schedules(conn, workspace, limit=3, after=page[-1].cursor)
    assert [s.id for s in page + rest] == [s.id for s in made]
    paused = recurring.list_schedules(conn, workspace, status="paused")
    assert [s.id for s in paused] == [made[1].id]


def test_get_with_a_preview_of_the_next_occurrences(conn, workspace, settings):
    now = at("2026-03-05T12:00")
    new = new_schedule("FREQ=WEEKLY;BYDAY=TU;BYHOUR=9;BYMINUTE=0;BYSECOND=0",
                       timezone="America/New_York")  # fmt: skip
    sid = recurring.create_schedule(conn, workspace, new, settings, now).schedule.id
    schedule = recurring.get_schedule(conn, workspace, sid)
    preview = recurring.preview_occurrences(schedule, now, 3)
    assert [o.at for o in preview] == [
        at("2026-03-10T13:00"),  # EDT from the 8th
        at("2026-03-17T13:00"),
        at("2026-03-24T13:00"),
    ]


# ----------------------------------------------------------------------------- run-now


def test_run_now_fires_once_and_the_next_regular_occurrence_is_unchanged(conn, workspace, runtime):
    # Given a daily schedule whose next occurrence is tomorrow at 09:00
    now = datetime.now(UTC)
    settings = runtime.settings
    result = recurring.create_schedule(conn, workspace, new_schedule(dtstart=None), settings, now)
    sid = result.schedule.id
    regular_before = queued_times(conn, sid)
    # When it is run now
    action = recurring.run_now(conn, workspace, sid, settings, now, queues=runtime.queues)
    # Then a one-off linked to the schedule was handed to its queue and fires once
    assert (action.source, action.recurring_schedule_id) == ("run_now", sid)
    assert action.payload == {"report": "daily"}
    dispatched = drain(runtime, "log", wait=1.5)
    assert dispatched.published == 1
    run_tick(conn, runtime.queues, settings)
    assert drain(runtime, "log").published == 0
    assert store.get(conn, workspace, action.id).status == "published"  # type: ignore[union-attr]
    # and the regular occurrences are exactly as they were
    assert queued_times(conn, sid) == regular_before
    assert (
        recurring.preview_occurrences(recurring.get_schedule(conn, workspace, sid), now, 1)[0].at
        == regular_before[0]
    )


# ------------------------------------------------------------------------ failure policy


def test_five_failures_in_a_row_pause_the_schedule_with_the_reason(conn, workspace, settings):
    # Given a daily schedule (14 queued occurrences, all ahead)
    now = datetime.now(UTC)
    new = new_schedule(dtstart=None)
    sid = recurring.create_schedule(conn, workspace, new, settings, now).schedule.id
    queued = [r["id"] for r in rows(conn, sid)]
    # When four occurrences fail, one publishes, then five fail in a row
    for action_id in queued[:4]:
        fail(conn, action_id)
    assert recurring.get_schedule(conn, workspace, sid).consecutive_failures == 4
    publish(conn, queued[4])
    assert recurring.get_schedule(conn, workspace, sid).consecutive_failures == 0
    for action_id in queued[5:9]:
        fail(conn, action_id)
    assert recurring.get_schedule(conn, workspace, sid).status == "active"
    fail(conn, queued[9], "HTTP 410 Gone")
    # Then the fifth in a row paused it, saying why, and its queued occurrences were cancelled
    paused = recurring.get_schedule(conn, workspace, sid)
    assert paused.status == "paused"
    assert paused.consecutive_failures == 5
    assert paused.paused_reason is not None
    assert "after 5 failed occurrences in a row" in paused.paused_reason
    assert "provider_rejected: HTTP 410 Gone" in paused.paused_reason
    assert queued_times(conn, sid) == []
    # and a resume starts counting afresh
    resumed = recurring.resume_schedule(conn, workspace, sid, settings, datetime.now(UTC))
    assert resumed.schedule.consecutive_failures == 0


def test_a_failed_run_now_does_not_count_against_the_schedule(conn, workspace, settings):
    now = datetime.now(UTC)
    new = new_schedule(dtstart=None, max_failures_before_pause=1)
    sid = recurring.create_schedule(conn, workspace, new, settings, now).schedule.id
    fail(conn, recurring.run_now(conn, workspace, sid, settings, now).id)
    schedule = recurring.get_schedule(conn, workspace, sid)
    assert (schedule.status, schedule.consecutive_failures) == ("active", 0)


def test_the_failure_policy_cannot_be_bypassed_by_plain_sql(conn, workspace, settings):
    # The trigger acts on any UPDATE of status, not only the dispatcher's.
    now = at("2026-03-01T00:00")
    new = new_schedule(max_failures_before_pause=2)
    sid = recurring.create_schedule(conn, workspace, new, settings, now).schedule.id
    first, second = (r["id"] for r in rows(conn, sid)[:2])
    for action_id in (first, second):
        conn.execute(
            "update scheduled_actions set status = 'failed', finished_at = now(),"
            " error_code = 'expired' where id = %s",
            (action_id,),
        )
    assert recurring.get_schedule(conn, workspace, sid).status == "paused"


def test_the_unique_index_refuses_a_second_live_row_for_an_occurrence(conn, workspace, settings):
    now = at("2026-03-01T00:00")
    sid = recurring.create_schedule(conn, workspace, new_schedule(), settings, now).schedule.id
    with pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute(
            "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
            " source, recurring_schedule_id) values (%s, 'log', 'reports', %s, 'recurring', %s)",
            (workspace, at("2026-03-01T09:00"), sid),
        )


def test_settings_read_the_recurring_variables():
    settings = Settings.from_env(
        {"TICKWORK_RECURRING_WINDOW_DAYS": "7", "TICKWORK_RECURRING_MIN_INTERVAL_SECONDS": "60"}
    )
    assert (settings.recurring_window_days, settings.recurring_min_interval_seconds) == (7, 60)
