"""The forecast: queued actions due per action type, connection (when the action names one)
and hour over the next hours, against
the action type's hourly quota where one is configured (`quota_per_hour`), so tomorrow's
09:00 spike is seen before it happens."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from tickwork.platform.config import Settings
from tickwork.platform.db import Connection
from tickwork.platform.sql import query

_FORECAST = query("forecast")
MAX_HOURS = 24 * 14


@dataclass(frozen=True)
class Bucket:
    action_type: str
    connection_id: UUID | None
    hour: datetime
    due: int
    quota_per_hour: int | None

    @property
    def over_quota(self) -> bool:
        return self.quota_per_hour is not None and self.due > self.quota_per_hour


def forecast(
    conn: Connection, workspace_id: UUID, hours: int, settings: Settings, now: datetime
) -> list[Bucket]:
    until = now + timedelta(hours=hours)
    rows = conn.execute(
        _FORECAST, {"workspace_id": workspace_id, "now": now, "until": until}
    ).fetchall()
    buckets = []
    for action_type, connection_id, hour, due in rows:
        config = settings.action_type(action_type)
        quota = config.quota_per_hour if config is not None else None
        buckets.append(Bucket(action_type, connection_id, hour, int(due), quota))
    return buckets
