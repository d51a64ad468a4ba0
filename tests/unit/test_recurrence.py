"""Recurrence rules expanded in the schedule's own zone: DST, the gap/overlap rule, EXDATE and
RDATE, the limits, and the catch-up plan. No I/O."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from dateutil.rrule import rrulestr

from tickwork.platform.errors import InvalidRecurrenceError, InvalidTimeError, InvalidTimezoneError
from tickwork.platform.wallclock import resolve_wall_time
from tickwork.recurring.recurrence import Recurrence, Rule, plan, validate

DAILY_9 = "RRULE:FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSECOND=0"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def rule(text: str, dtstart: str, zone: str, until: datetime | None = None) -> Rule:
    return Rule(Recurrence(text, datetime.fromisoformat(dtstart), zone, until))


def checked(text: str, dtstart: str, zone: str, now: datetime, **limits: int) -> Rule:
    values = {"min_interval_seconds": 300, "horizon_days": 3650, "max_past_days": 366}
    values.update(limits)
    return validate(Recurrence(text, datetime.fromisoformat(dtstart), zone), now, **values)


# ------------------------------------------------------------------------------------ DST

# zone, the day of a transition in 2026, UTC offset of 09:00 the day before and on the day
TRANSITIONS = [
    ("America/New_York", "2026-03-08", timedelta(hours=-5), timedelta(hours=-4)),
    ("America/New_York", "2026-11-01", timedelta(hours=-4), timedelta(hours=-5)),
    ("Europe/Berlin", "2026-03-29", timedelta(hours=1), timedelta(hours=2)),
    ("Europe/Berlin", "2026-10-25", timedelta(hours=2), timedelta(hours=1)),
    ("Australia/Sydney", "2026-04-05", timedelta(hours=11), timedelta(hours=10)),
    ("Australia/Sydney", "2026-10-04", timedelta(hours=10), timedelta(hours=11)),
    ("Australia/Lord_Howe", "2026-04-05", timedelta(hours=11), timedelta(hours=10, minutes=30)),
    ("Australia/Lord_Howe", "2026-10-04", timedelta(hours=10, minutes=30), timedelta(hours=11)),
]


@pytest.mark.parametrize(("zone", "day", "offset_before", "offset_on"), TRANSITIONS)
def test_daily_nine_oclock_stays_nine_local_and_matches_dateutil(
    zone, day, offset_before, offset_on
):
    # Given "every day at 09:00" in the zone, from well before a DST transition
    tz = ZoneInfo(zone)
    transition = date.fromisoformat(day)
    start = datetime.combine(transition - timedelta(days=10), time(0, 0))
    recurrence = rule(DAILY_9, start.isoformat(), zone)
    # When the three weeks around the transition are expanded
    after = datetime.combine(transition - timedelta(days=7), time(0), tzinfo=tz)
    before = datetime.combine(transition + timedelta(days=7), time(23, 59), tzinfo=tz)
    found = recurrence.between(after, before).occurrences
    # Then they are exactly what dateutil gives for the rule in that zone
    reference = rrulestr(DAILY_9, dtstart=start.replace(tzinfo=tz)).between(after, before)
    assert [o.at for o in found] == [r.astimezone(UTC) for r in reference]
    assert len(found) == 15
    # and every one is at 09:00 local, while the UTC offset changes on the transition day
    assert all(o.at.astimezone(tz).time() == time(9, 0) for o in found)
    offsets = {o.at.astimezone(tz).date(): o.at.astimezone(tz).utcoffset() for o in found}
    assert offsets[transition - timedelta(days=1)] == offset_before
    assert offsets[transition] == offset_on
    assert all(
        offset == (offset_before if d < transition else offset_on) for d, offset in offsets.items()
    )


def test_weekly_tuesday_nine_new_york_moves_in_utc_not_in_local_time():
    recurrence = rule(
        "FREQ=WEEKLY;BYDAY=TU;BYHOUR=9;BYMINUTE=0", "2026-02-01T00:00", "America/New_York"
    )
    found = recurrence.upcoming(utc("2026-02-28T00:00"), 3)
    assert [o.at for o in found] == [
        utc("2026-03-03T14:00"),  # EST
        utc("2026-03-10T13:00"),  # EDT since the 8th
        utc("2026-03-17T13:00"),
    ]
    assert {o.local.time() for o in found} == {time(9, 0)}


# zone, local day, wall time the rule asks for, expected instant (by wallclock's rule)
GAPS_AND_OVERLAPS = [
    ("America/New_York", "2026-03-08", "02:30", "2026-03-08T07:30"),  # gap → 03:30 EDT
    ("America/New_York", "2026-11-01", "01:30", "2026-11-01T05:30"),  # twice → first (EDT)
    ("Europe/Berlin", "2026-03-29", "02:30", "2026-03-29T01:30"),  # gap → 03:30 CEST
    ("Australia/Sydney", "2026-10-04", "02:30", "2026-10-03T16:30"),  # gap → 03:30 AEDT
    ("Australia/Lord_Howe", "2026-10-04", "02:15", "2026-10-03T15:45"),  # 30-min gap → 02:45
    ("Australia/Lord_Howe", "2026-04-05", "01:45", "2026-04-04T14:45"),  # twice → first (+11)
]


@pytest.mark.parametrize(("zone", "day", "clock", "expected"), GAPS_AND_OVERLAPS)
def test_a_wall_time_the_zone_skips_or_repeats_follows_the_documented_rule(
    zone, day, clock, expected
):
    # Given a daily rule at a wall time that on this day does not exist, or exists twice
    hour, minute = map(int, clock.split(":"))
    recurrence = rule(f"FREQ=DAILY;BYHOUR={hour};BYMINUTE={minute}", "2026-01-01T00:00", zone)
    the_day = date.fromisoformat(day)
    # When the day is expanded
    after = datetime.combine(the_day - timedelta(days=1), time(12), tzinfo=ZoneInfo(zone))
    found = recurrence.between(after, after + timedelta(days=1)).occurrences
    # Then the occurrence fires at the instant wallclock.resolve_wall_time gives, once
    assert [o.at for o in found] == [utc(expected)]
    assert found[0].at == resolve_wall_time(the_day, time(hour, minute), ZoneInfo(zone))
    assert found[0].local == datetime.combine(the_day, time(hour, minute))


def test_a_five_minute_rule_through_spring_forward_fires_once_per_instant():
    # 02:00-02:55 do not exist in New York on 2026-03-08: they land on 03:00-03:55 EDT
    recurrence = rule("FREQ=MINUTELY;INTERVAL=5", "2026-03-07T00:00", "America/New_York")
    found = recurrence.between(utc("2026-03-08T06:00"), utc("2026-03-08T08:00")).occurrences
    instants = [o.at for o in found]
    assert instants == sorted(set(instants))
    assert len(instants) == 24  # two hours of instants, every 5 minutes: none twice


# ----------------------------------------------------------------------- EXDATE, RDATE, UNTIL


def test_exdate_rdate_and_until_in_every_form():
    text = "\n".join(
        [
            "RRULE:FREQ=DAILY;BYHOUR=9;BYMINUTE=0;UNTIL=20260310T235959",  # local, inclusive
            "EXDATE:20260302T090000",  # a local wall time
            "EXDATE;TZID=Europe/London:20260303T140000",  # 09:00 New York, as London sees it
            "EXDATE:20260304T140000Z",  # an instant
            "EXDATE;VALUE=DATE:20260305",  # a whole day
            "RDATE:20260306T120000,20260307T090000",  # one extra, one already there
            "RDATE;VALUE=DATE:20260320",  # a day: at dtstart's time
        ]
    )
    recurrence = rule(text, "2026-03-01T09:00", "America/New_York")
    found = recurrence.between(utc("2026-02-28T00:00"), utc("2026-04-01T00:00")).occurrences
    assert [o.local.isoformat() for o in found] == [
        "2026-03-01T09:00:00",
        "2026-03-06T09:00:00",
        "2026-03-06T12:00:00",
        "2026-03-07T09:00:00",
        "2026-03-08T09:00:00",
        "2026-03-09T09:00:00",
        "2026-03-10T09:00:00",
        "2026-03-20T09:00:00",
    ]


def test_until_in_utc_is_an_instant_and_a_date_until_is_the_whole_day():
    zone = "Australia/Sydney"
    # 09:00 Sydney on 3 March is 22:00 UTC on 2 March
    by_instant = rule("FREQ=DAILY;BYHOUR=9;UNTIL=20260302T220000Z", "2026-03-01T00:00", zone)
    by_day = rule("FREQ=DAILY;BYHOUR=9;UNTIL=20260303", "2026-03-01T00:00", zone)
    window = (utc("2026-02-01T00:00"), utc("2026-04-01T00:00"))
    assert [o.local.day for o in by_instant.between(*window).occurrences] == [1, 2, 3]
    assert [o.local.day for o in by_day.between(*window).occurrences] == [1, 2, 3]


def test_an_exdate_in_utc_removes_a_spring_forward_occurrence_at_its_real_instant():
    text = "FREQ=DAILY;BYHOUR=2;BYMINUTE=30\nEXDATE:20260308T073000Z"
    recurrence = rule(text, "2026-03-07T00:00", "America/New_York")
    found = recurrence.between(utc("2026-03-07T00:00"), utc("2026-03-10T00:00")).occurrences
    assert [o.local.day for o in found] == [7, 9]


def test_the_schedule_until_stops_the_rule():
    recurrence = rule(DAILY_9, "2026-03-01T00:00", "UTC", until=utc("2026-03-03T09:00"))
    found = recurrence.between(utc("2026-03-01T00:00"), utc("2026-04-01T00:00")).occurrences
    assert [o.at for o in found] == [utc(f"2026-03-0{d}T09:00") for d in (1, 2, 3)]
    assert recurrence.next_after(utc("2026-03-03T09:00")) is None


def test_a_rule_with_a_schedule_until_passes_validation_at_once():
    # Past `until` every occurrence is excluded: the floor check must stop there, not walk
    # the endless rule to the year 9999 (which ran out the budget: "too costly").
    until = NOW + timedelta(days=30)
    found = validate(Recurrence("FREQ=DAILY", datetime(2026, 3, 2, 9), "UTC", until), NOW,
                     min_interval_seconds=300, horizon_days=3650, max_past_days=366)  # fmt: skip
    assert found.walls_after(found.dtstart, found.dtstart + timedelta(days=3650), 500) == [
        datetime(2026, 3, 2, 9) + timedelta(days=n) for n in range(30)
    ]


# --------------------------------------------------------------------------------- limits

NOW = utc("2026-03-01T12:00")

# rule, what the error says
REFUSED = [
    ("FREQ=SECONDLY", "1 s apart"),
    ("FREQ=MINUTELY;INTERVAL=4", "240 s apart"),
    ("FREQ=DAILY;BYHOUR=9;BYMINUTE=0,1", "60 s apart"),
    ("FREQ=DAILY;COUNT=3;UNTIL=20270101T000000Z", "both COUNT and UNTIL"),
    ("FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30", "selects no date"),
    ("FREQ=DAILY;BYMONTH=4;BYMONTHDAY=31", "selects no date"),
    ("FREQ=DAILY;UNTIL=20260201T000000Z", "no occurrence"),
    ("FREQ=DAILY;COUNT=3", "no occurrence"),  # dtstart a month ago: all three are past
    ("FREQ=MINUTELY;INTERVAL=7;BYDAY=MO;BYHOUR=9;BYMINUTE=0", "too costly"),
    ("FREQ=SOMETIMES", "cannot be read"),
    ("FREQ=DAILY;BYHOUR=25", "BYHOUR value '25' must be a whole number from 0 to 23"),
    ("FREQ=HOURLY;BYHOUR=233", "BYHOUR value '233'"),
    ("FREQ=HOURLY;BYMINUTE=100000000000000000000", "BYMINUTE value"),
    ("FREQ=MINUTELY;BYSECOND=-329", "BYSECOND value '-329'"),
    ("FREQ=MONTHLY;BYMONTHDAY=0", "from -31 to 31, not 0"),
    ("FREQ=DAILY;INTERVAL=0", "INTERVAL value '0'"),
    ("FREQ=WEEKLY;BYEASTER=304", "BYEASTER value '304'"),
    ("FREQ=MONTHLY;BYDAY=54SU", "ordinal must be from 1 to 53"),
    ("FREQ=MONTHLY;BYDAY=MO,53SU", "cannot be evaluated"),  # dateutil fails on it
    ("FREQ=DAILY;UNTIL=99991231T235959Z", "out of range"),
    ("RRULE:FREQ=DAILY\nRDATE:00010101T000000Z", "out of range"),
    ("FREQ=DAILY;FOO=1", "cannot be read"),
    ("every tuesday", "cannot read the line"),
    ("BYDAY=TU", "needs FREQ"),
    ("", "empty"),
    ("DTSTART:20260101T090000\nRRULE:FREQ=DAILY", "DTSTART is not part of the rule"),
    ("RRULE:FREQ=DAILY\nEXRULE:FREQ=WEEKLY", "EXRULE"),
    ("RRULE:FREQ=DAILY\nRRULE:FREQ=WEEKLY", "only one RRULE"),
    ("RRULE:FREQ=DAILY\nEXDATE:2026-03-05", "not a date"),
    ("RRULE:FREQ=DAILY\nEXDATE;TZID=Mars/Olympus:20260305T090000", "not an IANA time zone"),
    ("FREQ=DAILY;COUNT=1000000", "COUNT must be"),
]


@pytest.mark.parametrize(("text", "says"), REFUSED)
def test_a_bad_rule_is_refused_with_a_reason(text, says):
    with pytest.raises(InvalidRecurrenceError, match=says) as raised:
        checked(text, "2026-02-01T09:00", "Europe/Berlin", NOW)
    assert raised.value.field == "rrule"
    assert raised.value.code == "invalid_recurrence"


def test_the_floor_is_configurable():
    assert checked(
        "FREQ=SECONDLY;INTERVAL=3", "2026-03-01T12:00", "UTC", NOW, min_interval_seconds=3
    )
    with pytest.raises(InvalidRecurrenceError, match="3 s apart"):
        checked("FREQ=SECONDLY;INTERVAL=3", "2026-03-01T12:00", "UTC", NOW, min_interval_seconds=4)


def test_the_floor_counts_wall_time_so_dst_does_not_trip_it():
    # At fall back, 01:55 EDT and 01:00 "again" are never both used (fold=0), and the spring
    # gap merges instants; the rule itself still fires every 5 minutes of wall time.
    assert checked("FREQ=MINUTELY;INTERVAL=5", "2026-10-31T00:00", "America/New_York",
                   utc("2026-10-31T12:00"))  # fmt: skip


def test_an_unknown_zone_an_aware_dtstart_and_a_past_until_are_refused():
    with pytest.raises(InvalidTimezoneError):
        checked(DAILY_9, "2026-03-01T00:00", "Europe/Atlantis", NOW)
    with pytest.raises(InvalidTimeError, match="without an offset"):
        Rule(Recurrence(DAILY_9, datetime(2026, 3, 1, tzinfo=UTC), "UTC"))
    with pytest.raises(InvalidTimeError, match="until"):
        validate(Recurrence(DAILY_9, datetime(2026, 3, 1), "UTC", until=NOW - timedelta(days=1)),
                 NOW, min_interval_seconds=300, horizon_days=3650, max_past_days=366)  # fmt: skip
    # a dtstart too far back is a limit of the schedule, as the rule's own are
    with pytest.raises(InvalidRecurrenceError, match="days in the past"):
        checked(DAILY_9, "2024-01-01T00:00", "UTC", NOW)


# ----------------------------------------------------------------------- anchor and plan


@pytest.mark.parametrize(
    "text",
    [
        "FREQ=WEEKLY;INTERVAL=2;BYDAY=TU,TH;BYHOUR=9;BYMINUTE=30",
        "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=17",
        "FREQ=MINUTELY;INTERVAL=35",
        "FREQ=MONTHLY;INTERVAL=2",  # implicit BYMONTHDAY=31 from dtstart
    ],
)
def test_expanding_from_the_anchor_gives_what_expanding_from_dtstart_gives(text):
    # Given a rule expanded window by window, each from the anchor the previous one left
    recurrence = rule(text, "2026-01-31T08:15", "Australia/Lord_Howe")
    start = utc("2026-02-01T00:00")
    anchored, anchor = [], None
    for day in range(0, 120, 7):
        window = recurrence.between(
            start + timedelta(days=day), start + timedelta(days=day + 7), anchor=anchor
        )
        anchored += window.occurrences
        anchor = window.anchor or anchor  # a window without occurrences keeps the last one
    # Then the union is the expansion from dtstart of the whole span
    whole = recurrence.between(start, start + timedelta(days=126)).occurrences
    assert len(whole) >= 2
    assert anchored == whole
    assert anchor is not None
    assert anchor > datetime(2026, 3, 1)


def test_a_count_rule_never_uses_an_anchor():
    recurrence = rule("FREQ=DAILY;COUNT=10", "2026-03-01T09:00", "UTC")
    window = recurrence.between(utc("2026-03-01T00:00"), utc("2026-03-05T00:00"))
    assert window.anchor is None


def every_two_hours() -> Rule:
    return rule("FREQ=HOURLY;INTERVAL=2;BYMINUTE=0;BYSECOND=0", "2026-03-01T00:00", "UTC")


def test_missed_occurrences_older_than_the_catch_up_window_are_skipped():
    # Given a schedule last materialized at 09:30; 10:00 and 12:00 were missed
    # When it is expanded at 13:30 with a one-hour window
    result = plan(every_two_hours(), through=utc("2026-03-02T09:30"), now=utc("2026-03-02T13:30"),
                  horizon=utc("2026-03-02T20:00"), catch_up=timedelta(hours=1))  # fmt: skip
    # Then neither fires, both are counted, and the next one is on time
    assert [o.at for o in result.skipped] == [utc("2026-03-02T10:00"), utc("2026-03-02T12:00")]
    assert [o.at for o in result.fire] == [utc(f"2026-03-02T{h}:00") for h in (14, 16, 18, 20)]


def test_only_the_latest_missed_occurrence_within_the_window_fires_never_a_burst():
    # Every 5 minutes, paused for 3 hours, resumed with a one-hour window: 11 of the 12
    # occurrences of the last hour are skipped too; only the latest fires late.
    five = rule("FREQ=MINUTELY;INTERVAL=5", "2026-03-01T00:00", "UTC")
    now = utc("2026-03-02T12:02")
    result = plan(five, through=now - timedelta(hours=3), now=now,
                  horizon=now + timedelta(minutes=30), catch_up=timedelta(hours=1))  # fmt: skip
    assert result.fire[0].at == utc("2026-03-02T12:00")
    assert all(o.at > now for o in result.fire[1:])
    assert len(result.skipped) == 35


def test_a_zero_window_catches_nothing_up():
    result = plan(every_two_hours(), through=utc("2026-03-02T09:30"), now=utc("2026-03-02T10:01"),
                  horizon=utc("2026-03-02T13:00"), catch_up=timedelta(0))  # fmt: skip
    assert [o.at for o in result.skipped] == [utc("2026-03-02T10:00")]
    assert [o.at for o in result.fire] == [utc("2026-03-02T12:00")]


def test_a_start_or_end_at_the_edge_of_the_calendar_is_refused_not_crashed_on():
    # Moved by a zone's offset, 9999-12-31 would leave Python's datetime range.
    with pytest.raises(InvalidRecurrenceError, match="out of range") as raised:
        rule(DAILY_9, "2026-03-01T00:00", "Pacific/Kiritimati", until=utc("9999-12-31T00:00"))
    assert raised.value.field == "until"
    with pytest.raises(InvalidRecurrenceError, match="out of range"):
        rule(DAILY_9, "0001-01-01T00:00", "America/New_York")
