"""Recurrence rules: one RFC 5545 RRULE, with optional EXDATE and RDATE lines, expanded in
the schedule's own zone.

Occurrences are computed as local wall times (dateutil on naive datetimes, from a naive
`dtstart`), so "every Tuesday at 09:00" stays 09:00 local across DST and the UTC instant
moves. Each wall time becomes an instant by wallclock's rule (fold=0): a time the zone
skips moves forward by the gap, a time it repeats means its first occurrence. Values in the
rule text that carry a zone (`UNTIL=...Z`, `EXDATE;TZID=...`, a trailing `Z`) are instants;
values without one are wall times in the schedule's zone; `VALUE=DATE` values are days.

Pure: no I/O. The database side (schedules, materialization) is `tickwork.recurring`.
"""

from __future__ import annotations

import heapq
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from itertools import islice, pairwise, takewhile
from types import FrameType
from typing import TypeVar
from zoneinfo import ZoneInfo

from dateutil.rrule import rrule, rrulestr

from tickwork.platform.errors import InvalidRecurrenceError, InvalidTimeError, InvalidTimezoneError
from tickwork.platform.wallclock import require_aware, resolve_wall_time, zone

MAX_RULE_LENGTH = 8000
# COUNT rules are expanded from dtstart every time (their count starts there), so the
# count is bounded to keep an expansion cheap.
MAX_COUNT = 100_000
# The floor is checked on this many upcoming occurrences.
FLOOR_SAMPLE = 500
# Zone offsets are sampled this often (daily) over these years to find how far wall-time
# order and instant order can disagree in a zone (see `_max_jump`).
_JUMP_YEARS = (2000, 2100)

# Dates and times anywhere in a rule (dtstart, until, UNTIL, EXDATE, RDATE) stay within
# these years, so that moving them by a zone's offset or a day never leaves Python's range.
YEARS = (1900, 8999)
# The numeric RRULE parts and their ranges (RFC 5545 3.3.10; BYSECOND stops at 59 because
# Python has no leap seconds, BYEASTER, dateutil's own, stays within Easter's year). Zero is
# refused where negative values count from the end: it would select nothing.
MAX_INTERVAL = 1_000_000
_RANGES: dict[str, tuple[int, int]] = {
    "INTERVAL": (1, MAX_INTERVAL),
    "BYSECOND": (0, 59),
    "BYMINUTE": (0, 59),
    "BYHOUR": (0, 23),
    "BYMONTH": (1, 12),
    "BYMONTHDAY": (-31, 31),
    "BYYEARDAY": (-366, 366),
    "BYWEEKNO": (-53, 53),
    "BYSETPOS": (-366, 366),
    "BYEASTER": (-80, 250),
}
_NONZERO = frozenset({"BYMONTHDAY", "BYYEARDAY", "BYWEEKNO", "BYSETPOS"})
_INTEGER = re.compile(r"^[+-]?\d{1,7}$")
# What dateutil raises, building or iterating, on a rule it cannot evaluate.
_DATEUTIL_ERRORS = (ValueError, TypeError, KeyError, IndexError, OverflowError)

FIELD = "rrule"
_DAY_PARTS = ("BYMONTH", "BYWEEKNO", "BYYEARDAY", "BYMONTHDAY", "BYDAY", "BYEASTER")
_VALUE = re.compile(r"^(\d{4})(\d{2})(\d{2})(?:T(\d{2})(\d{2})(\d{2})(Z)?)?$")
_ORDINAL = re.compile(r"^([+-]?\d{1,2})?(MO|TU|WE|TH|FR|SA|SU)$")
_PROPERTY = re.compile(r"^([A-Za-z-]+)((?:;[^:;]+)*):(.*)$")


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One firing: the wall time the rule produced and the instant it resolves to."""

    local: datetime  # naive, in the schedule's zone
    at: datetime  # UTC


@dataclass(frozen=True)
class Recurrence:
    """A schedule's time definition: rule text, local start, zone and optional end instant."""

    rrule: str
    dtstart: datetime  # naive local wall time in `timezone`
    timezone: str
    until: datetime | None = None


