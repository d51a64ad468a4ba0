"""Helpers for tests of sequences and recipients: an engine with an `sms` channel, and a way
to let a row's time come without waiting for it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from psycopg.rows import dict_row

from tests.engine import drain
from tickwork.platform.config import ActionTypeConfig, Settings
from tickwork.platform.db import Connection, Database
from tickwork.platform.queues.memory import InProcessQueues
from tickwork.platform.queues.port import OutgoingMessage
from tickwork.providers import ProviderRegistry
from tickwork.providers.log import LogProvider
from tickwork.recipients.store import RecipientInput, put_recipient
from tickwork.runtime import Runtime
from tickwork.sequences.model import CampaignInput
from tickwork.sequences.store import create_campaign

CHANNELS = {
    "sms": ActionTypeConfig(provider="log"),
    "email": ActionTypeConfig(provider="log"),
    "log": ActionTypeConfig(provider="log"),
}


def make_engine(database_url: str) -> Iterator[Runtime]:
    """A runtime whose action types are sms, email and log, each with a quiet log provider
    (a test module's `engine` fixture yields from it)."""
    settings = Settings(database_url=database_url, action_types=CHANNELS)
    rt = Runtime(
        settings=settings,
        db=Database(database_url),
        queues=InProcessQueues(visibility_timeout=30),
        providers=ProviderRegistry(settings),
    )
    for action_type in settings.action_types:
        rt.providers.register(action_type, LogProvider({"quiet": True}))
    yield rt
    rt.db.close()


def sent(rt: Runtime, action_type: str = "sms") -> Counter[UUID]:
    provider = rt.providers.for_action_type(action_type)
    assert isinstance(provider, LogProvider)
    return Counter(d.action_id for d in provider.deliveries)


def let_time_come(conn: Connection, rt: Runtime, ids: Sequence[UUID], action_type: str) -> None:
    """Act as if the rows' time had come: make them due now (next_attempt_at, the way a
    retry does; publish_at, the time they were scheduled for, is kept) and ring their
    doorbell, as the tick would, then dispatch."""
    conn.execute(
        "update scheduled_actions set next_attempt_at = now()"
        " where id = any(%s) and status = 'queued'",
        (list(ids),),
    )
    now = datetime.now(UTC)
    rt.queues.send(action_type, [OutgoingMessage((i,), action_type, now, now) for i in ids])
    drain(rt, action_type)


def action_row(conn: Connection, action_id: UUID) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        found = cur.execute("select * from scheduled_actions where id = %s", (action_id,))
        row = found.fetchone()
    assert row is not None
    return row


def changes_of(conn: Connection, action_id: UUID) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "select * from action_changes where action_id = %s order by id", (action_id,)
        ).fetchall()


def recipient(
    conn: Connection, rt: Runtime, workspace: UUID, recipient_id: str = "ann", **fields: Any
) -> None:
    given = RecipientInput(
        timezone=fields.get("timezone", "UTC"),
        quiet_hours=fields.get("quiet_hours"),
        caps=fields.get("caps"),
        cap_policy=fields.get("cap_policy", "defer"),
    )
    put_recipient(conn, workspace, recipient_id, given, rt.settings)


def campaign(
    conn: Connection, rt: Runtime, workspace: UUID, steps: list[dict[str, Any]], **fields: Any
) -> UUID:
    given = CampaignInput(
        name=fields.get("name", "welcome"),
        steps=steps,
        exit_events=fields.get("exit_events", []),
        cap_policy=fields.get("cap_policy"),
    )
    return create_campaign(conn, workspace, given, rt.settings, "tester").id


def sms_step(text: str, **wait: Any) -> dict[str, Any]:
    return {
        "wait": wait or {"delay_seconds": 0},
        "action": {"action_type": "sms", "target_key": "phone", "payload": {"text": text}},
    }
