"""Wall time + IANA zone → UTC, with the documented rule for skipped and repeated times."""

from __future__ import annotations

from datetime import UTC, date, datetime, time

import pytest

from tickwork.platform.errors import InvalidTimeError, InvalidTimezoneError
from tickwork.platform.wallclock import parse_wall_time, require_aware, resolve_wall_time, zone


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# zone, local date, local time, expected UTC instant, what the case shows
CASES = [
    # America/New_York: spring forward 2026-03-08 02:00 → 03:00; fall back 2026-11-01 02:00 → 01:00
    ("America/New_York", "2026-03-07", "09:00", "2026-03-07T14:00", "EST, day before"),
    ("America/New_York", "2026-03-08", "09:00", "2026-03-08T13:00", "EDT, same wall time"),
    ("America/New_York", "2026-03-08", "02:30", "2026-03-08T07:30", "gap: read as 03:30 EDT"),
    ("America/New_York", "2026-03-08", "03:00", "2026-03-08T07:00", "first instant after gap"),
    ("America/New_York", "2026-11-01", "01:30", "2026-11-01T05:30", "repeated: first (EDT)"),
    ("America/New_York", "2026-11-01", "02:00", "2026-11-01T07:00", "after the repeat, EST"),
    # Europe/London: spring forward 2026-03-29 01:00 → 02:00; fall back 2026-10-25 02:00 → 01:00
    ("Europe/London", "2026-03-29", "01:30", "2026-03-29T01:30", "gap: read as 02:30 BST"),
    ("Europe/London", "2026-03-29", "09:00", "2026-03-29T08:00", "BST"),
    ("Europe/London", "2026-10-25", "01:30", "2026-10-25T00:30", "repeated: first (BST)"),
    ("Europe/London", "2026-10-25", "09:00", "2026-10-25T09:00", "GMT"),
    # Australia/Sydney: fall back 2026-04-05 03:00 → 02:00; spring forward 2026-10-04 02:00 → 03:00
    ("Australia/Sydney", "2026-04-05", "02:30", "2026-04-04T15:30", "repeated: first (AEDT)"),
    ("Australia/Sydney", "2026-04-05", "09:00", "2026-04-04T23:00", "AEST"),
    ("Australia/Sydney", "2026-10-04", "02:30", "2026-10-03T16:30", "gap: read as 03:30 AEDT"),
    ("Australia/Sydney", "2026-10-04", "09:00", "2026-10-03T22:00", "AEDT"),
    # Australia/Lord_Howe shifts by 30 minutes: 2026-04-05 02:00 → 01:30; 2026-10-04 02:00 → 02:30
    ("Australia/Lord_Howe", "2026-04-05", "01:45", "2026-04-04T14:45", "repeated: first (+11)"),
    ("Australia/Lord_Howe", "2026-04-05", "09:00", "2026-04-04T22:30", "+10:30"),
    ("Australia/Lord_Howe", "2026-10-04", "02:15", "2026-10-03T15:45", "gap: read as 02:45 +11"),
    ("Australia/Lord_Howe", "2026-10-04", "09:00", "2026-10-03T22:00", "+11"),
]


@pytest.mark.parametrize(("tz", "day", "clock", "expected", "case"), CASES)
def test_wall_time_resolution_across_dst(tz, day, clock, expected, case):
    assert parse_wall_time(day, clock, tz) == utc(expected), case


def test_a_skipped_time_moves_forward_by_the_gap():
    ny = zone("America/New_York")
    resolved = resolve_wall_time(date(2026, 3, 8), time(2, 30), ny)
    assert resolved.astimezone(ny).time() == time(3, 30)


@pytest.mark.parametrize("name", ["Mars/Olympus_Mons", "", "../../etc/passwd", "EST5EDT "])
def test_unknown_zones_are_refused(name):
    with pytest.raises(InvalidTimezoneError, match="unknown time zone"):
        zone(name)


@pytest.mark.parametrize(
    ("day", "clock", "field"),
    [
        ("2026-02-30", "09:00", "date"),
        ("tomorrow", "09:00", "date"),
        ("2026-02-03", "25:00", "time"),
    ],
)
def test_malformed_dates_and_times_name_the_field(day, clock, field):
    with pytest.raises(InvalidTimeError) as raised:
        parse_wall_time(day, clock, "UTC")
    assert raised.value.field == field


def test_naive_instants_are_refused_not_guessed():
    with pytest.raises(InvalidTimeError, match="UTC offset"):
        require_aware(datetime(2026, 5, 20, 9, 0))
    aware = datetime.fromisoformat("2026-05-20T09:00:00+02:00")
    assert require_aware(aware) == utc("2026-05-20T07:00")