@dataclass(frozen=True)
class Window:
    """Occurrences of a window in instant order, and an anchor for the next expansion."""

    occurrences: list[Occurrence]
    anchor: datetime | None


@cache
def _max_jump(tz_name: str) -> timedelta:
    """The spread of the zone's UTC offsets: an upper bound on how far a wall time and the
    wall time its instant shows can differ (an hour for DST; half an hour at Lord Howe; a
    day where Samoa crossed the date line), and so on how far wall order and instant order
    can disagree. Windows in wall time are widened by this much, then cut by instant."""
    tz = ZoneInfo(tz_name)
    probe = datetime(_JUMP_YEARS[0], 1, 1, tzinfo=UTC)
    end = datetime(_JUMP_YEARS[1], 1, 1, tzinfo=UTC)
    offsets: set[timedelta] = set()
    while probe < end:
        offset = probe.astimezone(tz).utcoffset()
        if offset is not None:
            offsets.add(offset)
        probe += timedelta(days=1)
    return max(offsets) - min(offsets) if offsets else timedelta(0)


def _refuse(message: str, field: str = FIELD) -> InvalidRecurrenceError:
    return InvalidRecurrenceError(message, field=field)


# ------------------------------------------------------------------------------ parsing


@dataclass(frozen=True)
class _Value:
    local: datetime | None = None  # a wall time in the schedule's zone
    instant: datetime | None = None  # UTC
    day: date | None = None


def _unfold(text: str) -> list[str]:
    """Content lines, with RFC 5545 folding (a line starting with a space continues the
    previous one) undone and blank lines dropped."""
    lines: list[str] = []
    for raw in text.replace("\r\n", "\n").split("\n"):
        if raw[:1] in (" ", "\t") and lines:
            lines[-1] += raw[1:]
        elif raw.strip():
            lines.append(raw.strip())
    return lines


def _parse_value(name: str, raw: str, params: dict[str, str]) -> _Value:
    match = _VALUE.match(raw.strip().upper())
    if match is None:
        raise _refuse(
            f"{name} value {raw!r} is not a date (YYYYMMDD) or a date-time (YYYYMMDDTHHMMSS,"
            " with Z for UTC)"
        )
    year, month, day, hour, minute, second, utc = match.groups()
    try:
        day_value = date(int(year), int(month), int(day))
        clock = time(int(hour), int(minute), int(second)) if hour is not None else None
    except ValueError as exc:
        raise _refuse(f"{name} value {raw!r} is not a real date or time: {exc}") from exc
    if not YEARS[0] <= day_value.year <= YEARS[1]:
        raise _refuse(f"{name} value {raw!r} is out of range: years {YEARS[0]} to {YEARS[1]}")
    if params.get("VALUE") == "DATE" or clock is None:
        if clock is not None:
            raise _refuse(f"{name} value {raw!r} has a time but VALUE=DATE")
        return _Value(day=day_value)
    wall = datetime.combine(day_value, clock)
    tzid = params.get("TZID")
    if utc and tzid:
        raise _refuse(f"{name} value {raw!r} ends in Z (UTC) but also names TZID={tzid}")
    if utc:
        return _Value(instant=wall.replace(tzinfo=UTC))
    if tzid:
        try:
            other = zone(tzid, field=FIELD)
        except InvalidTimezoneError as exc:
            raise _refuse(f"{name} names TZID={tzid!r}, which is not an IANA time zone") from exc
        return _Value(instant=resolve_wall_time(day_value, clock, other))
    return _Value(local=wall)


def _parse_params(name: str, text: str) -> dict[str, str]:
    params: dict[str, str] = {}
    for part in filter(None, text.split(";")):
        key, sep, value = part.partition("=")
        key = key.strip().upper()
        if not sep or key not in ("TZID", "VALUE"):
            raise _refuse(f"{name} parameter {part!r} is not supported (TZID and VALUE are)")
        params[key] = value.strip() if key == "TZID" else value.strip().upper()
    if params.get("VALUE", "DATE-TIME") not in ("DATE", "DATE-TIME"):
        raise _refuse(f"{name};VALUE={params['VALUE']} is not supported: use DATE or DATE-TIME")
    return params


