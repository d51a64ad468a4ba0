"""Recipients everywhere, on a real Postgres: recurring schedules and schedule intents name a
recipient like one-offs do, so quiet hours and caps apply to the rows they make through the
same policy code; a wall time with no zone is read in the recipient's zone; a recurring
schedule's payload can be rendered per occurrence."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest
from psycopg.rows import dict_row

from tests.conftest import make_workspace
from tests.sequence_helpers import (
    action_row,
    changes_of,
    let_time_come,
    make_engine,
    recipient,
    sent,
)
from tickwork.engine import expander
from tickwork.intents import reconcile
from tickwork.intents import store as intents
from tickwork.intents.store import IntentInput
from tickwork.platform.db import Connection
from tickwork.recipients.model import UnknownRecipientError
from tickwork.recurring import store as recurring
from tickwork.recurring.store import NewSchedule, ScheduleChanges
from tickwork.rules.templating import InvalidTemplateError
from tickwork.runtime import Runtime

TOKYO = ZoneInfo("Asia/Tokyo")
NIGHTS = [{"start": "21:00", "end": "08:00"}]


@pytest.fixture
def engine(database_url: str) -> Iterator[Runtime]:
    yield from make_engine(database_url)


def occurrence_rows(conn: Connection, schedule_id: UUID) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "select * from scheduled_actions where recurring_schedule_id = %s"
            " and status <> 'cancelled' order by coalesce(original_publish_at, publish_at)",
            (schedule_id,),
        ).fetchall()


def sms_schedule(rrule: str, **fields: Any) -> NewSchedule:
    values: dict[str, Any] = {
        "action_type": "sms", "target_key": "phone", "rrule": rrule, "timezone": "Asia/Tokyo",
        "timezone_from": "recipient", "payload": {"text": "good night"}, "recipient_id": "ann",
    }  # fmt: skip
    values.update(fields)
    return NewSchedule(**values)


# --------------------------------------------------------------------- recurring schedules


def test_occurrences_inside_a_tokyo_recipients_quiet_hours_move_like_one_offs(
    conn, workspace, engine
):
    recipient(conn, engine, workspace, timezone="Asia/Tokyo", quiet_hours=NIGHTS)
    now = datetime.now(UTC)
    # Two occurrences a night, both inside 21:00-08:00 Tokyo.
    rule = "FREQ=DAILY;BYHOUR=22,23;BYMINUTE=30;BYSECOND=0"
    result = recurring.create_schedule(conn, workspace, sms_schedule(rule), engine.settings, now)
    found = occurrence_rows(conn, result.schedule.id)
    assert len(found) >= 2 * (engine.settings.recurring_window_days - 1)
    for row in found:
        asked = row["original_publish_at"].astimezone(TOKYO)
        assert asked.time() in (time(22, 30), time(23, 30))
        # at the end of the window: 08:00 the next morning, Tokyo
        assert row["publish_at"] == datetime.combine(
            asked.date() + timedelta(days=1), time(8), tzinfo=TOKYO
        )
        assert (row["recipient_id"], row["transactional"]) == ("ann", False)
    # Two occurrences moved to the same 08:00 stay two rows (one per occurrence).
    # Which night has both depends on the hour the test runs, so count per 08:00.
    per_morning = Counter(row["publish_at"] for row in found)
    assert max(per_morning.values()) == 2
    [change] = changes_of(conn, found[0]["id"])
    assert (change["kind"], change["old_at"]) == ("quiet_hours", found[0]["original_publish_at"])
    # Expanding again creates nothing twice.
    again = recurring.materialize(
        conn, recurring.get_schedule(conn, workspace, result.schedule.id),
        recurring.Rule(result.schedule.recurrence), engine.settings,
        now + timedelta(hours=2), recurring.Limits.of(engine.settings),
    )  # fmt: skip
    assert len(occurrence_rows(conn, result.schedule.id)) == len(found) + len(again.created)
    assert again.conflicts == 0


def test_a_transactional_schedule_is_not_moved(conn, workspace, engine):
    recipient(conn, engine, workspace, timezone="Asia/Tokyo", quiet_hours=NIGHTS)
    rule = "FREQ=DAILY;BYHOUR=23;BYMINUTE=30;BYSECOND=0"
    new = sms_schedule(rule, transactional=True)
    result = recurring.create_schedule(conn, workspace, new, engine.settings, datetime.now(UTC))
    for row in occurrence_rows(conn, result.schedule.id):
        assert row["original_publish_at"] is None
        assert row["publish_at"].astimezone(TOKYO).time() == time(23, 30)
        assert row["transactional"] is True


def test_a_cap_on_the_recipient_applies_to_occurrences(conn, workspace, engine):
    recipient(conn, engine, workspace, timezone="Asia/Tokyo", caps={"sms": 1})
    rule = "FREQ=DAILY;BYHOUR=10,14;BYMINUTE=0;BYSECOND=0"
    result = recurring.create_schedule(
        conn, workspace, sms_schedule(rule), engine.settings, datetime.now(UTC)
    )
    # Two occurrences of one Tokyo day (today's 10:00 may already have passed).
    by_day: dict[object, list[Any]] = {}
    for row in occurrence_rows(conn, result.schedule.id):
        by_day.setdefault(row["publish_at"].astimezone(TOKYO).date(), []).append(row["id"])
    first, second = next(ids for ids in by_day.values() if len(ids) == 2)
    let_time_come(conn, engine, [first], "sms")
    let_time_come(conn, engine, [second], "sms")
    assert sent(engine) == {first: 1}
    deferred = action_row(conn, second)
    assert deferred["status"] == "queued"
    assert deferred["next_attempt_at"].astimezone(TOKYO).time() == time(0, 0)
    assert changes_of(conn, second)[0]["reason"] == "the recipient's cap of 1 sms a day is reached"


def test_an_unknown_or_foreign_recipient_is_refused_and_nothing_is_written(conn, workspace, engine):
    other = make_workspace(conn)
    recipient(conn, engine, other, "bob")
    for name in ("nobody", "bob"):
        with pytest.raises(UnknownRecipientError, match="register it"):
            recurring.create_schedule(
                conn, workspace, sms_schedule("FREQ=DAILY", recipient_id=name),
                engine.settings, datetime.now(UTC),
            )  # fmt: skip
    assert conn.execute("select count(*) from recurring_schedules").fetchone() == (0,)


def test_occurrence_values_are_rendered_into_each_payload(conn, workspace, engine):
    now = datetime.now(UTC)
    dtstart = (
        (now - timedelta(days=3))
        .astimezone(TOKYO)
        .replace(hour=9, minute=0, second=0, microsecond=0, tzinfo=None)
    )
    new = sms_schedule(
        "FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSECOND=0", recipient_id=None, dtstart=dtstart,
        render_payload=True, timezone_from="given",
        payload={"text": "Day {{ occurrence.index }}: {{ occurrence.local_date }}"
                         " {{ occurrence.local_time }} {{ occurrence.timezone }}",
                 "at": "{{ occurrence.scheduled_at }}", "kept": 7},
    )  # fmt: skip
    result = recurring.create_schedule(conn, workspace, new, engine.settings, now)
    found = occurrence_rows(conn, result.schedule.id)
    assert found
    for row in found:
        at = row["publish_at"]
        local = at.astimezone(TOKYO)
        index = (local.date() - dtstart.date()).days + 1  # dtstart's occurrence is 1
        assert row["payload"] == {
            "text": f"Day {index}: {local.date().isoformat()} 09:00:00 Asia/Tokyo",
            "at": at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "kept": 7,
        }
    # The schedule keeps the template.
    assert result.schedule.payload_template["text"].startswith("Day {{")


def test_a_template_that_does_not_compile_or_render_is_refused_at_create(conn, workspace, engine):
    for payload in ({"text": "{{ occurrence.index "}, {"text": "{{ occurrence.weekday }}"}):
        with pytest.raises(InvalidTemplateError):
            recurring.create_schedule(
                conn, workspace,
                sms_schedule("FREQ=DAILY", recipient_id=None, render_payload=True,
                             payload=payload),
                engine.settings, datetime.now(UTC),
            )  # fmt: skip
    # Without render_payload, braces are text like any other.
    plain = sms_schedule("FREQ=DAILY", recipient_id=None, payload={"text": "{{ x"})
    recurring.create_schedule(conn, workspace, plain, engine.settings, datetime.now(UTC))


# -------------------------------------------------------------------------------- intents


def declare_sms(conn, workspace, engine, **fields: Any):
    values: dict[str, Any] = {
        "action_type": "sms", "targets": ["phone"], "payload": {"text": "table ready"},
        "recipient_id": "ann",
    }  # fmt: skip
    values.update(fields)
    return intents.declare_intent(
        conn, workspace, "booking-1", IntentInput(**values), engine.settings, datetime.now(UTC)
    )


def tokyo_tomorrow() -> str:
    return (datetime.now(UTC).astimezone(TOKYO).date() + timedelta(days=1)).isoformat()


def test_an_intent_inside_a_tokyo_recipients_quiet_hours_moves_like_a_one_off(
    conn, workspace, engine
):
    recipient(conn, engine, workspace, timezone="Asia/Tokyo", quiet_hours=NIGHTS)
    day = tokyo_tomorrow()
    result = declare_sms(conn, workspace, engine, wall_date=day, wall_time="23:30")
    asked = datetime.fromisoformat(f"{day}T23:30").replace(tzinfo=TOKYO)  # the recipient's zone
    assert (result.instant, result.zone, result.timezone_from) == (asked, "Asia/Tokyo", "recipient")
    [row] = result.active
    assert (row.publish_at, row.original_publish_at) == (
        asked + timedelta(hours=8, minutes=30),
        asked,
    )
    assert (row.recipient_id, row.transactional) == ("ann", False)
    # Reconciling again leaves the moved row alone: it was asked for at the intent's time.
    assert reconcile.reconcile_thing(conn, workspace, "booking-1", engine.settings).moved == 0
    # A zone given wins over the recipient's.
    given = declare_sms(conn, workspace, engine, wall_date=day, wall_time="23:30", timezone="UTC")
    assert (given.zone, given.timezone_from) == ("UTC", "given")
    assert given.reconciled.moved == 1


def test_an_intent_follows_its_recipients_zone(conn, workspace, engine):
    recipient(conn, engine, workspace, timezone="Asia/Tokyo")
    day = tokyo_tomorrow()
    declare_sms(conn, workspace, engine, wall_date=day, wall_time="12:00")
    recipient(conn, engine, workspace, timezone="Europe/Paris")
    summary = reconcile.reconcile_changed(conn, engine.settings)
    assert summary.moved == 1
    view = intents.get_intent(conn, workspace, "booking-1")
    assert view is not None
    [row] = view.active
    paris = ZoneInfo("Europe/Paris")
    assert row.publish_at == datetime.fromisoformat(f"{day}T12:00").replace(tzinfo=paris)


def test_an_intent_to_a_recipient_counts_against_their_cap(conn, workspace, engine):
    recipient(conn, engine, workspace, caps={"sms": 1})
    soon = datetime.now(UTC) + timedelta(minutes=5)
    first = declare_sms(conn, workspace, engine, publish_at=soon)
    assert first.timezone_from is None  # an instant: no zone read
    other = intents.declare_intent(
        conn, workspace, "booking-2",
        IntentInput(action_type="sms", targets=["phone"], publish_at=soon, recipient_id="ann"),
        engine.settings, datetime.now(UTC),
    )  # fmt: skip
    ids = [first.active[0].id, other.active[0].id]
    for action_id in ids:
        let_time_come(conn, engine, [action_id], "sms")
    assert sent(engine) == {ids[0]: 1}
    assert action_row(conn, ids[1])["status"] == "queued"


def test_an_intent_to_an_unknown_recipient_is_refused(conn, workspace, engine):
    with pytest.raises(UnknownRecipientError):
        declare_sms(conn, workspace, engine, wall_date=tokyo_tomorrow(), wall_time="12:00")
    assert conn.execute("select count(*) from schedule_intents").fetchone() == (0,)


def test_an_edit_that_names_a_recipient_moves_the_future_occurrences(conn, workspace, engine):
    rule = "FREQ=DAILY;BYHOUR=23;BYMINUTE=30;BYSECOND=0"
    new = sms_schedule(rule, recipient_id=None, timezone_from="given")
    now = datetime.now(UTC)
    result = recurring.create_schedule(conn, workspace, new, engine.settings, now)
    assert all(r["original_publish_at"] is None for r in occurrence_rows(conn, result.schedule.id))
    with pytest.raises(UnknownRecipientError):
        recurring.edit_schedule(
            conn, workspace, result.schedule.id, ScheduleChanges(recipient_id="ann"),
            engine.settings, now,
        )  # fmt: skip
    recipient(conn, engine, workspace, timezone="Asia/Tokyo", quiet_hours=NIGHTS)
    edited = recurring.edit_schedule(
        conn, workspace, result.schedule.id, ScheduleChanges(recipient_id="ann"),
        engine.settings, now,
    )  # fmt: skip
    assert edited.schedule.recipient_id == "ann"
    assert edited.cancelled
    assert edited.created
    for row in occurrence_rows(conn, result.schedule.id):
        assert row["recipient_id"] == "ann"
        assert row["publish_at"].astimezone(TOKYO).time() == time(8, 0)


def test_a_schedule_whose_recipient_is_gone_is_paused_by_the_expander(conn, workspace, engine):
    recipient(conn, engine, workspace, timezone="Asia/Tokyo")
    now = datetime.now(UTC)
    result = recurring.create_schedule(
        conn, workspace, sms_schedule("FREQ=DAILY"), engine.settings, now
    )
    conn.execute("delete from recipients")
    summary = expander.expand_all(conn, engine.settings, now=now + timedelta(days=2))
    assert summary.paused == 1
    paused = recurring.get_schedule(conn, workspace, result.schedule.id)
    assert paused.status == "paused"
    assert paused.paused_reason is not None
    assert "no recipient 'ann'" in paused.paused_reason


def test_indexes_go_on_after_a_pause_and_a_resume(conn, workspace, engine):
    now = datetime.now(UTC)
    dtstart = (now - timedelta(days=3)).replace(hour=9, minute=0, second=0, microsecond=0)
    new = sms_schedule(
        "FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSECOND=0", recipient_id=None, timezone="UTC",
        timezone_from="given", dtstart=dtstart.replace(tzinfo=None), render_payload=True,
        payload={"n": "{{ occurrence.index }}"}, catch_up_window_seconds=0,
    )  # fmt: skip
    created = recurring.create_schedule(conn, workspace, new, engine.settings, now)
    schedule_id = created.schedule.id
    recurring.pause_schedule(conn, workspace, schedule_id, now + timedelta(hours=1))
    resumed = recurring.resume_schedule(
        conn, workspace, schedule_id, engine.settings, now + timedelta(days=2, hours=1)
    )
    assert resumed.skipped >= 1  # missed while paused: skipped, still counted
    live = [r for r in occurrence_rows(conn, schedule_id) if r["status"] == "queued"]
    assert live
    for row in live:
        expected = (row["publish_at"].date() - dtstart.date()).days + 1
        assert row["payload"] == {"n": str(expected)}


def test_an_edit_can_turn_rendering_on(conn, workspace, engine):
    now = datetime.now(UTC)
    dtstart = (now - timedelta(days=2)).replace(hour=9, minute=0, second=0, microsecond=0)
    new = sms_schedule(
        "FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSECOND=0", recipient_id=None, timezone="UTC",
        timezone_from="given", dtstart=dtstart.replace(tzinfo=None),
        payload={"n": "{{ occurrence.index }}"},
    )  # fmt: skip
    created = recurring.create_schedule(conn, workspace, new, engine.settings, now)
    first = occurrence_rows(conn, created.schedule.id)[0]
    assert first["payload"] == {"n": "{{ occurrence.index }}"}  # sent as it is
    edited = recurring.edit_schedule(
        conn, workspace, created.schedule.id, ScheduleChanges(render_payload=True),
        engine.settings, now,
    )  # fmt: skip
    assert edited.schedule.render_payload is True
    live = [r for r in occurrence_rows(conn, created.schedule.id) if r["status"] == "queued"]
    assert live
    for row in live:
        expected = (row["publish_at"].date() - dtstart.date()).days + 1
        assert row["payload"] == {"n": str(expected)}
