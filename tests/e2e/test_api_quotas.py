"""Per-workspace quotas over real HTTP: each refusal is a clear 422 (or 429 with
Retry-After), writes nothing, and touches no other workspace; an operator's limits for one
workspace apply to it alone, and its members can read them but not change them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest

from tests.e2e.conftest import Api, running_api
from tests.e2e.test_api import at, create, error_of, webhook
from tests.waiting import wait_for
from tickwork import quotas
from tickwork.platform.config import Settings
from tickwork.platform.db import connect
from tickwork.quotas import QUOTA_NAMES
from tickwork.suppression import links

QUOTAS = {
    "quota_active_actions": 3,
    "quota_recurring_schedules": 2,
    "quota_schedule_window_rows": 100,
    "quota_api_requests_per_minute": 40,
}


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    with running_api(database_url, tmp_path, Settings(**QUOTAS)) as running:
        yield running


@pytest.fixture
def roomy_api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    """The same quotas, with room for the occurrences of a few daily schedules."""
    settings = Settings(**{**QUOTAS, "quota_active_actions": 10_000})
    with running_api(database_url, tmp_path, settings) as running:
        yield running


def count(database_url: str, table: str) -> int:
    with connect(database_url) as conn:
        row = conn.execute(f"select count(*) from {table}").fetchone()
    assert row is not None
    return int(row[0])


def daily(**overrides: object) -> dict[str, object]:
    return {"action_type": "webhook", "target_key": "primary", "rrule": "FREQ=DAILY", **overrides}


def test_active_actions_are_capped_per_workspace(api, database_url):
    for n in range(3):
        api.admin.call("POST", "/v1/actions", json=webhook(thing_id=f"t-{n}"))
    refused = api.admin.http.post("/v1/actions", json=webhook(thing_id="t-3"))
    error = error_of(refused, 422)
    assert error["code"] == "quota_exceeded"
    assert "3 active" in error["message"]
    assert error["details"]["quota"] == "active_actions"
    assert count(database_url, "scheduled_actions") == 3
    # an intent that would add rows is refused the same way, and writes nothing
    intent = {
        "action_type": "publish_post",
        "targets": ["instagram"],
        "date": "2027-05-20",
        "time": "09:00",
    }
    assert error_of(api.admin.http.put("/v1/things/p/intent", json=intent), 422)["code"] == (
        "quota_exceeded"
    )
    assert count(database_url, "schedule_intents") == 0
    # another workspace has its own quota
    assert api.outsider.http.post("/v1/actions", json=webhook()).status_code == 201
    # and cancelling frees room
    first = api.admin.call("GET", "/v1/actions", params={"from": at(0), "to": at(7200)})
    api.admin.call("POST", f"/v1/actions/{first['items'][0]['id']}/cancel")
    assert api.admin.http.post("/v1/actions", json=webhook(thing_id="t-3")).status_code == 201


def test_recurring_schedules_are_capped_per_workspace(roomy_api, database_url):
    api = roomy_api
    api.admin.call("POST", "/v1/recurring", json=daily(thing_id="a"))
    second = api.admin.call("POST", "/v1/recurring", json=daily(thing_id="b"))
    refused = api.admin.http.post("/v1/recurring", json=daily(thing_id="c"))
    error = error_of(refused, 422)
    assert error["code"] == "quota_exceeded"
    assert "2" in error["message"]
    assert count(database_url, "recurring_schedules") == 2
    api.admin.call("POST", f"/v1/recurring/{second['id']}/end")
    assert api.admin.http.post("/v1/recurring", json=daily(thing_id="c")).status_code == 201


def test_a_schedule_may_materialize_only_its_quota_of_rows(roomy_api, database_url):
    api = roomy_api
    # every 5 minutes for 14 days would be 4,032 rows; the quota here is 100
    refused = api.admin.http.post("/v1/recurring", json=daily(rrule="FREQ=MINUTELY;INTERVAL=5"))
    error = error_of(refused, 422)
    assert error["code"] == "quota_exceeded"
    assert "at most 100" in error["message"]
    assert error["details"]["rows"] == 4032
    assert count(database_url, "recurring_schedules") == 0
    assert count(database_url, "scheduled_actions") == 0
    # an edit to a denser rule is refused too, and the schedule stays as it was
    schedule = api.admin.call("POST", "/v1/recurring", json=daily())
    edit = api.admin.http.patch(
        f"/v1/recurring/{schedule['id']}", json={"rrule": "FREQ=HOURLY"}
    )  # 336 in 14 days
    assert error_of(edit, 422)["code"] == "quota_exceeded"
    assert api.admin.call("GET", f"/v1/recurring/{schedule['id']}")["rrule"] == "FREQ=DAILY"


def away_from_a_minute_boundary() -> None:
    """The rate is counted per wall-clock minute: start well inside one."""
    wait_for(lambda: datetime.now(UTC).second < 50, timeout=15, interval=0.2)


def test_the_api_rate_is_capped_per_workspace_with_retry_after(api):
    away_from_a_minute_boundary()
    statuses = [api.member.http.get("/v1/workspace").status_code for _ in range(45)]
    assert statuses[:40] == [200] * 40
    limited = api.admin.http.get("/v1/workspace")  # the same workspace, another user
    error = error_of(limited, 429)
    assert error["code"] == "rate_limited"
    assert "40 API requests" in error["message"]
    assert 1 <= int(limited.headers["Retry-After"]) <= 60
    assert set(statuses[40:]) == {429}
    # another workspace is not slowed down
    assert api.outsider.http.get("/v1/workspace").status_code == 200


# ------------------------------------------- caps on rules, recipients, events and the rate


def caps(**quotas: int) -> Settings:
    """Quotas off but for those named, so each test sees only the cap it is about."""
    off = {f"quota_{name}": 0 for name in QUOTA_NAMES}
    return Settings(**{**off, **{f"quota_{name}": value for name, value in quotas.items()}})


@contextmanager
def capped(database_url: str, tmp_path: Path, **quotas: int) -> Iterator[Api]:
    with running_api(database_url, tmp_path, caps(**quotas)) as running:
        yield running


def set_limits(database_url: str, workspace: str, **given: int) -> None:
    """As an operator does (`tickwork workspace limits`): as the owner, for one workspace."""
    with connect(database_url) as conn:
        quotas.set_limits(conn, UUID(workspace), Settings(), given)


def on_event(event_type: str, name: str = "r", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "trigger": {"type": "event", "event": event_type},
        "action": {"action_type": "log", "target_key": "guest", "payload": {"n": name}},
        **extra,
    }


def test_rules_are_capped_per_workspace(database_url, tmp_path):
    with capped(database_url, tmp_path, rules=3) as api:
        made = [api.admin.call("POST", "/v1/rules", json=on_event(f"e{n}")) for n in range(3)]
        refused = api.admin.http.post("/v1/rules", json=on_event("e3"))
        error = error_of(refused, 422)
        assert error["code"] == "quota_exceeded"
        assert "would have 4 rules; its quota is 3: delete one" in error["message"]
        assert error["details"] == {"quota": "rules", "limit": 3, "held": 3}
        assert count(database_url, "rules") == 3
        # a time rule is refused the same way, before it makes anything for known dates
        api.admin.call("PUT", "/v1/entities/booking/b1/dates", json={"dates": {"start": at(7200)}})
        timed = {
            "name": "t",
            "trigger": {
                "type": "time",
                "entity_type": "booking",
                "reference": "start",
                "offset_seconds": -60,
            },
            "action": {"action_type": "log", "target_key": "guest", "payload": {}},
        }
        assert error_of(api.admin.http.post("/v1/rules", json=timed), 422)["code"] == (
            "quota_exceeded"
        )
        assert count(database_url, "scheduled_actions") == 0
        # another workspace has its own count; deleting one frees room
        assert api.outsider.http.post("/v1/rules", json=on_event("e0")).status_code == 201
        api.admin.call("DELETE", f"/v1/rules/{made[0]['id']}")
        assert api.admin.http.post("/v1/rules", json=on_event("e3")).status_code == 201


def test_an_event_type_may_have_only_as_many_enabled_rules_as_an_event_may_make(
    database_url, tmp_path
):
    with capped(database_url, tmp_path, actions_per_event=2) as api:
        for name in ("a", "b"):
            api.admin.call("POST", "/v1/rules", json=on_event("booking.confirmed", name))
        refused = api.admin.http.post("/v1/rules", json=on_event("booking.confirmed", "c"))
        error = error_of(refused, 422)
        assert error["code"] == "quota_exceeded"
        assert "'booking.confirmed' would have 3 enabled rules" in error["message"]
        assert "disable one first" in error["message"]
        assert error["details"] == {
            "quota": "actions_per_event",
            "limit": 2,
            "held": 2,
            "field": "trigger.event_type",
        }
        # a disabled one may be kept ready, but not enabled while two are
        idle = api.admin.call(
            "POST", "/v1/rules", json=on_event("booking.confirmed", "c", enabled=False)
        )
        enable = api.admin.http.patch(f"/v1/rules/{idle['id']}", json={"enabled": True})
        assert error_of(enable, 422)["code"] == "quota_exceeded"
        assert api.admin.call("GET", f"/v1/rules/{idle['id']}")["enabled"] is False
        # nor may an enabled rule of another type move onto it
        other = api.admin.call("POST", "/v1/rules", json=on_event("booking.cancelled", "d"))
        move = api.admin.http.patch(
            f"/v1/rules/{other['id']}",
            json={"trigger": {"type": "event", "event": "booking.confirmed"}},
        )
        assert error_of(move, 422)["code"] == "quota_exceeded"
        assert api.admin.call("GET", f"/v1/rules/{other['id']}")["trigger"]["event"] == (
            "booking.cancelled"
        )
        # editing a rule already counted is not refused
        first = api.admin.call("GET", "/v1/rules")["items"][0]
        renamed = api.admin.call("PATCH", f"/v1/rules/{first['id']}", json={"name": "a2"})
        assert renamed["name"] == "a2"


def test_an_event_that_would_make_more_actions_than_the_cap_is_refused_whole(
    database_url, tmp_path
):
    with capped(database_url, tmp_path, actions_per_event=10) as api:
        for name in ("a", "b", "c"):
            api.admin.call("POST", "/v1/rules", json=on_event("order.paid", name))
        vip = {"path": "context.vip", "op": "eq", "value": True}
        api.admin.call("POST", "/v1/rules", json=on_event("order.paid", "v", conditions=[vip]))
        for name in ("a", "b", "c", "v"):
            api.outsider.call("POST", "/v1/rules", json=on_event("order.paid", name))
        # the operator lowers the cap for this workspace alone, below its four rules
        set_limits(database_url, api.workspace_a, actions_per_event=3)
        # three rules' conditions hold: within the cap
        plain = api.admin.call(
            "POST", "/v1/events", json={"type": "order.paid", "entities": {"order": "o1"}}
        )
        assert plain["executions_created"] == 3
        # four would: refused before anything is written
        before = count(database_url, "scheduled_actions")
        refused = api.admin.http.post(
            "/v1/events",
            json={"type": "order.paid", "entities": {"order": "o2"}, "context": {"vip": True}},
        )
        error = error_of(refused, 422)
        assert error["code"] == "quota_exceeded"
        assert "would make 4 actions" in error["message"]
        assert "at most 3" in error["message"]
        assert error["details"] == {
            "quota": "actions_per_event",
            "limit": 3,
            "actions": 4,
            "field": "type",
        }
        assert count(database_url, "scheduled_actions") == before
        assert count(database_url, "rule_actions") == before
        # the other workspace keeps the stack's cap of 10
        other = api.outsider.call(
            "POST",
            "/v1/events",
            json={"type": "order.paid", "entities": {"order": "o2"}, "context": {"vip": True}},
        )
        assert other["executions_created"] == 4


def recipient(api_client: Any, recipient_id: str) -> int:
    response = api_client.http.put(f"/v1/recipients/{recipient_id}", json={"timezone": "UTC"})
    return int(response.status_code)


def test_recipients_are_capped_per_workspace(database_url, tmp_path):
    with capped(database_url, tmp_path, recipients=2) as api:
        assert [recipient(api.admin, r) for r in ("ann", "bob")] == [201, 201]
        refused = api.admin.http.put("/v1/recipients/cy", json={"timezone": "UTC"})
        error = error_of(refused, 422)
        assert error["code"] == "quota_exceeded"
        assert "more than 2 recipients, its quota" in error["message"]
        assert error["details"] == {"quota": "recipients", "limit": 2}
        assert count(database_url, "recipients") == 2
        # replacing one is no new recipient; another workspace has its own count
        assert recipient(api.admin, "ann") == 200
        assert recipient(api.outsider, "cy") == 201
        api.admin.http.delete("/v1/recipients/bob")
        assert recipient(api.admin, "cy") == 201


def test_suppressions_added_through_the_api_are_capped_and_consent_is_never_refused(
    database_url, tmp_path
):
    with capped(database_url, tmp_path, suppressions=2) as api:

        def add(client: Any, address: str) -> Any:
            return client.http.post("/v1/suppressions", json={"channel": "email",
                                                              "address": address})  # fmt: skip

        # Given a workspace at its quota of two entries
        assert [add(api.admin, a).status_code for a in ("a@example.com", "b@example.com")] == [
            201, 201]  # fmt: skip
        # When a member adds a third, then it is refused and nothing is written
        error = error_of(add(api.member, "c@example.com"), 422)
        assert error["code"] == "quota_exceeded"
        assert "more than 2 entries, its quota" in error["message"]
        assert error["details"] == {"quota": "suppressions", "limit": 2}
        assert count(database_url, "suppressions") == 2
        # An address already on the list is no new entry; another workspace has its own count
        assert add(api.admin, "A@Example.com").status_code == 200
        assert add(api.outsider, "c@example.com").status_code == 201
        # A person's own unsubscribe is taken over the quota: consent is never refused
        key = api.local.settings.unsubscribe_key
        assert key is not None
        token = links.sign(key, UUID(api.workspace_a), "email", "d@example.com")
        click = httpx.post(f"{api.url}/v1/unsubscribe/{token}",
                           data={"List-Unsubscribe": "One-Click"})  # fmt: skip
        assert click.status_code == 200, click.text
        mine = api.admin.call("GET", "/v1/suppressions")["items"]
        assert sorted(e["address"] for e in mine) == [
            "a@example.com", "b@example.com", "d@example.com"]  # fmt: skip
        # An operator raises the quota for this workspace alone
        set_limits(database_url, api.workspace_a, suppressions=10)
        assert api.member.call("GET", "/v1/workspace")["limits"]["suppressions"] == 10
        assert add(api.member, "c@example.com").status_code == 201
        assert api.outsider.call("GET", "/v1/workspace")["limits"]["suppressions"] == 2


def digest_rule(event_type: str) -> dict[str, Any]:
    """A rule that collects its events into one digest per post, sent in the morning."""
    return on_event(event_type, action={
        "action_type": "log", "target_key": "guest", "payload": {"n": "{{ count }}"},
        "digest": {"key": "{{ context.post }}", "window": {"until": "08:00"}}})  # fmt: skip


def test_digests_collecting_are_capped_per_workspace(database_url, tmp_path):
    with capped(database_url, tmp_path, digests=2) as api:
        api.admin.call("POST", "/v1/rules", json=digest_rule("comment.added"))

        def comment(client: Any, n: int, post: str) -> Any:
            return client.http.post("/v1/events", json={
                "type": "comment.added", "id": f"c{n}", "context": {"post": post}})  # fmt: skip

        # Given two digests collecting (posts a and b), one of them holding two events
        assert [comment(api.admin, n, p).status_code for n, p in enumerate("aba")] == [200] * 3
        assert count(database_url, "digests") == 2
        # When an event would open a third, then the event is refused whole
        error = error_of(comment(api.member, 3, "c"), 422)
        assert error["code"] == "quota_exceeded"
        assert "more than 2 digests collecting" in error["message"]
        assert error["details"] == {"quota": "digests", "limit": 2}
        assert (count(database_url, "digests"), count(database_url, "digest_items")) == (2, 3)
        assert count(database_url, "scheduled_actions") == 2
        # An event that joins an open digest is still taken
        assert comment(api.admin, 4, "b").status_code == 200
        # A digest cancelled (or sent) no longer collects: room for the next
        [newest, *_] = api.admin.call("GET", "/v1/digests", params={"status": "open"})["items"]
        api.admin.call("POST", f"/v1/digests/{newest['id']}/cancel")
        assert comment(api.admin, 3, "c").status_code == 200
        # Another workspace has its own count, and an operator may lift it (0: no quota)
        api.outsider.call("POST", "/v1/rules", json=digest_rule("comment.added"))
        assert [comment(api.outsider, n, p).status_code for n, p in enumerate("xy")] == [200] * 2
        set_limits(database_url, api.workspace_a, digests=0)
        assert comment(api.admin, 5, "d").status_code == 200
        assert api.member.call("GET", "/v1/workspace")["limits"]["digests"] == 0


def test_actions_created_per_minute_are_capped_across_every_way_in(database_url, tmp_path):
    with capped(database_url, tmp_path, actions_per_minute=6) as api:
        api.admin.call("POST", "/v1/rules", json=on_event("signed.up"))
        away_from_a_minute_boundary()
        # a request that alone makes more than a minute's worth can never pass: 422
        daily_rows = api.admin.http.post("/v1/recurring", json=daily())  # 14 days, 14 rows
        error = error_of(daily_rows, 422)
        assert error["code"] == "quota_exceeded"
        assert "actions at once; the workspace may create at most 6 a minute" in error["message"]
        assert error["details"]["actions"] >= 13
        assert count(database_url, "recurring_schedules") == 0
        # six made, each way counted: create, an event, an intent, a reschedule, run now
        first = create(api)
        create(api)
        api.admin.call("POST", "/v1/events", json={"type": "signed.up"})
        intent = {"action_type": "publish_post", "targets": ["instagram"], "publish_at": at(7200)}
        api.admin.call("PUT", "/v1/things/p/intent", json=intent)
        moved = api.admin.call(
            "POST", f"/v1/actions/{first['id']}/reschedule", json={"publish_at": at(5400)}
        )
        tomorrow = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
        monthly = daily(rrule="FREQ=MONTHLY", dtstart=tomorrow, timezone="UTC")
        weekly = api.admin.call("POST", "/v1/recurring", json=monthly)  # one row in 14 days
        rows = count(database_url, "scheduled_actions")
        assert rows == 6  # the first one, cancelled by its reschedule, and five queued
        # the seventh is refused, whatever the way in, and writes nothing
        refusals = [
            api.admin.http.post("/v1/actions", json=webhook()),
            api.admin.http.post(f"/v1/actions/{moved['id']}/send-now"),
            api.admin.http.post(
                "/v1/events", json={"type": "signed.up", "entities": {"user": "u2"}}
            ),
            api.admin.http.post(f"/v1/recurring/{weekly['id']}/run-now"),
            api.member.http.put("/v1/things/q/intent", json=intent),
        ]
        for refused in refusals:
            error = error_of(refused, 429)
            assert error["code"] == "rate_limited"
            assert "created 6 actions this minute" in error["message"]
            assert "its quota is 6 a minute" in error["message"]
            assert error["details"]["quota"] == "actions_per_minute"
            assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert count(database_url, "scheduled_actions") == rows
        assert count(database_url, "schedule_intents") == 1
        assert api.admin.call("GET", f"/v1/actions/{moved['id']}")["status"] == "queued"
        # reads go on, and another workspace is not limited by this one's count
        assert api.admin.http.get("/v1/actions").status_code == 200
        assert api.outsider.http.post("/v1/actions", json=webhook()).status_code == 201
        # a new window starts the count again
        with connect(database_url) as conn:
            conn.execute(
                "update workspace_action_usage set window_start = window_start - interval '1 min'"
            )
        assert api.admin.http.post("/v1/actions", json=webhook()).status_code == 201


def test_an_operator_raises_and_lowers_a_workspaces_quotas_for_it_alone(database_url, tmp_path):
    with capped(database_url, tmp_path, active_actions=2, api_requests_per_minute=1000) as api:
        set_limits(database_url, api.workspace_a, active_actions=4)
        for n in range(4):
            create(api, thing_id=f"a-{n}")
        refused = api.admin.http.post("/v1/actions", json=webhook(thing_id="a-4"))
        assert "more than 4 active" in error_of(refused, 422)["message"]
        for _ in range(2):
            assert api.outsider.http.post("/v1/actions", json=webhook()).status_code == 201
        refused = api.outsider.http.post("/v1/actions", json=webhook())
        assert "more than 2 active" in error_of(refused, 422)["message"]
        # members read their workspace's limits; each workspace sees its own
        mine = api.member.call("GET", "/v1/workspace")["limits"]
        assert (mine["active_actions"], mine["rules"]) == (4, 0)
        assert api.outsider.call("GET", "/v1/workspace")["limits"]["active_actions"] == 2
        # lowered for one workspace, the rate refuses it and not the other
        set_limits(database_url, api.workspace_a, api_requests_per_minute=1)
        with connect(database_url) as conn:
            conn.execute("delete from workspace_api_usage")
        away_from_a_minute_boundary()
        assert api.admin.http.get("/v1/workspace").status_code == 200
        assert "1 API requests" in error_of(api.admin.http.get("/v1/workspace"), 429)["message"]
        assert api.outsider.http.get("/v1/workspace").status_code == 200


def test_a_tenant_admin_cannot_change_the_workspaces_limits(database_url, tmp_path):
    with capped(database_url, tmp_path, rules=5) as api:
        set_limits(database_url, api.workspace_a, recipients=7)
        patch = api.admin.http.patch("/v1/workspace", json={"limits": {"rules": 10_000}})
        assert error_of(patch, 422)["code"] == "invalid_input"
        # settings are the tenant's own: a "limits" key there is only data
        changed = api.admin.call(
            "PATCH", "/v1/workspace", json={"settings": {"limits": {"rules": 10_000}}}
        )
        assert changed["settings"] == {"limits": {"rules": 10_000}}
        assert (changed["limits"]["rules"], changed["limits"]["recipients"]) == (5, 7)
        with connect(database_url) as conn:
            stored = conn.execute("select limits from workspaces where name = 'Acme'").fetchone()
        assert stored == ({"recipients": 7},)
