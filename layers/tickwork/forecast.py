"""The forecast: queued actions due per action type, connection (when the action names one)
and hour over the next hours, against the rate limits the dispatchers enforce: the action
type's and the connection's, each scaled to the hour (100 a minute is 6,000 an hour) and
the lowest kept, so tomorrow's 09:00 spike is seen before it happens and how long it will
take to drain."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from tickwork import connections
from tickwork.platform.config import RateLimit, Settings
from tickwork.platform.db import Connection
from tickwork.platform.sql import query
from tickwork.providers.catalog import connection_limits

_FORECAST = query("forecast")
MAX_HOURS = 24 * 14
HOUR_SECONDS = 3600


@dataclass(frozen=True)
class Bucket:
    action_type: str
    connection_id: UUID | None
    hour: datetime
    due: int
    # The most the dispatchers send of these in an hour; None: no limit applies.
    limit_per_hour: int | None

    @property
    def quota_per_hour(self) -> int | None:
        """The older name of `limit_per_hour`."""
        return self.limit_per_hour

    @property
    def over_quota(self) -> bool:
        return self.limit_per_hour is not None and self.due > self.limit_per_hour


def per_hour(limits: tuple[RateLimit, ...]) -> int | None:
    """The lowest of the limits, each scaled to an hour; None without any."""
    return min((limit.scaled_to(HOUR_SECONDS) for limit in limits), default=None)


def forecast(
    conn: Connection, workspace_id: UUID, hours: int, settings: Settings, now: datetime
) -> list[Bucket]:
    until = now + timedelta(hours=hours)
    rows = conn.execute(
        _FORECAST, {"workspace_id": workspace_id, "now": now, "until": until}
    ).fetchall()
    named = [row[1] for row in rows if row[1] is not None]
    found = connections.load(conn, named)
    buckets = []
    for action_type, connection_id, hour, due in rows:
        config = settings.action_type(action_type)
        limits = config.limits if config is not None else ()
        through = found.get(connection_id) if connection_id is not None else None
        if through is not None:
            limits += connection_limits(through.settings)
        buckets.append(Bucket(action_type, connection_id, hour, int(due), per_hour(limits)))
    return buckets
