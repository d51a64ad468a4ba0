"""Demo data and a live status table, for seeing Tickwork fire on one machine."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TextIO
from uuid import UUID, uuid4

from tickwork import actions
from tickwork.actions import NewAction
from tickwork.config import Settings
from tickwork.db import Connection
from tickwork.wallclock import utcnow

WAKE_CHANNEL = "tickwork_wakeup"
DEMO_WORKSPACE = "Demo"


@dataclass(frozen=True)
class DemoPlan:
    """Which rows the demo made and what it did to them."""

    ids: list[UUID]
    cancelled: list[UUID]
    rescheduled: dict[UUID, UUID]  # old id -> new id


def demo_workspace(conn: Connection) -> UUID:
    row = conn.execute("select id from workspaces where name = %s", (DEMO_WORKSPACE,)).fetchone()
    if row:
        return UUID(str(row[0]))
    created = conn.execute(
        "insert into workspaces (name, timezone) values (%s, 'UTC') returning id",
        (DEMO_WORKSPACE,),
    ).fetchone()
    assert created is not None
    return UUID(str(created[0]))


def seed_demo(
    conn: Connection,
    settings: Settings,
    count: int = 12,
    first: float = 5,
    last: float = 40,
    move_by: float = 7,
) -> DemoPlan:
    """`count` webhooks due between `first` and `last` seconds ahead; every fourth one (from
    the third) is cancelled and the second is moved `move_by` seconds later (cancel + insert)."""
    workspace = demo_workspace(conn)
    now = utcnow()
    run = uuid4().hex[:6]
    step = (last - first) / max(1, count - 1)
    ids = []
    for n in range(count):
        new = NewAction(
            action_type="webhook",
            target_key="primary",
            thing_id=f"demo-{run}-{n + 1}",
            publish_at=now + timedelta(seconds=first + n * step),
            payload={"text": f"demo message {n + 1} of {count}"},
            source="api",
        )
        ids.append(actions.schedule(conn, workspace, new, settings, now).action.id)
    cancelled = ids[2::4]
    for action_id in cancelled:
        actions.cancel(conn, workspace, action_id)
    rescheduled: dict[UUID, UUID] = {}
    if count >= 2:
        moved = ids[1]
        original = actions.get(conn, workspace, moved)
        assert original is not None
        _, replacement = actions.reschedule(
            conn, workspace, moved, original.publish_at + timedelta(seconds=move_by), settings, now
        )
        assert replacement is not None
        rescheduled[moved] = replacement.id
    conn.execute(f"notify {WAKE_CHANNEL}")
    return DemoPlan(ids + list(rescheduled.values()), cancelled, rescheduled)


def status_rows(conn: Connection, ids: list[UUID]) -> list[tuple[object, ...]]:
    return conn.execute(
        "select id, thing_id, publish_at, status, submitted_at, rescheduled_from"
        " from scheduled_actions where id = any(%s) order by publish_at, id",
        (ids,),
    ).fetchall()


def render(rows: list[tuple[object, ...]], now: datetime, *, countdown: bool = True) -> str:
    lines = [f"{'action':<10}{'thing':<16}{'due (UTC)':<14}{'status':<11}{'fired':>9}  note"]
    for action_id, thing, publish_at, status, submitted_at, moved_from in rows:
        assert isinstance(publish_at, datetime)
        due = publish_at.strftime("%H:%M:%S.%f")[:-4]
        if isinstance(submitted_at, datetime):
            fired = f"{(submitted_at - publish_at).total_seconds() * 1000:+.0f}ms"
        elif status == "queued" and countdown:
            fired = f"in {max(0.0, (publish_at - now).total_seconds()):.0f}s"
        else:
            fired = "-"
        note = f"rescheduled from {str(moved_from)[:8]}" if moved_from else ""
        lines.append(
            f"{str(action_id)[:8]:<10}{thing!s:<16}{due:<14}{status:<11}{fired:>9}  {note}"
        )
    return "\n".join(lines)


def watch(
    conn: Connection,
    ids: list[UUID],
    *,
    timeout: float = 90,
    out: TextIO = sys.stdout,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Print the table whenever it changes, until every row settles. True if all did."""
    live = out.isatty()  # redraw in place on a terminal; otherwise print each change
    last = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = status_rows(conn, ids)
        table = render(rows, utcnow(), countdown=live)
        if table != last:
            out.write(("\x1b[H\x1b[J" if live else "\n") + table + "\n")
            out.flush()
            last = table
        if all(row[3] in actions.TERMINAL for row in rows):
            return True
        sleep(0.5)
    return False