@dataclass
class _Lines:
    rule: str | None = None
    rdates: list[_Value] = field(default_factory=list)
    exdates: list[_Value] = field(default_factory=list)


def _read_line(line: str) -> tuple[str, str, str]:
    """(NAME, parameters, value) of a content line; a bare FREQ=... line is an RRULE."""
    match = _PROPERTY.match(line)
    if match is not None:
        return match.group(1).upper(), match.group(2), match.group(3)
    if "=" in line and ":" not in line:
        return "RRULE", "", line
    raise _refuse(f"cannot read the line {line!r}: expected NAME:VALUE")


_NOT_SUPPORTED = {
    "DTSTART": "DTSTART is not part of the rule: give dtstart and timezone as their own fields",
    "EXRULE": "EXRULE is deprecated by RFC 5545 and not supported: use EXDATE",
}


def _split(text: str) -> _Lines:
    if not isinstance(text, str) or not text.strip():
        raise _refuse("the rule is empty: give an RRULE such as FREQ=WEEKLY;BYDAY=TU;BYHOUR=9")
    if len(text) > MAX_RULE_LENGTH:
        raise _refuse(f"the rule is longer than {MAX_RULE_LENGTH} characters")
    found = _Lines()
    for line in _unfold(text):
        name, params, value = _read_line(line)
        if name in _NOT_SUPPORTED:
            raise _refuse(_NOT_SUPPORTED[name])
        if name == "RRULE":
            if params:
                raise _refuse("RRULE takes no parameters")
            if found.rule is not None:
                raise _refuse("only one RRULE line is allowed")
            found.rule = value.strip()
        elif name in ("EXDATE", "RDATE"):
            parsed = _parse_params(name, params)
            values = [_parse_value(name, raw, parsed) for raw in value.split(",")]
            (found.exdates if name == "EXDATE" else found.rdates).extend(values)
        else:
            raise _refuse(
                f"unknown line {name!r}: the rule is one RRULE line and optional EXDATE and"
                " RDATE lines"
            )
    if found.rule is None:
        raise _refuse("the rule has no RRULE line, e.g. RRULE:FREQ=WEEKLY;BYDAY=TU;BYHOUR=9")
    return found


def _rule_parts(rule: str) -> dict[str, str]:
    parts: dict[str, str] = {}
    for part in rule.split(";"):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        key = key.strip().upper()
        if not sep or not key or not value.strip():
            raise _refuse(f"RRULE part {part!r} is not NAME=VALUE")
        if key in parts:
            raise _refuse(f"RRULE names {key} twice")
        parts[key] = value.strip().upper()
    if "FREQ" not in parts:
        raise _refuse("RRULE needs FREQ, e.g. FREQ=DAILY")
    if "COUNT" in parts and "UNTIL" in parts:
        raise _refuse("RRULE cannot have both COUNT and UNTIL (RFC 5545): keep one of them")
    count = parts.get("COUNT")
    if count is not None and not (count.isdigit() and 1 <= int(count) <= MAX_COUNT):
        raise _refuse(f"COUNT must be a whole number from 1 to {MAX_COUNT}")
    _check_ranges(parts)
    return parts


def _check_ranges(parts: dict[str, str]) -> None:
    for key, (low, high) in _RANGES.items():
        if key in parts:
            _check_numbers(key, parts[key], low, high)
    if "BYDAY" in parts:
        for item in parts["BYDAY"].split(","):
            match = _ORDINAL.match(item.strip())
            if match is None:
                raise _refuse(f"BYDAY value {item!r} is not a weekday such as MO or 1MO")
            if match.group(1) is not None and not 1 <= abs(int(match.group(1))) <= 53:
                raise _refuse(
                    f"BYDAY value {item!r}: the ordinal must be from 1 to 53 (or -53 to -1)"
                )


def _check_numbers(key: str, value: str, low: int, high: int) -> None:
    items = value.split(",") if key != "INTERVAL" else [value]
    for raw in items:
        item = raw.strip()
        number = int(item) if _INTEGER.match(item) else None
        if number is None or not low <= number <= high or (number == 0 and key in _NONZERO):
            zero = ", not 0" if key in _NONZERO else ""
            raise _refuse(f"{key} value {item!r} must be a whole number from {low} to {high}{zero}")


