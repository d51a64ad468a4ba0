"""Events carry the stored context, over real HTTP against the local runtime: an event names
a booking and a guest by id; the rule's template reads their stored fields; what the
provider receives is what they were at the event."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from tests.e2e.test_api import arrived_ids, error_of
from tests.waiting import wait_for

LOAD = {"guest": {"entity_type": "guest", "id": "{{ event.entities.guest }}"},
        "booking": {"entity_type": "booking"}}  # fmt: skip


def reminder_rule(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "welcome",
        "trigger": {"type": "event", "event": "booking.confirmed"},
        "load": LOAD,
        "action": {"action_type": "webhook", "target_key": "primary",
                   "payload": {"text": "Hi {{ guest.name }}, see you at {{ booking.start }}"}},
    }  # fmt: skip
    body.update(overrides)
    return body


def store_guest(api: Any, name: str, guest_id: str = "g-1") -> Any:
    return api.admin.http.put(f"/v1/entities/guest/{guest_id}/context",
                              json={"context": {"name": name}})  # fmt: skip


def confirmed(guest_id: str = "g-1") -> dict[str, Any]:
    return {"type": "booking.confirmed", "entities": {"booking": "bk-1", "guest": guest_id}}


def test_the_guests_stored_name_and_the_bookings_stored_time_reach_the_provider(api):
    # Given a guest stored by its fields and a booking by its date
    created = store_guest(api, "Ada")
    assert created.status_code == 201, created.text
    assert created.json()["context"] == {"name": "Ada"}
    start = (datetime.now(UTC) + timedelta(days=3)).replace(microsecond=0)
    booking = {"dates": {"start": start.isoformat()}, "timezone": "Asia/Tokyo"}
    api.admin.call("PUT", "/v1/entities/booking/bk-1/dates", json=booking)
    rule = api.admin.call("POST", "/v1/rules", json=reminder_rule())
    assert rule["load"]["booking"] == {"entity_type": "booking",
                                       "id": "{{ event.entities.booking }}"}  # fmt: skip
    # When the app posts an event naming them by id
    result = api.admin.call("POST", "/v1/events", json=confirmed())
    [made] = result["created"]
    # And the guest is renamed before the action is delivered
    renamed = store_guest(api, "Grace")
    assert renamed.status_code == 200
    # Then the provider receives what the guest and the booking were at the event
    wait_for(lambda: made["action_id"] in arrived_ids(api))
    [delivery] = api.local.receiver.deliveries
    assert delivery.body["data"]["payload"] == {
        "text": f"Hi Ada, see you at {start.astimezone(ZoneInfo('Asia/Tokyo')).isoformat()}"
    }
    # And why says which stored entities the action was made with
    why = api.admin.call("GET", f"/v1/actions/{made['action_id']}/why")
    [created_step] = [step for step in why["steps"] if step["code"] == "created"]
    assert "with the stored booking bk-1, guest g-1 as of the event" in created_step["text"]
    assert created_step["details"]["loaded"] == [
        {"name": "booking", "entity_type": "booking", "entity_id": "bk-1"},
        {"name": "guest", "entity_type": "guest", "entity_id": "g-1"},
    ]
    # And a duplicate delivery of the event makes nothing more
    again = api.admin.call("POST", "/v1/events", json=confirmed())
    assert again["created"] == []
    assert again["duplicates_skipped"] == 1


def test_a_missing_guest_fails_that_rule_only_and_the_answer_says_so(api):
    api.admin.call("PUT", "/v1/entities/booking/bk-1/dates", json={"dates": {}})
    needs_guest = api.admin.call("POST", "/v1/rules", json=reminder_rule())
    other = api.admin.call("POST", "/v1/rules", json=reminder_rule(
        name="booking only", load={"booking": {"entity_type": "booking"}},
        action={"action_type": "log", "target_key": "x", "payload": {"b": "{{ booking.id }}"}},
    ))  # fmt: skip
    result = api.admin.call("POST", "/v1/events", json=confirmed("g-404"))
    assert result["success"] is False
    assert result["rule_ids"] == [other["id"]]
    [failed] = result["failed"]
    assert failed["rule_id"] == needs_guest["id"]
    assert failed["code"] == "missing_entity"
    assert (failed["entity_type"], failed["entity_id"]) == ("guest", "g-404")
    assert failed["field"] == "load.guest"
    assert "g-404" in result["error"]


def test_a_load_that_cannot_be_used_is_a_422_invalid_load(api):
    response = api.admin.http.post(
        "/v1/rules", json=reminder_rule(load={"event": {"entity_type": "guest"}})
    )
    error = error_of(response, 422)
    assert error["code"] == "invalid_load"
    assert error["details"]["field"] == "load.event"
    rule = api.admin.call("POST", "/v1/rules", json=reminder_rule())
    patched = api.admin.http.patch(
        f"/v1/rules/{rule['id']}", json={"load": {"guest": {"entity_type": "Guest"}}}
    )
    assert error_of(patched, 422)["code"] == "invalid_load"
