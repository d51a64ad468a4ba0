"""Mastodon over real HTTP on loopback against a fake instance: the documented request with
its Idempotency-Key, one test per row of the error table, an ambiguous attempt retried
through the dispatcher without a second post, and the lookup over the account's statuses
(found, absent, unknown; paging)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.engine import drain, row
from tests.fakes import LOOPBACK, a_via, an_action
from tests.fakes.mastodon import STATUSES, TOKEN, FakeMastodon
from tests.fakes.server import Answer
from tests.waiting import wait_for
from tickwork import connections
from tickwork.actions import scheduling as actions
from tickwork.actions.model import NewAction
from tickwork.connections.secrets import MemorySecretStore
from tickwork.engine.tick import run_tick
from tickwork.platform.config import ActionTypeConfig, Settings
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
from tickwork.providers.mastodon import MastodonProvider


@pytest.fixture
def instance() -> Iterator[FakeMastodon]:
    fake = FakeMastodon()
    yield fake
    fake.close()


def provider() -> MastodonProvider:
    return MastodonProvider({}, timeout=2.0, policy=LOOPBACK)


def via(fake: FakeMastodon, token: str = TOKEN):
    return a_via("mastodon", {"instance_url": fake.url, "max_characters": 500},
                 {"access_token": token})  # fmt: skip


def test_the_documented_request_with_the_action_id_as_idempotency_key(instance):
    action = an_action(payload={"status": "Hello fediverse", "visibility": "unlisted"})
    outcome = provider().send(action, via(instance))
    assert isinstance(outcome, Delivered)
    [sent] = instance.to("/api/v1/statuses")
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"
    assert sent.headers["idempotency-key"] == str(action.id)
    assert sent.json() == {"status": "Hello fediverse", "visibility": "unlisted"}
    assert outcome.provider_id == instance.statuses[0]["id"]


@pytest.mark.parametrize(
    ("answer", "kind", "code"),
    [
        (Answer(401, {"error": "The access token is invalid"}), Rejected, "auth_failed"),
        (Answer(403, {"error": "Your login is currently disabled"}), Rejected, "forbidden"),
        (Answer(404, {"error": "Record not found"}), Rejected, "not_found"),
        (Answer(422, {"error": "Validation failed: Text character limit of 500 exceeded"}),
         Rejected, "validation_failed"),
        (Answer(410, {"error": "gone"}), Rejected, "provider_rejected"),
        (Answer(429, {"error": "Too many requests"}), Transient, None),
        (Answer(500, {"error": "oops"}), Ambiguous, None),
        (Answer(503, "<html>busy</html>"), Ambiguous, None),
    ],
)  # fmt: skip
def test_error_table(instance, answer, kind, code):
    instance.then("/api/v1/statuses", answer)
    outcome = provider().send(an_action(payload={"status": "hi"}), via(instance))
    assert isinstance(outcome, kind), outcome
    if code:
        assert isinstance(outcome, Rejected)
        assert outcome.code == code


def test_429_honours_x_ratelimit_reset(instance):
    reset = (datetime.now(UTC) + timedelta(seconds=120)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    instance.then("/api/v1/statuses", Answer(429, {"error": "Too many requests"},
                                             {"x-ratelimit-reset": reset}))  # fmt: skip
    outcome = provider().send(an_action(payload={"status": "hi"}), via(instance))
    assert isinstance(outcome, Transient)
    assert outcome.retry_after is not None
    assert 110 < outcome.retry_after <= 120


def test_a_status_over_the_instances_limit_is_refused_unsent(instance):
    outcome = provider().send(an_action(payload={"status": "x" * 501}), via(instance))
    assert isinstance(outcome, Rejected)
    assert instance.requests == []


def test_verify_credentials(instance):
    ok = provider().verify(via(instance))
    assert (ok.ok, ok.account) == (True, "tickwork")
    assert not provider().verify(via(instance, "wrong-token-0000")).ok


def test_an_ambiguous_attempt_is_retried_without_a_second_post(
    conn, workspace, runtime, instance, now
):
    # Given a Mastodon action type and a workspace connection to the fake instance
    runtime.settings = runtime.settings.model_copy(update={
        "action_types": {"mastodon": ActionTypeConfig(provider="mastodon")},
        "backoff_base_seconds": 0.05,
    })  # fmt: skip
    runtime.providers.register("mastodon", provider())
    connection = connections.create(
        conn, workspace, name="Toots", provider="mastodon",
        settings={"instance_url": instance.url}, credentials={"access_token": TOKEN},
        store=runtime.secrets, created_by=None,
    )  # fmt: skip
    scheduled = actions.schedule(conn, workspace, NewAction(
        action_type="mastodon", target_key="main", publish_at=now,
        payload={"status": "Launch day!"}, connection_id=connection.id,
    ), runtime.settings, now)  # fmt: skip
    # When the first attempt posts but its answer is lost (503), and the dispatcher retries
    instance.lose_answers = 1

    def settled() -> dict[str, Any] | None:
        run_tick(conn, runtime.queues, runtime.settings)
        drain(runtime, "mastodon", wait=0.1)
        current = row(conn, scheduled.action.id)
        return current if current["status"] in ("published", "failed") else None

    current = wait_for(settled, interval=0, message="the row did not settle")
    # Then the row is published after two attempts and the instance holds one post
    assert (current["status"], current["attempt_count"]) == ("published", 2)
    assert len(instance.to("/api/v1/statuses")) == 2
    assert len(instance.statuses) == 1
    assert current["provider_id"] == instance.statuses[0]["id"]


def test_a_status_over_the_connections_limit_is_refused_at_schedule_time(conn, workspace, now):

    settings = Settings(action_types={"mastodon": ActionTypeConfig(provider="mastodon")})
    connection = connections.create(
        conn, workspace, name="Toots", provider="mastodon",
        settings={"instance_url": "https://example.social", "max_characters": 100},
        credentials={"access_token": TOKEN}, store=MemorySecretStore(), created_by=None,
    )  # fmt: skip
    new = NewAction(action_type="mastodon", target_key="main", publish_at=now,
                    payload={"status": "x" * 101}, connection_id=connection.id)  # fmt: skip
    with pytest.raises(InputError) as refused:
        actions.schedule(conn, workspace, new, settings, now)
    assert refused.value.field == "payload.status"
    assert conn.execute("select count(*) from scheduled_actions").fetchone() == (0,)


# ------------------------------------------------------------------------------ lookup

TEXT = "Launch day!"


def test_lookup_finds_the_status_posted_by_its_source_text(instance):
    # Given a status posted (rendered as HTML in `content`)
    poster = provider()
    action = an_action(payload={"status": TEXT})
    sent = poster.send(action, via(instance))
    assert isinstance(sent, Delivered)
    # When it is looked up
    found = poster.lookup(action, via(instance))
    # Then the account's statuses hold it, compared by its source, under its id
    assert isinstance(found, Found), found
    assert found.provider_id == sent.provider_id
    first, *older = instance.to(STATUSES)
    assert first.query == {"limit": ["10"], "exclude_reblogs": ["true"]}
    # (a page older than ours, empty: the account's statuses end there)
    assert [page.query["max_id"] for page in older] == [[sent.provider_id]]
    assert len(instance.to(f"/api/v1/statuses/{sent.provider_id}/source")) == 1


def test_lookup_pages_back_with_max_id_until_the_attempts_window(instance):
    # Given a claim 30 minutes ago, our status then, and 25 newer statuses since
    claimed = datetime.now(UTC) - timedelta(minutes=30)
    ours = instance.status(TEXT, created=claimed + timedelta(seconds=2))
    instance.status("before", created=claimed - timedelta(hours=1))
    for n in range(25):
        instance.status(f"later {n}", created=claimed + timedelta(minutes=21, seconds=n))
    action = an_action(payload={"status": TEXT}, publish_at=claimed)
    # When it is looked up, Then it is found on the third page, read with max_id
    found = provider().lookup(action, via(instance))
    assert isinstance(found, Found), found
    assert found.provider_id == ours["id"]
    pages = instance.to(STATUSES)
    assert len(pages) == 3
    assert all("max_id" in page.query for page in pages[1:])


def test_lookup_of_a_status_never_posted_is_absent(instance):
    # Given the same text yesterday, another text now, a reply, another visibility
    instance.status(TEXT, created=datetime.now(UTC) - timedelta(days=1))
    instance.status("Something else")
    instance.status(TEXT, in_reply_to_id="42")
    instance.status(TEXT, visibility="direct")
    action = an_action(payload={"status": TEXT, "visibility": "public"})
    result = provider().lookup(action, via(instance))
    assert isinstance(result, Absent), result


def test_lookup_of_an_account_with_no_statuses_is_absent(instance):
    assert isinstance(provider().lookup(an_action(payload={"status": TEXT}), via(instance)),
                      Absent)  # fmt: skip


@pytest.mark.parametrize("kept", [
    [{"text": TEXT}, {"text": TEXT}],                # two copies: which is ours?
    [{"text": "Launch day (edited)", "edited": True}],  # edited since: may have been ours
])  # fmt: skip
def test_lookup_that_cannot_tell_the_status_apart_is_unknown(instance, kept):
    for status in kept:
        instance.status(**status)
    result = provider().lookup(an_action(payload={"status": TEXT}), via(instance))
    assert isinstance(result, Unknown), result


def test_lookup_with_a_source_it_cannot_read_is_unknown(instance):
    status = instance.status(TEXT)
    instance.then(f"/api/v1/statuses/{status['id']}/source", Answer(404, {"error": "x"}))
    result = provider().lookup(an_action(payload={"status": TEXT}), via(instance))
    assert isinstance(result, Unknown), result


@pytest.mark.parametrize("path", ["/api/v1/accounts/verify_credentials", STATUSES])
@pytest.mark.parametrize("answer", [
    Answer(500, "<html>oops</html>"), Answer(429, {"error": "Too many requests"}),
    Answer(200, {"not": "a list or an account"}),
])  # fmt: skip
def test_lookup_that_gets_no_listing_is_unknown(instance, path, answer):
    instance.then(path, answer)
    result = provider().lookup(an_action(payload={"status": TEXT}), via(instance))
    assert isinstance(result, Unknown), result


def test_lookup_gives_up_past_the_page_budget(instance):
    now = datetime.now(UTC)
    for n in range(205):
        instance.status(f"later {n}", created=now + timedelta(hours=1, seconds=n))
    result = provider().lookup(an_action(payload={"status": TEXT}), via(instance))
    assert isinstance(result, Unknown)
    assert "more than 20 pages" in result.reason


def test_lookup_refused_token_is_unknown_and_not_shown(instance):
    result = provider().lookup(an_action(payload={"status": TEXT}),
                               via(instance, "wrong-token-0000"))  # fmt: skip
    assert isinstance(result, Unknown)
    assert "401" in result.reason
    assert "wrong-token" not in result.reason


def test_mastodon_offers_a_lookup_with_a_grace_and_a_retention():
    poster = provider()
    assert lookup_of(poster) is poster
    assert timedelta(0) < poster.lookup_grace < poster.lookup_retention
