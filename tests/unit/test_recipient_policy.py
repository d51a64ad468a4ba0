"""Quiet hours, next allowed slots and drip step times: the arithmetic, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tickwork.platform.config import ActionTypeConfig, Settings
from tickwork.platform.errors import InputError
from tickwork.recipients.model import (
    Recipient,
    allowed_at,
    next_day_slot,
    parse_caps,
    parse_quiet_hours,
    quiet_end,
)
from tickwork.sequences.model import CampaignInput, step_time, validate_campaign

TOKYO = ZoneInfo("Asia/Tokyo")
NEW_YORK = ZoneInfo("America/New_York")
SETTINGS = Settings(action_types={"sms": ActionTypeConfig(provider="log")})


def person(zone: str, windows: list[dict[str, object]]) -> Recipient:
    return Recipient("ann", zone, parse_quiet_hours(windows))


def test_a_night_window_runs_past_midnight():
    ann = person("Asia/Tokyo", [{"start": "21:00", "end": "08:00"}])
    for hour, quiet in ((20, False), (21, True), (23, True), (3, True), (8, False)):
        at = datetime(2027, 6, 1, hour, 30 if hour == 23 else 0, tzinfo=TOKYO)
        assert (quiet_end(at, ann) is not None) == quiet, hour
    assert allowed_at(datetime(2027, 6, 1, 23, 30, tzinfo=TOKYO), ann) == datetime(
        2027, 6, 2, 8, 0, tzinfo=TOKYO
    )


def test_windows_on_some_days_and_adjacent_windows_chain():
    ann = person(
        "Asia/Tokyo",
        [{"days": ["fri"], "start": "21:00", "end": "08:00"},
         {"days": ["sat"], "start": "08:00", "end": "10:00"}],
    )  # fmt: skip
    friday_night = datetime(2027, 6, 4, 23, 0, tzinfo=TOKYO)  # a Friday
    assert allowed_at(friday_night, ann) == datetime(2027, 6, 5, 10, 0, tzinfo=TOKYO)
    thursday_night = datetime(2027, 6, 3, 23, 0, tzinfo=TOKYO)
    assert allowed_at(thursday_night, ann) == thursday_night


def test_a_window_across_the_spring_forward_gap_ends_at_its_wall_time():
    ann = person("America/New_York", [{"start": "01:00", "end": "04:00"}])
    inside = datetime(2027, 3, 14, 6, 30, tzinfo=UTC)  # 01:30 EST
    assert allowed_at(inside, ann) == datetime(2027, 3, 14, 4, 0, tzinfo=NEW_YORK)
    assert allowed_at(inside, ann) - inside == timedelta(hours=1, minutes=30)  # an hour skipped


def test_the_next_day_slot_starts_at_local_midnight_out_of_quiet_hours():
    free = person("America/New_York", [])
    late = datetime(2027, 3, 13, 22, 0, tzinfo=NEW_YORK)
    assert next_day_slot(late, free) == datetime(2027, 3, 14, 0, 0, tzinfo=NEW_YORK)
    nights = person("America/New_York", [{"start": "22:00", "end": "07:00"}])
    assert next_day_slot(late, nights) == datetime(2027, 3, 14, 7, 0, tzinfo=NEW_YORK)


@pytest.mark.parametrize(
    ("windows", "field"),
    [
        ([{"start": "8", "end": "09:00"}], "quiet_hours[0].start"),
        ([{"start": "08:00"}], "quiet_hours[0].end"),
        ([{"days": [], "start": "08:00", "end": "09:00"}], "quiet_hours[0].days"),
        ([{"start": "08:00", "end": "09:00", "tz": "UTC"}], "quiet_hours[0]"),
        ([{"start": "00:00", "end": "00:00"}], "quiet_hours"),
    ],
)
def test_bad_quiet_hours_name_the_field(windows, field):
    with pytest.raises(InputError) as caught:
        parse_quiet_hours(windows)
    assert caught.value.field == field


def test_caps_name_a_known_channel_and_a_whole_number():
    assert parse_caps({"sms": 2}, SETTINGS) == {"sms": 2}
    for bad, field in (({"fax": 1}, "caps.fax"), ({"sms": True}, "caps.sms"),
                       ({"sms": 0}, "caps.sms")):  # fmt: skip
        with pytest.raises(InputError) as caught:
            parse_caps(bad, SETTINGS)
        assert caught.value.field == field


def steps(*waits: dict[str, object]):
    given = CampaignInput(
        "c",
        [{"wait": w, "action": {"action_type": "sms", "target_key": "t", "payload": {}}}
         for w in waits],
    )  # fmt: skip
    return validate_campaign(given, SETTINGS)[0]


def test_day_and_local_time_steps_keep_their_wall_time_across_dst():
    start = datetime(2027, 3, 12, 12, 0, tzinfo=UTC)
    day0, day2 = steps({"day": 0, "at": "09:00"}, {"day": 2, "at": "09:00"})
    # starts 07:00 EST: day 0 at 09:00 EST, day 2 at 09:00 EDT (the clocks went forward)
    assert step_time(day0, start, start, NEW_YORK) == datetime(2027, 3, 12, 14, 0, tzinfo=UTC)
    assert step_time(day2, start, start, NEW_YORK) == datetime(2027, 3, 14, 13, 0, tzinfo=UTC)


def test_a_delay_step_counts_from_the_previous_send_and_a_day_step_is_never_earlier():
    start = datetime(2027, 3, 12, 12, 0, tzinfo=UTC)
    delay, day1 = steps({"delay_seconds": 3600}, {"day": 1, "at": "09:00"})
    sent = start + timedelta(days=3)
    assert step_time(delay, start, sent, NEW_YORK) == sent + timedelta(hours=1)
    assert step_time(day1, start, sent, NEW_YORK) == sent  # day 1 has passed: at once
