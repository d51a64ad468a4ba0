"""Recipients and their policies (no I/O here): a time zone, weekly quiet hours and
frequency caps per channel per calendar day in that zone.

- **Quiet hours** are weekly windows in the recipient's zone, `{"days": ["mon", ...],
  "start": "21:00", "end": "08:00"}` (no `days`: every day). A window whose end is not after
  its start runs past midnight into the next day; one whose end equals its start lasts 24 h.
  A message due inside a window goes at its end (the end of the last of adjacent windows).
- **Caps**: `{"sms": 2}`, at most N messages of an action type (the channel) per calendar
  day in the recipient's zone, across campaigns, rules and the API. A message over its cap
  is deferred to the next allowed slot (the start of the next local day, out of quiet
  hours) or dropped, per `cap_policy`.
- **Transactional** messages (a receipt, a password reset) are exempt from both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo

from tickwork.platform.config import Settings
from tickwork.platform.errors import InputError, TickworkError
from tickwork.platform.wallclock import parse_clock, resolve_wall_time, zone

CapPolicy = Literal["defer", "drop"]
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
MAX_WINDOWS = 21
MAX_CAP = 1000
RECIPIENT_ID = re.compile(r"^[^\x00-\x1f]{1,200}$")
WEEK = timedelta(days=7)


class RecipientError(TickworkError):
    """Base of the recipients' own errors."""


class UnknownRecipientError(InputError):
    code = "unknown_recipient"


@dataclass(frozen=True)
class QuietWindow:
    days: frozenset[int]  # weekday numbers, Monday 0
    start: time
    end: time

    @property
    def length(self) -> timedelta:
        start = datetime.combine(date.min, self.start)
        end = datetime.combine(date.min, self.end)
        return end - start if end > start else end - start + timedelta(days=1)

    def as_json(self) -> dict[str, Any]:
        return {
            "days": [DAYS[d] for d in sorted(self.days)],
            "start": self.start.strftime("%H:%M"),
            "end": self.end.strftime("%H:%M"),
        }


@dataclass(frozen=True)
class Recipient:
    recipient_id: str
    timezone: str
    quiet_hours: tuple[QuietWindow, ...] = ()
    caps: Mapping[str, int] = field(default_factory=dict)
    cap_policy: CapPolicy = "defer"

    @property
    def tz(self) -> ZoneInfo:
        return zone(self.timezone)


def check_recipient_id(value: Any, where: str = "recipient_id") -> str:
    if not isinstance(value, str) or not RECIPIENT_ID.match(value):
        raise InputError(
            f"{where} must be 1 to 200 characters without control characters", field=where
        )
    return value


def parse_quiet_hours(raw: Any, where: str = "quiet_hours") -> tuple[QuietWindow, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_WINDOWS:
        raise InputError(f"{where} must be a list of at most {MAX_WINDOWS} windows", field=where)
    windows = []
    for i, item in enumerate(raw):
        here = f"{where}[{i}]"
        if not isinstance(item, Mapping) or set(item) - {"days", "start", "end"}:
            raise InputError(
                f'{here} must be {{"days": ["mon", ...], "start": "21:00", "end": "08:00"}}',
                field=here,
            )
        days = item.get("days", list(DAYS))
        if not isinstance(days, list) or not days or not all(d in DAYS for d in days):
            raise InputError(
                f"{here}.days must be a non-empty list of {', '.join(DAYS)}", field=f"{here}.days"
            )
        start, end = (_clock(item.get(name), f"{here}.{name}") for name in ("start", "end"))
        windows.append(QuietWindow(frozenset(DAYS.index(d) for d in days), start, end))
    total = sum((w.length * len(w.days) for w in windows), timedelta())
    if total >= WEEK:
        raise InputError(f"{where} leave no time in the week to send; shorten them", field=where)
    return tuple(windows)


def _clock(value: Any, where: str) -> time:
    try:
        if isinstance(value, str):
            return parse_clock(value)
    except InputError:
        pass
    raise InputError(f"{where} must be a time HH:MM", field=where)


def parse_caps(raw: Any, settings: Settings, where: str = "caps") -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InputError(f'{where} must be an object such as {{"sms": 2}}', field=where)
    caps: dict[str, int] = {}
    for channel, limit in raw.items():
        here = f"{where}.{channel}"
        if settings.action_type(str(channel)) is None:
            known = ", ".join(sorted(settings.action_types))
            raise InputError(
                f"{here}: {channel!r} is not an action type; known: {known}", field=here
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CAP:
            raise InputError(
                f"{here} must be a whole number of messages a day, 1 to {MAX_CAP}", field=here
            )
        caps[str(channel)] = limit
    return caps


def parse_cap_policy(raw: Any, where: str = "cap_policy") -> CapPolicy:
    if raw == "defer":
        return "defer"
    if raw == "drop":
        return "drop"
    raise InputError(f"{where} must be 'defer' or 'drop'", field=where)


def recipient_from_row(row: Mapping[str, Any]) -> Recipient:
    return Recipient(
        recipient_id=row["recipient_id"],
        timezone=row["timezone"],
        quiet_hours=_stored_windows(row["quiet_hours"]),
        caps=dict(row["caps"]),
        cap_policy=row["cap_policy"],
    )


def _stored_windows(raw: Sequence[Mapping[str, Any]]) -> tuple[QuietWindow, ...]:
    return tuple(
        QuietWindow(
            frozenset(DAYS.index(d) for d in w["days"]),
            time.fromisoformat(w["start"]),
            time.fromisoformat(w["end"]),
        )
        for w in raw
    )


# --------------------------------------------------------------------------------- time


def quiet_end(instant: datetime, recipient: Recipient) -> datetime | None:
    """The end of the quiet window `instant` falls in, or None when it falls in none."""
    tz = recipient.tz
    today = instant.astimezone(tz).date()
    ends = []
    for day in (today - timedelta(days=1), today):
        for window in recipient.quiet_hours:
            if day.weekday() not in window.days:
                continue
            start = resolve_wall_time(day, window.start, tz)
            end_day = day if window.end > window.start else day + timedelta(days=1)
            end = resolve_wall_time(end_day, window.end, tz)
            if start <= instant < end:
                ends.append(end)
    return max(ends) if ends else None


def allowed_at(instant: datetime, recipient: Recipient) -> datetime:
    """`instant`, or the end of the quiet hours it falls in (following adjacent windows)."""
    for _ in range(2 * MAX_WINDOWS * len(DAYS)):
        end = quiet_end(instant, recipient)
        if end is None:
            return instant
        instant = end
    return instant  # pragma: no cover - validation leaves time free every week


def local_day(instant: datetime, recipient: Recipient) -> date:
    return instant.astimezone(recipient.tz).date()


def next_day_slot(instant: datetime, recipient: Recipient) -> datetime:
    """The first allowed instant of the recipient's next local day."""
    midnight = resolve_wall_time(
        local_day(instant, recipient) + timedelta(days=1), time(0), recipient.tz
    )
    return allowed_at(midnight, recipient)
