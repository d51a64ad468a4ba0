"""/v1/event-endpoints over real HTTP against the local runtime: the secret answered once,
the URL checked and shown masked, filters changed, and an action's outcome arriving at the
endpoint signed per Standard Webhooks, sent by the runtime's own `event` dispatcher."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.e2e.conftest import Api
from tests.e2e.test_api import error_of
from tests.fakes.event_receiver import event_receiver
from tests.waiting import wait_for
from tickwork.engine.tick import run_tick
from tickwork.platform.db import connect


def tick(api: Api) -> None:
    rt = api.local.runtime
    with connect(api.local.database_url) as conn:
        run_tick(conn, rt.queues, rt.settings)


def test_an_endpoint_gets_signed_outcome_events_sent_by_the_engine(api: Api):
    with event_receiver() as receiver:
        # Given an endpoint for published actions (loopback: the local runtime allows it)
        created = api.admin.call("POST", "/v1/event-endpoints", json={
            "url": receiver.url + "?token=abc123", "event_types": ["action.published"],
        })  # fmt: skip
        receiver.secret = created["secret"]
        assert created["secret"].startswith("whsec_")
        assert "abc123" not in created["url"]  # masked
        # the secret is never shown again
        listed = api.admin.call("GET", "/v1/event-endpoints")["items"]
        assert [e["id"] for e in listed] == [created["id"]]
        assert "secret" not in listed[0]
        one = api.member.call("GET", f"/v1/event-endpoints/{created['id']}")
        assert "secret" not in one
        # nor is its connection among the workspace's connections
        assert api.admin.call("GET", "/v1/connections")["items"] == []
        # When an action is published
        action = api.admin.call("POST", "/v1/actions", json={
            "action_type": "log", "target_key": "t", "payload": {"secret": "not for events"},
            "publish_at": datetime.now(UTC).isoformat(),
        })  # fmt: skip

        def arrived() -> bool:
            tick(api)
            return bool(receiver.accepted())

        # Then the endpoint gets one signed event, with the action's public fields only
        wait_for(arrived, 20.0, message=lambda: f"received {receiver.received}")
        [event] = receiver.accepted()
        assert event.verified
        assert event.event["type"] == "action.published"
        assert event.event["data"]["id"] == action["id"]
        assert "not for events" not in str(event.event)


def test_endpoint_rules_answer_with_codes(api: Api):
    # A private address is refused as the docs' unsafe_url
    body = {"url": "http://169.254.169.254/latest/meta-data", "event_types": ["action.failed"]}
    response = api.admin.http.post("/v1/event-endpoints", json=body)
    assert error_of(response, 422)["code"] == "unsafe_url"
    # An unknown event type is a validation error
    body = {"url": "https://example.com/hook", "event_types": ["action.exploded"]}
    assert api.admin.http.post("/v1/event-endpoints", json=body).status_code == 422
    # Members read, admins change
    body = {"url": "https://93.184.215.14/hook", "event_types": ["action.failed"]}
    assert api.member.http.post("/v1/event-endpoints", json=body).status_code == 403
    created = api.admin.call("POST", "/v1/event-endpoints", json=body)
    path = f"/v1/event-endpoints/{created['id']}"
    changed = api.admin.call("PATCH", path, json={
        "status": "disabled", "event_types": ["action.failed", "action.cancelled"],
        "action_types": ["email"],
    })  # fmt: skip
    assert (changed["status"], changed["event_types"], changed["action_types"]) == (
        "disabled", ["action.cancelled", "action.failed"], ["email"],
    )  # fmt: skip
    cleared = api.admin.call("PATCH", path, json={"action_types": []})
    assert cleared["action_types"] is None
    # Another workspace does not see it
    assert api.outsider.http.get(path).status_code == 404
    assert api.admin.call("DELETE", path)["status"] == "deleted"
    assert api.admin.http.get(path).status_code == 404
    assert api.admin.call("GET", "/v1/event-endpoints")["items"] == []
