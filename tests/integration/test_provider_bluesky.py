"""Bluesky over real HTTP on loopback against a fake PDS: sessions (created, cached,
refreshed), the documented createRecord with a record key derived from the action, facets,
one test per row of the error table, and an ambiguous create retried without a second post."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.engine import drain, row
from tests.fakes import LOOPBACK, a_via, an_action
from tests.fakes.bluesky import APP_PASSWORD, DID, HANDLE, FakeBluesky, xrpc_error
from tests.fakes.server import Answer
from tests.waiting import wait_for
from tickwork import connections
from tickwork.actions import scheduling as actions
from tickwork.actions.model import NewAction
from tickwork.engine.tick import run_tick
from tickwork.platform.config import ActionTypeConfig
from tickwork.platform.errors import InputError
from tickwork.providers.base import (
    Absent,
    Ambiguous,
    Delivered,
    Found,
    Rejected,
    Transient,
    Unknown,
    lookup_of,
)
from tickwork.providers.bluesky import BlueskyProvider, Payload, graphemes, rkey_for
from tickwork.providers.catalog import check_payload

CREATE = "/xrpc/com.atproto.repo.createRecord"


@pytest.fixture
def pds() -> Iterator[FakeBluesky]:
    fake = FakeBluesky()
    yield fake
    fake.close()


def provider() -> BlueskyProvider:
    return BlueskyProvider({}, timeout=2.0, policy=LOOPBACK)


def via(fake: FakeBluesky, password: str = APP_PASSWORD):
    return a_via("bluesky", {"handle": HANDLE, "service_url": fake.url},
                 {"app_password": password})  # fmt: skip


def test_the_documented_create_with_a_deterministic_record_key_and_facets(pds):
    text = "Launch 🚀 with @alice.bsky.social: https://example.com/launch today"
    action = an_action(payload={"text": text, "langs": ["en"]})
    outcome = provider().send(action, via(pds))
    assert outcome == Delivered(f"at://{DID}/app.bsky.feed.post/{rkey_for(action)}")
    [sent] = pds.to(CREATE)
    body = sent.json()
    assert (body["repo"], body["collection"], body["rkey"]) == (
        DID, "app.bsky.feed.post", rkey_for(action))  # fmt: skip
    record = body["record"]
    assert record["$type"] == "app.bsky.feed.post"
    assert record["text"] == text
    assert record["langs"] == ["en"]
    encoded = text.encode()
    spans = {f["features"][0]["$type"].split("#")[1]:
             encoded[f["index"]["byteStart"]:f["index"]["byteEnd"]].decode()
             for f in record["facets"]}  # fmt: skip
    assert spans == {"mention": "@alice.bsky.social", "link": "https://example.com/launch"}
    assert sent.headers["authorization"] == "Bearer access-1"


def test_the_record_key_is_a_tid_and_stable_per_action():
    action = an_action(payload={"text": "x"})
    key = rkey_for(action)
    assert len(key) == 13
    assert key[0] in "234567abcdefghij"
    assert rkey_for(action) == key
    assert rkey_for(an_action(payload={"text": "x"}, publish_at=action.publish_at)) != key


def test_the_session_is_cached_and_refreshed_when_it_expires(pds):
    p, v = provider(), via(pds)
    p.send(an_action(payload={"text": "one"}), v)
    p.send(an_action(payload={"text": "two"}), v)
    assert pds.sessions == 1
    pds.expire_sessions()
    assert isinstance(p.send(an_action(payload={"text": "three"}), v), Delivered)
    assert len(pds.to("/xrpc/com.atproto.server.refreshSession")) == 1
    assert pds.posts == 3


@pytest.mark.parametrize(
    ("answer", "kind", "code"),
    [
        (xrpc_error(400, "InvalidRequest", "Invalid app.bsky.feed.post record"), Rejected,
         "invalid_request"),
        (xrpc_error(413, "PayloadTooLarge"), Rejected, "payload_too_large"),
        (xrpc_error(400, "AccountTakedown", "Account has been taken down"), Rejected,
         "account_suspended"),
        (None, Transient, None),  # 429 with ratelimit-reset a minute ahead, made at run time
        (xrpc_error(500, "InternalServerError"), Ambiguous, None),
        (Answer(502, "<html>Bad Gateway</html>"), Ambiguous, None),
    ],
)  # fmt: skip
def test_error_table(pds, answer, kind, code):
    if answer is None:
        reset = {"ratelimit-reset": str(int(time.time()) + 60), "ratelimit-remaining": "0"}
        answer = xrpc_error(429, "RateLimitExceeded", "Rate Limit Exceeded", reset)
    pds.then(CREATE, answer)
    outcome = provider().send(an_action(payload={"text": "hi"}), via(pds))
    assert isinstance(outcome, kind), outcome
    if code:
        assert isinstance(outcome, Rejected)
        assert outcome.code == code
    if kind is Transient:
        assert isinstance(outcome, Transient)
        assert outcome.retry_after is not None
        assert 50 < outcome.retry_after <= 60


def test_a_wrong_app_password_is_auth_failed_and_nothing_is_posted(pds):
    outcome = provider().send(an_action(payload={"text": "hi"}), via(pds, "wrong-pass-0000"))
    assert isinstance(outcome, Rejected)
    assert outcome.code == "auth_failed"
    assert pds.to(CREATE) == []
    assert not provider().verify(via(pds, "wrong-pass-0000")).ok
    assert provider().verify(via(pds)).ok


def test_sign_in_rate_limited_or_down_is_transient(pds):
    pds.then("/xrpc/com.atproto.server.createSession", xrpc_error(429, "RateLimitExceeded"))
    assert isinstance(provider().send(an_action(payload={"text": "hi"}), via(pds)), Transient)
    pds.then("/xrpc/com.atproto.server.createSession", Answer(503, "down"))
    assert isinstance(provider().send(an_action(payload={"text": "hi"}), via(pds)), Transient)
    assert pds.posts == 0


def test_a_retry_whose_key_holds_another_record_is_a_collision(pds):
    action = an_action(payload={"text": "mine"}, attempt_count=2)
    pds.records[rkey_for(action)] = {"text": "someone else's", "createdAt": "2020-01-01T00:00Z"}
    outcome = provider().send(action, via(pds))
    assert isinstance(outcome, Rejected)
    assert outcome.code == "rkey_collision"
    assert pds.posts == 0


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ({"text": ""}, "payload.text"),
        ({"text": "é" * 301}, "300"),
        ({"text": "👍🏽" * 301}, "300"),
        ({"text": "hi", "langs": ["english!"]}, "payload.langs"),
        ({"text": "hi", "facets": [{"byte_start": 0, "byte_end": 10,
          "features": [{"type": "link", "uri": "https://x.example"}]}]}, "outside"),
        ({"text": "é!", "facets": [{"byte_start": 1, "byte_end": 3,
          "features": [{"type": "link", "uri": "https://x.example"}]}]}, "splits"),
        ({"text": "hi", "facets": [{"byte_start": 0, "byte_end": 2,
          "features": [{"type": "link", "uri": "javascript:alert(1)"}]}]}, "http"),
        ({"text": "hi", "facets": [{"byte_start": 0, "byte_end": 2,
          "features": [{"type": "mention"}]}]}, "did"),
    ],
)  # fmt: skip
def test_payloads_are_refused_at_schedule_time_naming_the_field(payload, fragment):
    with pytest.raises(InputError) as refused:
        check_payload("bluesky", payload, has_connection=True)
    assert refused.value.field is not None
    assert refused.value.field.startswith("payload")
    assert fragment in refused.value.message + refused.value.field


def test_graphemes_count_what_a_person_sees():
    assert graphemes("👍🏽") == 1
    assert graphemes("e\u0301") == 1
    assert graphemes("👨‍👩‍👧") == 1
    assert graphemes("abc") == 3
    assert Payload.model_validate({"text": "👍🏽" * 300}).text


def test_an_ambiguous_create_is_retried_without_a_second_post(conn, workspace, runtime, pds, now):
    # Given a Bluesky action type and a workspace connection to the fake PDS
    runtime.settings = runtime.settings.model_copy(update={
        "action_types": {"bluesky": ActionTypeConfig(provider="bluesky")},
        "backoff_base_seconds": 0.05,
    })  # fmt: skip
    runtime.providers.register("bluesky", provider())
    connection = connections.create(
        conn, workspace, name="Skeets", provider="bluesky",
        settings={"handle": HANDLE, "service_url": pds.url},
        credentials={"app_password": APP_PASSWORD}, store=runtime.secrets, created_by=None,
    )  # fmt: skip
    scheduled = actions.schedule(conn, workspace, NewAction(
        action_type="bluesky", target_key="main", publish_at=now,
        payload={"text": "Launch day!"}, connection_id=connection.id,
    ), runtime.settings, now)  # fmt: skip
    # When the first create posts but its answer is lost (502), and the dispatcher retries
    pds.lose_answers = 1

    def settled() -> dict[str, Any] | None:
        run_tick(conn, runtime.queues, runtime.settings)
        drain(runtime, "bluesky", wait=0.1)
        current = row(conn, scheduled.action.id)
        return current if current["status"] in ("published", "failed") else None

    current = wait_for(settled, interval=0, message="the row did not settle")
    # Then the row is published after two attempts and the PDS holds one post
    assert (current["status"], current["attempt_count"]) == ("published", 2)
    assert pds.posts == 1
    assert len(pds.to(CREATE)) == 1  # the retry found the post and did not create again
    assert current["provider_id"].endswith(rkey_for(scheduled.action))


def test_created_at_is_the_publish_time_on_every_attempt(pds):
    publish_at = datetime(2027, 5, 1, 9, 0, tzinfo=UTC)
    action = an_action(payload={"text": "hi"}, publish_at=publish_at)
    provider().send(action, via(pds))
    assert pds.to(CREATE)[0].json()["record"]["createdAt"] == "2027-05-01T09:00:00Z"
    assert timedelta(0) == publish_at - action.publish_at


# ------------------------------------------------------------------------------ lookup
# The fake PDS keeps every record it created, by record key, and getRecord reads them.

GET = "/xrpc/com.atproto.repo.getRecord"


def test_lookup_finds_the_post_at_the_actions_record_key(pds):
    bsky = provider()
    action = an_action(payload={"text": "Launch day!"})
    pds.lose_answers = 1  # created, but the answer is a 502: the send is ambiguous
    assert isinstance(bsky.send(action, via(pds)), Ambiguous)
    found = bsky.lookup(action, via(pds))
    assert isinstance(found, Found), found
    assert found.provider_id == f"at://{DID}/app.bsky.feed.post/{rkey_for(action)}"
    assert found.detail == f"cid bafyrei{rkey_for(action)}"
    [read] = pds.to(GET)
    assert read.query == {"repo": [DID], "collection": ["app.bsky.feed.post"],
                          "rkey": [rkey_for(action)]}  # fmt: skip
    assert read.headers["authorization"].startswith("Bearer access-")


def test_lookup_of_a_post_never_created_is_absent(pds):
    bsky = provider()
    bsky.send(an_action(payload={"text": "another"}), via(pds))
    assert isinstance(bsky.lookup(an_action(payload={"text": "never sent"}), via(pds)), Absent)


def test_lookup_of_a_key_holding_another_record_is_unknown(pds):
    action = an_action(payload={"text": "mine"})
    pds.records[rkey_for(action)] = {"text": "someone else's", "createdAt": "2020-01-01T00:00Z"}
    result = provider().lookup(action, via(pds))
    assert isinstance(result, Unknown)
    assert "another record" in result.reason


def test_lookup_signs_in_again_when_the_token_expired(pds):
    bsky = provider()
    action = an_action(payload={"text": "hi"})
    bsky.send(action, via(pds))
    pds.expire_sessions()
    assert isinstance(bsky.lookup(action, via(pds)), Found)
    assert pds.sessions == 2


@pytest.mark.parametrize(
    "answer",
    [
        xrpc_error(500, "InternalServerError"),
        Answer(502, "<html>Bad Gateway</html>"),
        xrpc_error(429, "RateLimitExceeded"),
        xrpc_error(400, "InvalidRequest", 'Error: Params must have the property "repo"'),
        Answer(200, "not json"),
    ],
)
def test_lookup_that_cannot_tell_is_unknown(pds, answer):
    pds.then(GET, answer)
    result = provider().lookup(an_action(payload={"text": "hi"}), via(pds))
    assert isinstance(result, Unknown), result


def test_lookup_with_a_wrong_password_is_unknown_without_the_password(pds):
    result = provider().lookup(an_action(payload={"text": "hi"}), via(pds, "wrong-pass-0000"))
    assert isinstance(result, Unknown)
    assert "wrong-pass" not in result.reason
    assert pds.to(GET) == []


def test_lookup_is_bounded_by_one_deadline_for_sign_in_and_read(pds):
    # Sign-in and read each within the per-call timeout, but not both: still one deadline.
    pds.then("/xrpc/com.atproto.server.createSession", Answer(
        200, {"did": DID, "handle": HANDLE, "accessJwt": "access-x", "refreshJwt": "r"},
        delay=0.6))  # fmt: skip
    pds.access.add("access-x")
    slow_absent = xrpc_error(400, "RecordNotFound")
    slow_absent.delay = 0.6
    pds.then(GET, slow_absent)
    fast = BlueskyProvider({}, timeout=1.0, policy=LOOPBACK)
    started = time.monotonic()
    result = fast.lookup(an_action(payload={"text": "hi"}), via(pds))
    assert isinstance(result, Unknown), result
    assert time.monotonic() - started < 1.5
    assert isinstance(fast.lookup(an_action(payload={"text": "hi"}), None), Unknown)


def test_lookup_windows():
    bsky = provider()
    assert lookup_of(bsky) is bsky
    assert bsky.lookup_retention >= timedelta(days=1)
    assert timedelta(0) < bsky.lookup_grace < bsky.lookup_retention