def _until_wall(value: _Value, tz: ZoneInfo) -> datetime:
    """RRULE UNTIL as a wall time in the schedule's zone: an instant read there, a date as
    the end of that day (UNTIL is inclusive)."""
    if value.instant is not None:
        return value.instant.astimezone(tz).replace(tzinfo=None)
    if value.day is not None:
        return datetime.combine(value.day, time(23, 59, 59))
    assert value.local is not None
    return value.local


def _build(parts: dict[str, str], dtstart: datetime) -> rrule:
    text = ";".join(f"{key}={value}" for key, value in parts.items())
    try:
        built = rrulestr(text, dtstart=dtstart)
    except _DATEUTIL_ERRORS as exc:
        raise _refuse(f"the RRULE cannot be read: {exc}") from exc
    if not isinstance(built, rrule):  # pragma: no cover - one line always gives one rrule
        raise _refuse("the RRULE cannot be read")
    return built


def _skeleton_has_a_day(parts: dict[str, str], dtstart: datetime) -> bool:
    """Whether the day filters (BYMONTH, BYMONTHDAY, BYDAY, ...) select any date at all.

    dateutil looks for a matching day period by period up to the year 9999 before it
    concludes a rule is empty, which for a daily or finer rule takes minutes. A yearly rule
    with the same day filters (ordinals dropped) does the same search in well under a
    second, and a rule whose skeleton selects no day can have no occurrence."""
    day_parts = {key: parts[key] for key in _DAY_PARTS if key in parts}
    if not day_parts:
        return True
    if "BYDAY" in day_parts:
        days = []
        for item in day_parts["BYDAY"].split(","):
            match = _ORDINAL.match(item.strip())
            if match is None:
                raise _refuse(f"BYDAY value {item!r} is not a weekday such as MO or 1MO")
            days.append(match.group(2))
        day_parts["BYDAY"] = ",".join(days)
    skeleton = _build({"FREQ": "YEARLY", **day_parts}, dtstart)
    return next(_iterate(skeleton, dtstart), None) is not None


# --------------------------------------------------------------------------------- rule


def _iterate(rule: rrule, start: datetime) -> Iterator[datetime]:
    """The rule's wall times from `start` on. Some impossible rules (an INTERVAL that never
    meets BYHOUR, say) are only found out by dateutil while iterating."""
    try:
        yield from rule.xafter(start, inc=True)
    except ValueError as exc:
        raise _refuse(f"the RRULE can have no occurrence: {exc}") from exc
    except _DATEUTIL_ERRORS as exc:
        raise _refuse(f"the RRULE cannot be evaluated: {exc!r}") from exc


