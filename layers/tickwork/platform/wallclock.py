"""Time zones and wall-clock times.

The rule for local times that a zone skips or repeats, applied everywhere Tickwork turns a
wall time into an instant (API, recurring expansion, reconciler):

- A time that does not exist (spring forward) is shifted forward by the length of the gap:
  02:30 on the night New York jumps from 02:00 to 03:00 becomes 03:30 EDT.
- A time that exists twice (fall back) means its first occurrence: 01:30 on the night New
  York repeats 01:00-02:00 is 01:30 EDT, not 01:30 EST.

Both follow from PEP 495 with fold=0, which is what `resolve_wall_time` uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from importlib.resources import files
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from tickwork.platform.errors import InvalidTimeError, InvalidTimezoneError


@cache
def _known_zones() -> frozenset[str]:
    return frozenset(available_timezones())


def zone(name: str, *, field: str = "timezone") -> ZoneInfo:
    """The IANA zone called `name`, or InvalidTimezoneError naming the bad value."""
    if not isinstance(name, str) or name not in _known_zones():
        raise InvalidTimezoneError(
            f"unknown time zone {name!r}: use an IANA zone name such as 'America/New_York'",
            field=field,
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:  # pragma: no cover - listed but unreadable
        raise InvalidTimezoneError(f"time zone {name!r} cannot be loaded", field=field) from exc


@dataclass(frozen=True)
class ZoneNames:
    """The zones a person picks from, and the old names that mean one of them."""

    canonical: list[str]  # sorted, UTC last
    aliases: dict[str, str]  # an old name (Asia/Calcutta) -> its canonical one (Asia/Kolkata)


@cache
def zone_names() -> ZoneNames:
    """IANA's own list of zones to offer (zone.tab: a zone per country and region, by its
    current name) and UTC; and the backward-compatible links (tzdata.zi's `L` lines) that
    point at one of them, so an old name a browser reports maps to its current one. Read
    from the tzdata package, which every deployment installs."""
    data = files("tzdata").joinpath("zoneinfo")
    canonical = {
        line.split("\t")[2]
        for line in data.joinpath("zone.tab").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    }
    aliases = {}
    for line in data.joinpath("tzdata.zi").read_text(encoding="utf-8").splitlines():
        if line.startswith("L "):
            _, target, alias = line.split()
            if target in canonical and alias not in canonical:
                aliases[alias] = target
    return ZoneNames([*sorted(canonical), "UTC"], aliases)


def resolve_wall_time(day: date, clock: time, tz: ZoneInfo) -> datetime:
    """The UTC instant of wall time `day clock` in `tz`, by the module's gap/overlap rule."""
    if clock.tzinfo is not None:
        raise InvalidTimeError("a wall time must not carry its own offset", field="time")
    local = datetime.combine(day, clock.replace(fold=0), tzinfo=tz)
    try:
        return local.astimezone(UTC)
    except OverflowError as exc:
        raise InvalidTimeError(
            f"{day.isoformat()} {clock.isoformat()} in {tz.key} is outside the years 1-9999"
            " once in UTC: choose a date Tickwork can store",
            field="date",
        ) from exc


def parse_date(value: date | str) -> date:
    """A calendar date, given as one or as 'YYYY-MM-DD'."""
    if isinstance(value, datetime):
        raise InvalidTimeError("give a date, not a date and time", field="date")
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(value)
    except (TypeError, ValueError) as exc:
        if isinstance(value, str) and _DATE_FORM.fullmatch(value):
            # In the form, but no such day (2027-02-30) or month (2027-13-01).
            raise InvalidTimeError(
                f"date {value!r} does not exist ({exc}); check the day and the month",
                field="date",
            ) from exc
        raise InvalidTimeError(
            f"date {value!r} is not a date in YYYY-MM-DD form", field="date"
        ) from exc


_DATE_FORM = re.compile(r"\d{4}-\d{2}-\d{2}")


def parse_clock(value: time | str) -> time:
    """A wall-clock time, given as one or as 'HH:MM[:SS]', without an offset."""
    if isinstance(value, time):
        parsed = value
    else:
        try:
            parsed = time.fromisoformat(value)
        except (TypeError, ValueError) as exc:
            raise InvalidTimeError(
                f"time {value!r} is not a time in HH:MM or HH:MM:SS form", field="time"
            ) from exc
    if parsed.tzinfo is not None:
        raise InvalidTimeError(
            "a wall time must not carry an offset; give the zone in timezone", field="time"
        )
    return parsed


def parse_wall_time(day: str, clock: str, tz_name: str) -> datetime:
    """`resolve_wall_time` from the API's strings: 'YYYY-MM-DD', 'HH:MM[:SS]', zone name."""
    return resolve_wall_time(parse_date(day), parse_clock(clock), zone(tz_name))


def instant_of(
    publish_at: datetime | None,
    day: str | None,
    clock: str | None,
    tz_name: str | None,
    default_tz: str,
) -> datetime:
    """The instant a request means: `publish_at` as given, or wall time `day clock` in
    `tz_name` (the workspace's zone, `default_tz`, when not given)."""
    if publish_at is not None:
        return require_aware(publish_at)
    if day is None or clock is None:
        raise InvalidTimeError("give publish_at, or both date and time", field="publish_at")
    return parse_wall_time(day, clock, tz_name or default_tz)


def require_aware(instant: datetime, *, field: str = "publish_at") -> datetime:
    """`instant` in UTC; a naive datetime is refused rather than guessed."""
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise InvalidTimeError(
            f"{field} must carry a UTC offset, e.g. 2026-05-20T09:00:00Z", field=field
        )
    try:
        return instant.astimezone(UTC)
    except OverflowError as exc:
        raise InvalidTimeError(
            f"{field} {instant.isoformat()} is outside the years 1-9999 once in UTC", field=field
        ) from exc


def check_horizon(instant: datetime, now: datetime, days: int, *, field: str) -> None:
    """Refuse (InvalidTimeError naming `field`) an instant more than `days` days from `now`,
    ahead or ago: the scheduling horizon. Every instant Tickwork takes is within it, so
    nothing it computes from one (a default range, an offset, a drip's wait) leaves the
    years a datetime can hold."""
    horizon = timedelta(days=days)
    if now - horizon <= instant <= now + horizon:
        return
    direction = "ahead" if instant > now else "ago"
    raise InvalidTimeError(
        f"{field} {instant.isoformat()} is more than {days} days {direction}; times are"
        f" taken within {days} days of now, either way",
        field=field,
        details={"max_days": days},
    )


def to_utc(instant: datetime) -> datetime:
    """`require_aware` for pydantic validators: a ValueError with the same words."""
    try:
        return require_aware(instant, field="the instant")
    except InvalidTimeError as exc:
        raise ValueError(exc.message) from exc


def local_rendering(instant: datetime, tz: ZoneInfo) -> str:
    """ISO 8601 local time with offset, e.g. 2026-03-08T03:30:00-04:00."""
    return instant.astimezone(tz).isoformat()


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class WallTimeResolution:
    """How a wall time became an instant, for answers to say when the zone's rule moved it."""

    wall_time: str  # as asked, YYYY-MM-DDTHH:MM:SS
    timezone: str
    rule: str  # "exact", "skipped_moved_forward" or "repeated_first_occurrence"
    local: str  # the instant in `timezone`, with its offset
    note: str


def describe_resolution(day: str, clock: str, tz_name: str) -> WallTimeResolution:
    """What `parse_wall_time(day, clock, tz_name)` did with this wall time, and why."""
    tz = zone(tz_name)
    wall = datetime.combine(parse_date(day), parse_clock(clock))
    first = wall.replace(tzinfo=tz, fold=0)
    instant = first.astimezone(UTC)
    local = instant.astimezone(tz)
    asked = wall.isoformat()
    if local.replace(tzinfo=None) != wall:
        gap = local.replace(tzinfo=None) - wall
        return WallTimeResolution(
            asked, tz_name, "skipped_moved_forward", local.isoformat(),
            f"{asked} does not exist in {tz_name} (the clocks jump forward there); moved"
            f" forward by the {_span(gap.total_seconds())} gap",
        )  # fmt: skip
    if wall.replace(tzinfo=tz, fold=1).utcoffset() != first.utcoffset():
        return WallTimeResolution(
            asked, tz_name, "repeated_first_occurrence", local.isoformat(),
            f"{asked} happens twice in {tz_name} (the clocks go back there); the first"
            f" occurrence, at UTC offset {local.strftime('%z')}, was used",
        )  # fmt: skip
    return WallTimeResolution(asked, tz_name, "exact", local.isoformat(), "")


def _span(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h" if minutes % 60 == 0 else f"{minutes} min"
