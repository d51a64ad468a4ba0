"""The dispatcher and connections: rows naming a connection are resolved in one statement
per claimed wave, and a failure to read them hands the claimed rows back unsent."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from tests.engine import drain, row
from tests.fakes import LOOPBACK
from tests.fakes.slack import TOKEN, FakeSlack
from tickwork import connections
from tickwork.actions import scheduling as actions
from tickwork.actions.model import NewAction
from tickwork.engine.tick import run_tick
from tickwork.platform.config import ActionTypeConfig
from tickwork.providers.slack import SlackProvider


@pytest.fixture
def slack_rows(conn, workspace, runtime, now):
    fake = FakeSlack()
    runtime.settings = runtime.settings.model_copy(
        update={"action_types": {"slack": ActionTypeConfig(provider="slack")}}
    )
    runtime.providers.register("slack", SlackProvider({"api_url": fake.url}, 2.0, LOOPBACK))
    connection = connections.create(
        conn, workspace, name="Bot", provider="slack", settings={},
        credentials={"bot_token": TOKEN}, store=runtime.secrets, created_by=None,
    )  # fmt: skip
    ids = [
        actions.schedule(conn, workspace, NewAction(
            action_type="slack", target_key=f"t{n}", publish_at=now,
            payload={"channel": "C1", "text": f"message {n}"}, connection_id=connection.id,
        ), runtime.settings, now).action.id
        for n in range(3)
    ]  # fmt: skip
    yield fake, ids
    fake.close()


def test_a_batch_through_one_connection_is_sent_and_published(conn, runtime, slack_rows):
    fake, ids = slack_rows
    run_tick(conn, runtime.queues, runtime.settings)
    summary = drain(runtime, "slack")
    assert summary.published == 3
    assert len(fake.posts()) == 3
    assert {row(conn, i)["status"] for i in ids} == {"published"}


def test_connections_unreadable_hand_the_claimed_rows_back_unsent(
    conn, runtime, slack_rows, monkeypatch
):
    fake, ids = slack_rows

    def down(*args: object) -> None:
        raise psycopg.OperationalError("connection lost")

    monkeypatch.setattr(connections, "load", down)
    run_tick(conn, runtime.queues, runtime.settings)
    summary = drain(runtime, "slack")
    assert summary.reverted == 3
    assert fake.posts() == []
    for action_id in ids:
        current = row(conn, action_id)
        assert (current["status"], current["attempt_count"]) == ("queued", 0)
        assert current["next_attempt_at"] is not None
    assert current["next_attempt_at"] - current["updated_at"] < timedelta(seconds=30)