class Rule:
    """A compiled recurrence: iterate its occurrences, in a window or after an instant."""

    def __init__(self, recurrence: Recurrence) -> None:
        self.recurrence = recurrence
        self.tz = zone(recurrence.timezone)
        self.margin = _max_jump(recurrence.timezone)
        dtstart = recurrence.dtstart
        if not isinstance(dtstart, datetime) or dtstart.tzinfo is not None:
            raise InvalidTimeError(
                "dtstart is a wall time in the schedule's timezone, without an offset,"
                " e.g. 2026-05-20T09:00:00",
                field="dtstart",
            )
        self.dtstart = dtstart.replace(microsecond=0)
        self.until = require_aware(recurrence.until, field="until") if recurrence.until else None
        for name, value in (("dtstart", self.dtstart), ("until", self.until)):
            if value is not None and not YEARS[0] <= value.year <= YEARS[1]:
                raise _refuse(
                    f"{name} {value.isoformat()} is out of range: years {YEARS[0]} to"
                    f" {YEARS[1]} (leave until out for no end)",
                    field=name,
                )
        lines = _split(recurrence.rrule)
        parts = _rule_parts(lines.rule or "")
        if "UNTIL" in parts:
            until_value = _parse_value("UNTIL", parts["UNTIL"], {})
            parts["UNTIL"] = _until_wall(until_value, self.tz).strftime("%Y%m%dT%H%M%S")
        self.has_count = "COUNT" in parts
        self._rule = _build(parts, self.dtstart)
        if not _skeleton_has_a_day(parts, self.dtstart):
            raise _refuse("the rule selects no date at all (check BYMONTH, BYMONTHDAY, BYDAY)")
        self._rdates = sorted({self._wall(value, self.dtstart.time()) for value in lines.rdates})
        exdates = lines.exdates
        self._exdays = frozenset(v.day for v in exdates if v.day is not None)
        self._exlocal = frozenset(v.local for v in exdates if v.local is not None)
        self._exinstants = frozenset(v.instant for v in exdates if v.instant is not None)

    def _wall(self, value: _Value, clock: time) -> datetime:
        if value.local is not None:
            return value.local
        if value.instant is not None:
            return value.instant.astimezone(self.tz).replace(tzinfo=None)
        assert value.day is not None
        return datetime.combine(value.day, clock)  # an RDATE day fires at dtstart's time

    def to_wall(self, instant: datetime) -> datetime:
        return instant.astimezone(self.tz).replace(tzinfo=None)

    def resolve(self, wall: datetime) -> datetime:
        return resolve_wall_time(wall.date(), wall.time(), self.tz)

    # ------------------------------------------------------------------ iteration

    def _walls(self, start: datetime, anchor: datetime | None) -> Iterator[tuple[datetime, bool]]:
        """(wall time, made by the RRULE rather than an RDATE) from `start` on, in wall order.

        Without COUNT the rule is iterated from `anchor` (a wall time it produced, at or
        before `start`) instead of dtstart: the same occurrences, without walking years of
        history. An occurrence as start keeps the INTERVAL phase and the implicit BYxxx
        values dtstart would have given."""
        rule = self._rule
        if anchor is not None and not self.has_count and self.dtstart <= anchor <= start:
            rule = rule.replace(dtstart=anchor)
        made: Iterable[tuple[datetime, bool]] = ((wall, True) for wall in _iterate(rule, start))
        extra = ((wall, False) for wall in self._rdates if wall >= start)
        previous: datetime | None = None
        for wall, from_rule in heapq.merge(made, extra, key=lambda item: item[0]):
            if wall != previous:
                previous = wall
                yield wall, from_rule

    def _excluded(self, occurrence: Occurrence) -> bool:
        return (
            occurrence.local.date() in self._exdays
            or occurrence.local in self._exlocal
            or occurrence.at in self._exinstants
            or (self.until is not None and occurrence.at > self.until)
        )

    def _scan(
        self, start: datetime, stop: datetime, anchor: datetime | None
    ) -> tuple[list[Occurrence], datetime | None]:
        """Occurrences with wall times in [start, stop], and the first wall the RRULE made."""
        found: list[Occurrence] = []
        first: datetime | None = None
        stop_wall = stop
        if self.until is not None:
            stop_wall = min(stop_wall, self.to_wall(self.until) + self.margin)
        for wall, from_rule in self._walls(start, anchor):
            if wall > stop_wall:
                break
            if from_rule and first is None:
                first = wall
            occurrence = Occurrence(local=wall, at=self.resolve(wall))
            if not self._excluded(occurrence):
                found.append(occurrence)
        return found, first

    def between(
        self,
        after: datetime,
        before: datetime,
        *,
        inclusive: bool = False,
        anchor: datetime | None = None,
    ) -> Window:
        """Occurrences with `after` < instant <= `before` (`after` included if `inclusive`),
        in instant order, one per instant (two wall times a gap maps to one instant fire
        once)."""
        after, before = require_aware(after, field="after"), require_aware(before, field="before")
        found, first = self._scan(
            self.to_wall(after) - self.margin, self.to_wall(before) + self.margin, anchor
        )
        by_instant: dict[datetime, Occurrence] = {}
        for occurrence in found:
            low_ok = occurrence.at >= after if inclusive else occurrence.at > after
            if low_ok and occurrence.at <= before:
                by_instant.setdefault(occurrence.at, occurrence)
        ordered = [by_instant[at] for at in sorted(by_instant)]
        return Window(ordered, first if not self.has_count else None)

    def upcoming(
        self,
        after: datetime,
        count: int,
        *,
        within: timedelta | None = None,
        anchor: datetime | None = None,
    ) -> list[Occurrence]:
        """The next `count` occurrences strictly after `after` (and no later than `within`
        after it, if given), in instant order: a preview, or the next firing."""
        after = require_aware(after, field="after")
        limit = self.to_wall(after + within) + self.margin if within is not None else None
        if self.until is not None:
            until_wall = self.to_wall(self.until) + self.margin
            limit = until_wall if limit is None else min(limit, until_wall)
        found: dict[datetime, Occurrence] = {}
        # A wall time the zone skips fires at the instant of a later wall time; walls up to
        # there may still resolve earlier than the ones found, so the scan goes that far.
        settle: datetime | None = None
        for wall, _ in self._walls(self.to_wall(after) - self.margin, anchor):
            if limit is not None and wall > limit:
                break
            if len(found) >= count and settle is not None and wall > settle:
                break
            occurrence = Occurrence(local=wall, at=self.resolve(wall))
            shown = self.to_wall(occurrence.at)
            settle = shown if settle is None else max(settle, shown)
            if occurrence.at <= after or self._excluded(occurrence):
                continue
            found.setdefault(occurrence.at, occurrence)
        ordered = [found[at] for at in sorted(found)][:count]
        if within is not None:
            ordered = [o for o in ordered if o.at <= after + within]
        return ordered

    def next_after(
        self, instant: datetime, *, within: timedelta | None = None, anchor: datetime | None = None
    ) -> Occurrence | None:
        """The first occurrence strictly after `instant`, or None when there is none (within
        `within`, if given)."""
        found = self.upcoming(instant, 1, within=within, anchor=anchor)
        return found[0] if found else None

    def walls_after(self, start: datetime, stop: datetime, count: int) -> list[datetime]:
        """Up to `count` wall times in [start, stop] (both wall times), not excluded."""
        if self.until is not None:
            # Past `until` every wall is excluded: walking them up to `stop` finds nothing.
            stop = min(stop, self.to_wall(self.until) + self.margin)
        walls = takewhile(lambda wall: wall <= stop, (wall for wall, _ in self._walls(start, None)))
        kept = (w for w in walls if not self._excluded(Occurrence(local=w, at=self.resolve(w))))
        return list(islice(kept, count))


