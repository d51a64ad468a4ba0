"""Times and durations as people read them: one zone (UTC), human units."""

from __future__ import annotations

from datetime import UTC, datetime


def duration(seconds: float) -> str:
    """`4 ms`, `1.2 s`, `14 min 48 s`, `3 h 2 min`, `2 d 3 h` (sign dropped)."""
    s = abs(seconds)
    if s < 0.9995:
        return f"{s * 1000:.0f} ms"
    if s < 59.95:
        return f"{s:.1f} s"
    minutes, secs = divmod(round(s), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def lateness(seconds: float) -> str:
    """`late by 4 ms` or `early by 2 ms`."""
    return f"{'early' if seconds < 0 else 'late'} by {duration(seconds)}"


def clock(instant: datetime | float, *, millis: bool = True) -> str:
    """`09:30:12.506` in UTC, from a datetime or a Unix timestamp."""
    when = datetime.fromtimestamp(instant, UTC) if isinstance(instant, int | float) else instant
    text = when.astimezone(UTC).strftime("%H:%M:%S.%f")
    return text[:-3] if millis else text[:-7]


def stamp(instant: datetime) -> str:
    """`2026-12-01 09:30:12 UTC`."""
    return instant.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def relative(instant: datetime, now: datetime) -> str:
    """`in 12 s` or `3 min ago`."""
    delta = (instant - now).total_seconds()
    return f"in {duration(delta)}" if delta >= 0 else f"{duration(delta)} ago"
