"""The API function as deployed: its runtime's only database is the API login (the
template gives it no other secret), and a row due soon still reaches its queue at once."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.conftest import make_workspace
from tests.handlers import FakeLambdaContext, load_handler
from tickwork import runtime
from tickwork.local.api_server import http_api_event
from tickwork.platform.config import Settings
from tickwork.platform.db import Database, api_login_url, connect
from tickwork.platform.queues.memory import InProcessQueues
from tickwork.providers import ProviderRegistry
from tickwork.workspaces import add_member


@pytest.fixture
def api_only_runtime(database_url):
    settings = Settings(
        database_url=database_url, action_types={"log": {"provider": "log"}}
    )  # the workers' URL is not used: db is the API login, as in AWS
    engine = runtime.Runtime(
        settings=settings,
        db=Database(api_login_url(database_url)),
        queues=InProcessQueues(visibility_timeout=30),
        providers=ProviderRegistry(settings),
    )
    runtime.install(engine)
    yield engine
    runtime.install(None)
    engine.db.close()


def call(method: str, path: str, workspace, body: dict | None = None) -> dict:
    headers = {"x-workspace-id": str(workspace), "content-type": "application/json"}
    event = http_api_event(
        method, path, headers, json.dumps(body) if body else None, {"sub": "alice"}, "127.0.0.1"
    )
    return load_handler("api").handler(event, FakeLambdaContext())


def test_a_row_due_soon_is_enqueued_by_the_api_login(conn, api_only_runtime):
    workspace = make_workspace(conn)
    add_member(conn, workspace, "alice", "admin")
    due = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    answer = call(
        "POST",
        "/v1/actions",
        workspace,
        {"action_type": "log", "target_key": "t", "publish_at": due, "payload": {}},
    )
    assert answer["statusCode"] == 201, answer["body"]
    created = json.loads(answer["body"])["id"]
    # Sent with the delay until it is due (about a second).
    (message,) = api_only_runtime.queues.queue("log").receive(10, wait_seconds=5)
    assert json.loads(message.body)["id"] == created
    with connect(api_only_runtime.settings.database_url) as owner:
        enqueued = owner.execute(
            "select enqueued_at is not null from action_queue where id = %s", (created,)
        ).fetchone()
    assert enqueued == (True,)


def test_the_api_login_sees_only_the_callers_workspace(conn, api_only_runtime):
    mine = make_workspace(conn, "mine")
    other = make_workspace(conn, "other")
    add_member(conn, mine, "alice", "admin")
    add_member(conn, other, "alice", "admin")
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    body = {"action_type": "log", "target_key": "t", "publish_at": later, "payload": {}}
    created = call("POST", "/v1/actions", other, body)
    assert created["statusCode"] == 201, created["body"]
    action_id = json.loads(created["body"])["id"]
    assert call("GET", f"/v1/actions/{action_id}", other)["statusCode"] == 200
    assert call("GET", f"/v1/actions/{action_id}", mine)["statusCode"] == 404