# ------------------------------------------------------------------------------- budget

# dateutil searches for a rule's next occurrence period by period, up to the year 9999,
# with no other bound: a rule whose INTERVAL never meets its BYxxx parts (every 7 minutes,
# but only Mondays at 09:00) keeps it busy for minutes. Work on a rule someone submitted is
# therefore counted, in Python function calls, and stopped past a budget. About a million
# calls take about a second; an ordinary rule needs a few thousand, a rule every 5 minutes
# from a dtstart a year back (the most validation allows) about 4 million.
VALIDATION_BUDGET = 5_000_000
EXPANSION_BUDGET = 10_000_000

_T = TypeVar("_T")


class _OverBudget(Exception):  # an internal signal; never leaves this module
    pass


def bounded(work: Callable[[], _T], budget: int) -> _T:
    """Run `work`, refusing the rule if it takes more than `budget` function calls.

    Counted with a profile hook (per thread; a profiler already installed is put back).
    An exception raised by the hook surfaces inside dateutil's loop, which stops it."""
    calls = 0

    def count(frame: FrameType, event: str, arg: object) -> None:
        nonlocal calls
        calls += 1
        if calls > budget:
            raise _OverBudget

    previous = sys.getprofile()
    sys.setprofile(count)
    try:
        return work()
    except _OverBudget:
        raise _refuse(
            "the rule is too costly to evaluate: its next occurrence takes a very long search"
            " (does INTERVAL ever meet the BYxxx parts?)"
        ) from None
    except OverflowError as exc:
        raise _refuse(f"a date the rule reaches is out of range: {exc}") from exc
    finally:
        sys.setprofile(previous)


