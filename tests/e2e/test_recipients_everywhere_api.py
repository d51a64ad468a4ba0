"""Recipients everywhere over real HTTP: one-offs, recurring schedules and intents read a
wall time with no zone in the recipient's zone (else the workspace's) and say which; their
rows carry the recipient, so quiet hours move them; an unknown or foreign recipient is the
one-offs' 422."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from tests.e2e.test_api import error_of

TOKYO = ZoneInfo("Asia/Tokyo")
NIGHTS = [{"start": "21:00", "end": "08:00"}]


def tokyo_tomorrow() -> str:
    return (datetime.now(TOKYO).date() + timedelta(days=1)).isoformat()


def test_every_producer_reads_a_zoneless_wall_time_in_the_recipients_zone(api):
    api.admin.call("PUT", "/v1/recipients/ann", json={"timezone": "Asia/Tokyo",
                                                       "quiet_hours": NIGHTS})  # fmt: skip
    day = tokyo_tomorrow()
    asked = datetime.fromisoformat(f"{day}T23:30").replace(tzinfo=TOKYO)
    morning = asked + timedelta(hours=8, minutes=30)
    base: dict[str, Any] = {"action_type": "webhook", "target_key": "primary",
                            "payload": {"text": "hi"}}  # fmt: skip

    one_off = api.admin.call(
        "POST", "/v1/actions", json={**base, "date": day, "time": "23:30", "recipient_id": "ann"}
    )
    assert (one_off["timezone"], one_off["timezone_from"]) == ("Asia/Tokyo", "recipient")
    assert one_off["resolved"]["timezone"] == "Asia/Tokyo"
    assert datetime.fromisoformat(one_off["publish_at"]) == morning  # moved by quiet hours
    assert datetime.fromisoformat(one_off["original_publish_at"]) == asked
    plain = api.admin.call("POST", "/v1/actions", json={**base, "date": day, "time": "23:30"})
    assert (plain["timezone"], plain["timezone_from"]) == ("America/New_York", "workspace")
    given = api.admin.call(
        "POST", "/v1/actions",
        json={**base, "date": day, "time": "23:30", "timezone": "UTC", "recipient_id": "ann"},
    )  # fmt: skip
    assert given["timezone_from"] == "given"
    moved = api.admin.call(
        "POST", f"/v1/actions/{plain['id']}/reschedule", json={"date": day, "time": "10:00"}
    )
    assert moved["timezone_from"] == "workspace"

    schedule = api.admin.call(
        "POST", "/v1/recurring",
        json={**base, "rrule": "FREQ=DAILY;BYHOUR=23;BYMINUTE=30;BYSECOND=0",
              "recipient_id": "ann", "render_payload": True,
              "payload": {"text": "#{{ occurrence.index }} on {{ occurrence.local_date }}"}},
    )  # fmt: skip
    assert (schedule["timezone"], schedule["timezone_from"]) == ("Asia/Tokyo", "recipient")
    assert (schedule["recipient_id"], schedule["render_payload"]) == ("ann", True)
    fetched = api.admin.call("GET", f"/v1/recurring/{schedule['id']}")
    assert fetched["timezone_from"] == "recipient"

    intent = api.admin.call(
        "PUT", "/v1/things/post-1/intent",
        json={"action_type": "webhook", "targets": ["primary"], "date": day, "time": "23:30",
              "recipient_id": "ann"},
    )  # fmt: skip
    assert (intent["timezone"], intent["timezone_from"]) == (None, "recipient")
    assert intent["resolved"]["timezone"] == "Asia/Tokyo"
    [row] = intent["actions"]
    assert datetime.fromisoformat(row["publish_at"]) == morning
    assert row["recipient_id"] == "ann"


def test_an_unknown_or_foreign_recipient_is_the_same_422_everywhere(api):
    api.outsider.call("PUT", "/v1/recipients/bob", json={"timezone": "UTC"})
    day = tokyo_tomorrow()
    base: dict[str, Any] = {"action_type": "webhook", "payload": {}}
    requests = [
        ("POST", "/v1/actions", {**base, "target_key": "primary", "date": day, "time": "09:00"}),
        ("POST", "/v1/recurring", {**base, "target_key": "primary", "rrule": "FREQ=DAILY"}),
        ("PUT", "/v1/things/t-1/intent",
         {**base, "targets": ["primary"], "date": day, "time": "09:00"}),
    ]  # fmt: skip
    for method, path, body in requests:
        for name in ("nobody", "bob"):
            response = api.admin.http.request(method, path, json={**body, "recipient_id": name})
            assert error_of(response, 422)["code"] == "unknown_recipient", path


def test_a_recurring_template_that_does_not_compile_is_a_422(api):
    response = api.admin.http.post(
        "/v1/recurring",
        json={"action_type": "webhook", "target_key": "primary", "rrule": "FREQ=DAILY",
              "render_payload": True, "payload": {"text": "{{ occurrence.index"}},
    )  # fmt: skip
    assert error_of(response, 422)["code"] == "invalid_template"
