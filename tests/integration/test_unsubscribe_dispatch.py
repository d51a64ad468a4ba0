"""Unsubscribe links where the stack cannot make them (no public URL or key): a message that
would carry one is refused when scheduled, and a row already scheduled fails at dispatch
without being sent, rather than go out without the link its sender asked for."""

from __future__ import annotations

import pytest

from tests.engine import drain, row
from tests.fakes import LOOPBACK
from tests.fakes.postmark import TOKEN, FakePostmark
from tickwork import connections
from tickwork.actions import scheduling as actions
from tickwork.actions.model import NewAction
from tickwork.engine.tick import run_tick
from tickwork.platform.config import ActionTypeConfig
from tickwork.providers.postmark import PostmarkProvider
from tickwork.suppression.links import UnsubscribeUnavailableError

KEY = "k" * 32
EMAIL = {"to": "ann@example.com", "subject": "News", "text": "Hi"}


@pytest.fixture
def email(conn, workspace, runtime):
    fake = FakePostmark()
    runtime.settings = runtime.settings.model_copy(update={
        "action_types": {"email": ActionTypeConfig(provider="postmark")},
        "public_api_url": "https://api.example.com", "unsubscribe_key": KEY,
    })  # fmt: skip
    runtime.providers.register("email", PostmarkProvider({"api_url": fake.url}, 2.0, LOOPBACK))
    connection = connections.create(
        conn, workspace, name="News", provider="postmark",
        settings={"from": "news@example.com", "unsubscribe": True},
        credentials={"server_token": TOKEN}, store=runtime.secrets, created_by=None,
    )  # fmt: skip
    yield fake, connection.id
    fake.close()


def new(connection_id, now, **payload):
    return NewAction(action_type="email", target_key="ann", publish_at=now,
                     payload=EMAIL | payload, connection_id=connection_id)  # fmt: skip


def test_without_the_settings_a_message_wanting_a_link_is_refused_when_scheduled(
    conn, workspace, runtime, email, now
):
    _, connection_id = email
    bare = runtime.settings.model_copy(update={"public_api_url": None})
    with pytest.raises(UnsubscribeUnavailableError, match="public_api_url") as refused:
        actions.schedule(conn, workspace, new(connection_id, now), bare, now)
    assert refused.value.code == "unsubscribe_unavailable"
    # one that says it wants none is taken
    actions.schedule(conn, workspace, new(connection_id, now, unsubscribe=False), bare, now)


def test_a_row_whose_link_cannot_be_made_at_dispatch_fails_unsent(
    conn, workspace, runtime, email, now
):
    fake, connection_id = email
    # Scheduled while the stack could make links, dispatched after it no longer can
    action = actions.schedule(conn, workspace, new(connection_id, now), runtime.settings, now)
    runtime.settings = runtime.settings.model_copy(update={"unsubscribe_key": None})
    run_tick(conn, runtime.queues, runtime.settings)
    drain(runtime, "email")
    found = row(conn, action.action.id)
    assert (found["status"], found["error_code"]) == ("failed", "unsubscribe_unavailable")
    assert [r for r in fake.requests if r.path == "/email"] == []