# ---------------------------------------------------------------------------- validation


def validate(
    recurrence: Recurrence,
    now: datetime,
    *,
    min_interval_seconds: int,
    horizon_days: int,
    max_past_days: int,
) -> Rule:
    """Compile a recurrence and check it against the limits; the errors say what to fix.

    - dtstart no more than `max_past_days` in the past nor `horizon_days` ahead (limits of
      the schedule: InvalidRecurrenceError, as are dtstart and until outside YEARS);
    - `until`, if given, in the future (InvalidTimeError);
    - at least one occurrence after `now` within `horizon_days`;
    - no two consecutive occurrences closer than `min_interval_seconds` in wall time (so
      DST does not trip it), among the first FLOOR_SAMPLE from dtstart and from now."""
    rule = Rule(recurrence)
    now = require_aware(now, field="now")
    local_now = rule.to_wall(now)
    if rule.dtstart < local_now - timedelta(days=max_past_days):
        raise _refuse(
            f"dtstart {rule.dtstart.isoformat()} is more than {max_past_days} days in the past;"
            " start the schedule later (an occurrence of the rule keeps its rhythm)",
            field="dtstart",
        )
    if rule.dtstart > local_now + timedelta(days=horizon_days):
        raise _refuse(
            f"dtstart {rule.dtstart.isoformat()} is more than {horizon_days} days ahead",
            field="dtstart",
        )
    if rule.until is not None and rule.until <= now:
        raise InvalidTimeError(
            f"until {rule.until.isoformat()} is in the past; nothing would fire", field="until"
        )
    horizon = timedelta(days=horizon_days)
    # The floor first, from dtstart: a too-frequent rule is refused before anything walks
    # from dtstart to now one occurrence at a time.
    _check_floor(rule, rule.dtstart, rule.dtstart + horizon, min_interval_seconds)
    if bounded(lambda: rule.next_after(now, within=horizon), VALIDATION_BUDGET) is None:
        raise _refuse(
            f"the rule has no occurrence in the next {horizon_days} days (check COUNT, UNTIL,"
            " the BYxxx parts, EXDATE, dtstart and until)"
        )
    _check_floor(rule, local_now, rule.to_wall(now + horizon), min_interval_seconds)
    return rule


def _check_floor(rule: Rule, start: datetime, stop: datetime, min_interval_seconds: int) -> None:
    walls = bounded(lambda: rule.walls_after(start, stop, FLOOR_SAMPLE), VALIDATION_BUDGET)
    for earlier, later in pairwise(walls):
        gap = (later - earlier).total_seconds()
        if gap < min_interval_seconds:
            raise _refuse(
                f"the rule fires {gap:g} s apart ({earlier:%Y-%m-%d %H:%M:%S} and"
                f" {later:%Y-%m-%d %H:%M:%S} local); occurrences must be at least"
                f" {min_interval_seconds} s apart"
            )


# ------------------------------------------------------------------------- catch-up plan


@dataclass(frozen=True)
class Plan:
    """What one expansion does: occurrences to insert, missed ones skipped, next anchor."""

    fire: list[Occurrence]
    skipped: list[Occurrence]
    anchor: datetime | None


def plan(
    rule: Rule,
    *,
    through: datetime,
    now: datetime,
    horizon: datetime,
    catch_up: timedelta,
    anchor: datetime | None = None,
) -> Plan:
    """Occurrences after `through` up to `horizon`, with the catch-up policy applied to
    those already in the past (`through` < instant < `now`): they fell due while the
    schedule was paused or nobody expanded it. The latest of them fires late if it is
    within `catch_up` of now; every other one is skipped. Never a burst: at most one."""
    window = rule.between(through, horizon, anchor=anchor)
    missed = [o for o in window.occurrences if o.at < now]
    upcoming = [o for o in window.occurrences if o.at >= now]
    late = [o for o in missed[-1:] if o.at >= now - catch_up]
    skipped = missed[: len(missed) - len(late)]
    return Plan(fire=late + upcoming, skipped=skipped, anchor=window.anchor or anchor)
