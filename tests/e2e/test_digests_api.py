"""/v1/digests over real HTTP against the local runtime: a digest rule's events become one
webhook listing them all; a digest is visible with its items and window, and can be
flushed or cancelled while it collects."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

from tests.e2e.conftest import Api
from tests.e2e.test_api import arrived_ids, error_of
from tests.waiting import wait_for
from tickwork.local.demo import ApiClient

LISTING = "{{ count }}: {{ items | map(attribute='context.n') | join(',') }}"


def digest_rule(api: Api, window: dict[str, Any], **digest: Any) -> dict[str, Any]:
    body = {
        "name": "comments",
        "trigger": {"type": "event", "event": "comment.added"},
        "action": {"action_type": "webhook", "target_key": "primary",
                   "payload": {"text": LISTING, "first": "{{ first.context.n }}",
                               "last": "{{ last.context.n }}"},
                   "digest": {"window": window} | digest},
    }  # fmt: skip
    return api.admin.call("POST", "/v1/rules", json=body)


def comment(api: Api, n: int, event_id: str | None = None) -> dict[str, Any]:
    body = {"type": "comment.added", "context": {"n": n}, "id": event_id or f"evt-{n}"}
    return api.admin.call("POST", "/v1/events", json=body)


def test_events_become_one_webhook_listing_them_and_the_digest_shows_what_it_holds(api):
    # Given a digest rule with a 3-second window
    rule = digest_rule(api, {"seconds": 3})
    assert rule["action"]["digest"] == {"window": {"seconds": 3}}
    # When five events come, one of them twice
    first = comment(api, 0)
    [made] = first["created"]
    answers = [comment(api, n) for n in range(1, 5)] + [comment(api, 2)]
    assert [a["skipped"][0]["reason"] for a in answers] == ["digested"] * 4 + ["duplicate"]
    # Then the digest is listed as open, holding five items, with its window and action
    page = api.member.call("GET", "/v1/digests", params={"status": "open"})
    [digest] = page["items"]
    assert (digest["rule_id"], digest["item_count"], digest["action_id"]) == (
        rule["id"], 5, made["action_id"])  # fmt: skip
    assert digest["window"] == {"seconds": 3}
    detail = api.member.call("GET", f"/v1/digests/{digest['id']}")
    assert [i["data"]["context"]["n"] for i in detail["items"]] == [0, 1, 2, 3, 4]
    assert [i["item_key"] for i in detail["items"]] == [f"evt-{n}" for n in range(5)]
    why = api.member.call("GET", f"/v1/actions/{made['action_id']}/why")
    [told] = [s for s in why["steps"] if s["code"] == "digest"]
    assert "events join it until it is claimed" in told["text"]
    # And at the window's end, one webhook lists them all
    wait_for(lambda: made["action_id"] in arrived_ids(api), timeout=15)
    [delivery] = api.local.receiver.deliveries
    assert delivery.body["data"]["payload"] == {"text": "5: 0,1,2,3,4", "first": "0", "last": "4"}
    done = api.member.call("GET", f"/v1/digests/{digest['id']}")
    assert (done["status"], done["action_status"]) == ("closed", "published")
    # The action's change log says it is a digest
    action = api.member.call("GET", f"/v1/actions/{made['action_id']}")
    assert action["digest_id"] == digest["id"]
    assert [c["kind"] for c in action["changes"]] == ["digest"]
    assert digest["id"] in action["changes"][0]["reason"]


def post_comments(url: str, token: str, workspace: str, numbers: list[int], start: Any) -> None:
    """One producer process: each comment of `numbers` through the API."""
    client = ApiClient(url, token, workspace)
    start.wait()
    for n in numbers:
        answer = client.call("POST", "/v1/events", json={
            "type": "comment.added", "context": {"n": n}, "id": f"evt-{n}"})  # fmt: skip
        assert answer["success"], answer


def test_four_producer_processes_sending_every_event_twice_make_one_digest_of_fifty(api):
    # Given a digest rule with a one-minute window
    digest_rule(api, {"seconds": 60})
    token = api.admin.http.headers["Authorization"].removeprefix("Bearer ")
    # When four processes post 50 events, each event twice, by two different processes
    deliveries = [n for n in range(50) for _ in range(2)]
    spawn = multiprocessing.get_context("spawn")
    start = spawn.Barrier(4)
    producers = [
        spawn.Process(target=post_comments,
                      args=(api.url, token, api.workspace_a, deliveries[i::4], start))
        for i in range(4)
    ]  # fmt: skip
    for process in producers:
        process.start()
    for process in producers:
        process.join(60)
    assert [p.exitcode for p in producers] == [0, 0, 0, 0]
    # Then one digest holds the 50 events, each once, and one action sends them
    [digest] = api.admin.call("GET", "/v1/digests")["items"]
    assert (digest["status"], digest["item_count"]) == ("open", 50)
    detail = api.admin.call("GET", f"/v1/digests/{digest['id']}")
    assert sorted(i["data"]["context"]["n"] for i in detail["items"]) == list(range(50))
    action = api.admin.call("GET", f"/v1/actions/{digest['action_id']}")
    assert action["payload"]["text"].startswith("50: ")


def test_a_debounced_digest_fires_once_the_events_pause_not_at_the_next_tick(api):
    # Given a debounce of 2 s quiet (the local tick runs once a minute)
    digest_rule(api, {"quiet_seconds": 2, "max_seconds": 60})
    # When two events come 1.2 s apart, the second moving the digest's time past what a
    # dispatcher claims early (the message sent for the first time is then stale)
    [made] = comment(api, 1)["created"]
    first_event = time.time()
    wait_for(lambda: time.time() - first_event >= 1.2, timeout=5)  # the pause under test
    comment(api, 2)
    last_event = time.time()
    # Then one webhook, 2 s after the last event, lists both
    wait_for(lambda: made["action_id"] in arrived_ids(api), timeout=15)
    [delivery] = api.local.receiver.deliveries
    assert delivery.body["data"]["payload"]["text"] == "2: 1,2"
    assert delivery.arrived_at - last_event >= 1.5
    changes = api.admin.call("GET", f"/v1/actions/{made['action_id']}")["changes"]
    assert [c["kind"] for c in changes] == ["digest", "digest"]


def test_a_digest_can_be_flushed_or_cancelled_once_while_it_collects(api):
    rule = digest_rule(api, {"until": "08:00"})
    comment(api, 1)
    [open_digest] = api.admin.call("GET", "/v1/digests", params={"rule_id": rule["id"]})["items"]
    flushed = api.admin.call("POST", f"/v1/digests/{open_digest['id']}/flush")
    assert flushed["status"] == "flushed"
    wait_for(lambda: open_digest["action_id"] in arrived_ids(api), timeout=15)
    again = api.admin.http.post(f"/v1/digests/{open_digest['id']}/flush")
    assert error_of(again, 409)["code"] == "digest_not_open"
    # A later event opens the next digest, which can be cancelled with its action
    comment(api, 2)
    nxt = api.admin.call("GET", "/v1/digests", params={"status": "open"})["items"][0]
    assert nxt["id"] != open_digest["id"]
    cancelled = api.admin.call("POST", f"/v1/digests/{nxt['id']}/cancel")
    assert (cancelled["status"], cancelled["action_status"]) == ("cancelled", "cancelled")
    assert error_of(api.admin.http.post(f"/v1/digests/{nxt['id']}/cancel"), 409)["code"] == (
        "digest_not_open"
    )
    # Another workspace sees none of it
    assert error_of(api.outsider.http.get(f"/v1/digests/{nxt['id']}"), 404)["code"] == "not_found"
    assert api.outsider.call("GET", "/v1/digests")["items"] == []
    assert error_of(api.admin.http.get("/v1/digests/nope"), 404)["code"] == "not_found"


def test_a_digest_that_is_not_one_is_a_422_naming_the_field(api):
    body = {
        "name": "bad", "trigger": {"type": "event", "event": "e"},
        "action": {"action_type": "webhook", "target_key": "primary",
                   "digest": {"window": {"quiet_seconds": 60}}},
    }  # fmt: skip
    error = error_of(api.admin.http.post("/v1/rules", json=body), 422)
    assert error["code"] == "invalid_digest"
    assert error["details"]["field"] == "action.digest.window"


def test_a_per_key_limit_sends_one_now_and_a_digest_of_the_excess_later(api):
    # Given a rule sending at most one message an hour per user, the excess collected
    # into a digest that closes 3 s after its first event
    rule = api.admin.call("POST", "/v1/rules", json={
        "name": "mentions", "trigger": {"type": "event", "event": "comment.added"},
        "action": {"action_type": "webhook", "target_key": "primary",
                   "payload": {"text": "{{ count | default(1) }}: {{ (items | default([]))"
                                       " | map(attribute='context.n') | join(',') }}"},
                   "limit": {"key": "{{ context.user }}", "count": 1, "per_seconds": 3600,
                             "excess": "digest", "digest_window": {"seconds": 3}}},
    })  # fmt: skip
    assert rule["action"]["limit"]["digest_window"] == {"seconds": 3}
    # When five comments mention ann, the third one delivered twice (a rule's firing is
    # one per event type and entities a day: each comment names its own)
    answers = [
        api.admin.call("POST", "/v1/events", json={
            "type": "comment.added", "entities": {"comment": f"c{n}"},
            "context": {"n": n, "user": "ann"}, "id": f"evt-{n}"})
        for n in (0, 1, 2, 3, 4, 2)
    ]  # fmt: skip
    [alone] = answers[0]["created"]
    [collecting] = answers[1]["created"]
    assert [a["skipped"][0]["reason"] for a in answers[2:]] == ["digested"] * 3 + ["duplicate"]
    # Then the digest is listed as the limit's, holding the four over the limit
    [digest] = api.member.call("GET", "/v1/digests", params={"rule_id": rule["id"]})["items"]
    assert (digest["source"], digest["item_count"], digest["action_id"]) == (
        "limit", 4, collecting["action_id"])  # fmt: skip
    # And ann gets the first message now and one digest of the four others later
    wanted = {alone["action_id"], collecting["action_id"]}
    wait_for(lambda: wanted <= set(arrived_ids(api)), timeout=20)
    texts = sorted(d.body["data"]["payload"]["text"] for d in api.local.receiver.deliveries)
    assert texts == ["1: ", "4: 1,2,3,4"]
