"""What people read: durations in human units, times in UTC, wall times the zone moved."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tickwork.calendar import default_range
from tickwork.local.demo import render
from tickwork.local.receiver import ReceivedWebhook, WebhookReceiver, describe
from tickwork.local.runner import DEV_WEBHOOK_SECRET
from tickwork.platform.queues.memory import InProcessQueue
from tickwork.platform.text import clock, duration, lateness
from tickwork.platform.wallclock import describe_resolution


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.004, "4 ms"),
        (0.9994, "999 ms"),
        (1.25, "1.2 s"),
        (59.96, "1 min"),
        (888.648, "14 min 49 s"),
        (3 * 3600 + 125, "3 h 2 min"),
        (2 * 86400 + 3 * 3600, "2 d 3 h"),
        (-0.002, "2 ms"),
    ],
)
def test_durations_read_as_people_say_them(seconds, text):
    assert duration(seconds) == text


def test_lateness_and_clock():
    assert lateness(0.005) == "late by 5 ms"
    assert lateness(-0.002) == "early by 2 ms"
    assert clock(datetime(2026, 5, 1, 6, 58, 44, tzinfo=UTC)) == "06:58:44.000"
    assert clock(datetime(2026, 5, 1, 8, 58, 44, tzinfo=UTC).timestamp()) == "08:58:44.000"


def test_a_delivery_line_has_both_times_in_utc_and_its_lateness():
    due = datetime(2026, 5, 1, 6, 58, 44, tzinfo=UTC)  # on a whole second
    delivery = ReceivedWebhook(
        "msg_x",
        due.timestamp() + 888.648,
        True,
        {
            "data": {
                "id": "27307ae6-0000",
                "target_key": "primary",
                "thing_id": "t",
                "publish_at": due.isoformat(),
            }
        },
    )
    assert describe(delivery) == (
        "07:13:32.648  webhook 27307ae6  primary  thing=t  due 06:58:44.000"
        "  arrived late by 14 min 49 s"
    )


def test_the_demo_table_says_claimed_not_fired():
    due = datetime(2026, 5, 1, 6, 58, 44, tzinfo=UTC)
    row = {
        "id": "abcdef12-x",
        "thing_id": "demo-1",
        "publish_at": due.isoformat(),
        "status": "published",
        "submitted_at": (due + timedelta(milliseconds=3)).isoformat(),
        "rescheduled_from": None,
    }
    table = render([row], due)
    assert "claimed" in table.splitlines()[0]
    assert "06:58:44.00" in table
    assert "late by 3 ms" in table


def test_spring_forward_is_moved_and_said():
    found = describe_resolution("2027-03-14", "02:30", "America/New_York")
    assert found.rule == "skipped_moved_forward"
    assert found.local == "2027-03-14T03:30:00-04:00"
    assert "moved forward by the 1 h gap" in found.note
    half = describe_resolution("2027-10-03", "02:15", "Australia/Lord_Howe")  # a 30 min shift
    assert half.rule == "skipped_moved_forward"
    assert "30 min gap" in half.note


def test_fall_back_takes_the_first_and_says_so():
    found = describe_resolution("2027-11-07", "01:30", "America/New_York")
    assert found.rule == "repeated_first_occurrence"
    assert found.local == "2027-11-07T01:30:00-04:00"
    assert "UTC offset -0400" in found.note


def test_an_ordinary_wall_time_is_exact():
    found = describe_resolution("2027-06-01", "09:00:00", "Europe/Berlin")
    assert (found.rule, found.local, found.note) == ("exact", "2027-06-01T09:00:00+02:00", "")


def test_calendar_default_range():
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    assert default_range(None, None, now) == (now - timedelta(hours=24), now + timedelta(days=30))
    start = datetime(2027, 1, 1, tzinfo=UTC)
    assert default_range(start, None, now) == (start, start + timedelta(days=31))
    end = datetime(2026, 6, 1, tzinfo=UTC)  # before 24 h ago
    assert default_range(None, end, now) == (end - timedelta(days=31), end)


def test_in_process_redrive_puts_dead_letters_back_with_a_fresh_count():
    t = [1000.0]
    queue = InProcessQueue("webhook", visibility_timeout=1, max_receive_count=1, clock=lambda: t[0])
    queue.send("a")
    assert [m.body for m in queue.receive()] == ["a"]  # received once, never deleted
    t[0] += 2
    assert queue.receive() == []  # past max receives: dead
    assert queue.depth() == {"visible": 0, "delayed": 0, "in_flight": 0, "dead_letters": 1}
    assert queue.redrive() == 1
    assert queue.depth()["visible"] == 1
    again = queue.receive()
    assert [(m.body, m.receive_count) for m in again] == [("a", 1)]
    assert queue.depth() == {"visible": 0, "delayed": 0, "in_flight": 1, "dead_letters": 0}


def test_the_local_receiver_refuses_a_fail_once_webhook_once():

    receiver = WebhookReceiver(DEV_WEBHOOK_SECRET)
    try:
        body = {"data": {"payload": {"fail_once": True}}}
        first = ReceivedWebhook("msg_1", 0.0, True, body)
        assert receiver.answer(first) == 400
        assert receiver.answer(first) == 204  # the retry goes through
        assert receiver.answer(ReceivedWebhook("msg_2", 0.0, False, body)) == 401
        assert receiver.answer(ReceivedWebhook("msg_3", 0.0, True, {})) == 204
    finally:
        receiver.server.server_close()
