"""The resolver asks Twilio and Mastodon, over real HTTP on loopback against their fakes,
whether an SMS or a post whose outcome is unknown went out: found rows are published under
the provider's id, absent ones are sent once more, and rows the lookup cannot tell about
stay failed with the reason; the fakes' logs show nothing is ever sent twice."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from psycopg.rows import dict_row

from tests.engine import drain, row
from tests.fakes import LOOPBACK
from tests.fakes.mastodon import TOKEN, FakeMastodon
from tests.fakes.server import Answer
from tests.fakes.twilio import ACCOUNT_SID, AUTH_TOKEN, FROM, MESSAGES, FakeTwilio, message
from tickwork import connections
from tickwork.actions import scheduling as actions
from tickwork.actions.model import NewAction
from tickwork.actions.store import get
from tickwork.engine.resolver import resolve_one, resolve_unsettled
from tickwork.engine.tick import run_tick
from tickwork.platform.config import ActionTypeConfig
from tickwork.providers.mastodon import MastodonProvider
from tickwork.providers.twilio import TwilioProvider
from tickwork.runtime import Runtime

TO = "+14155550100"
BODY = "Your table is ready"
TEXT = "Launch day!"


@pytest.fixture
def twilio(runtime: Runtime) -> Iterator[FakeTwilio]:
    fake = FakeTwilio()
    runtime.settings = runtime.settings.model_copy(update={
        "action_types": {"sms": ActionTypeConfig(provider="twilio"),
                         "mastodon": ActionTypeConfig(provider="mastodon")},
        "resolve_recheck_seconds": 0,
    })  # fmt: skip
    runtime.providers.register("sms", TwilioProvider({"api_url": fake.url}, 2.0, LOOPBACK))
    yield fake
    fake.close()


@pytest.fixture
def instance(runtime: Runtime, twilio: FakeTwilio) -> Iterator[FakeMastodon]:
    fake = FakeMastodon()
    runtime.providers.register("mastodon", MastodonProvider({}, 2.0, LOOPBACK))
    yield fake
    fake.close()


def sms_rows(conn, workspace: UUID, runtime: Runtime, now: datetime, count: int = 1):
    connection = connections.create(
        conn, workspace, name="Texts", provider="twilio",
        settings={"account_sid": ACCOUNT_SID, "from": FROM},
        credentials={"auth_token": AUTH_TOKEN}, store=runtime.secrets, created_by=None,
    )  # fmt: skip
    return [
        actions.schedule(conn, workspace, NewAction(
            action_type="sms", target_key=f"guest-{n}", publish_at=now,
            payload={"to": TO, "body": BODY}, connection_id=connection.id,
        ), runtime.settings, now).action.id
        for n in range(count)
    ]  # fmt: skip


def send_everything(conn, runtime: Runtime, action_type: str) -> None:
    """Whatever is due or on the queue goes out now, as the tick and dispatchers would."""
    run_tick(conn, runtime.queues, runtime.settings)
    drain(runtime, action_type, wait=0.1)


def aged(conn, action_id: UUID, minutes: int) -> None:
    """The attempt claimed `minutes` ago (the grace is measured from it)."""
    conn.execute(
        "update scheduled_actions set submitted_at = now() - make_interval(mins => %s)"
        " where id = %s",
        (minutes, action_id),
    )


def entry(conn, action_id: UUID) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        found = cur.execute(
            "select * from action_attempts where action_id = %s order by attempt desc limit 1",
            (action_id,),
        ).fetchone()
    assert found is not None
    return found


def ambiguous_sms(conn, workspace, runtime, twilio, now, *, landed: bool, count: int = 1):
    """SMS rows whose send Twilio answered with a 500: created there or not."""
    ids = sms_rows(conn, workspace, runtime, now, count)
    if landed:
        twilio.lose_answers = count
    else:
        twilio.then(MESSAGES, *[Answer(500, {"code": 20500, "message": "Internal"})] * count)
    send_everything(conn, runtime, "sms")
    for action_id in ids:
        current = row(conn, action_id)
        assert (current["status"], current["error_code"]) == ("failed", "ambiguous")
    return ids


# ---------------------------------------------------------------------------- Twilio


def test_an_sms_twilio_has_is_published_under_its_sid_and_never_sent_again(
    conn, workspace, runtime, twilio, now
):
    # Given an SMS Twilio created but whose answer was lost: failed ambiguous
    [action_id] = ambiguous_sms(conn, workspace, runtime, twilio, now, landed=True)
    [created] = twilio.kept
    # When the resolver runs (a found message needs no grace)
    summary = resolve_unsettled(conn, runtime)
    # Then the row is published under Twilio's sid, the ledger saying how
    assert summary.delivered == {"twilio": 1}
    current = row(conn, action_id)
    assert (current["status"], current["provider_id"]) == ("published", created["sid"])
    assert entry(conn, action_id)["resolution"] == "delivered"
    # And nothing is sent again, however often the engine runs
    send_everything(conn, runtime, "sms")
    resolve_unsettled(conn, runtime)
    assert len(twilio.messages()) == 1
    assert len(twilio.kept) == 1


def test_an_sms_twilio_never_got_is_sent_once_more_after_the_grace(
    conn, workspace, runtime, twilio, now
):
    # Given an SMS whose send got a 500 without Twilio creating it
    [action_id] = ambiguous_sms(conn, workspace, runtime, twilio, now, landed=False)
    assert twilio.kept == []
    # Within the grace, absent is not trusted: the row stays, asked again later
    assert resolve_unsettled(conn, runtime).unresolved == {"twilio": 1}
    assert row(conn, action_id)["status"] == "failed"
    assert "grace" in entry(conn, action_id)["resolution_detail"]
    # When the attempt is older than the grace and the resolver asks again
    aged(conn, action_id, 15)
    summary = resolve_unsettled(conn, runtime)
    # Then it is sent once more, and Twilio holds exactly one copy
    assert summary.requeued == {"twilio": 1}
    send_everything(conn, runtime, "sms")
    current = row(conn, action_id)
    assert current["status"] == "published"
    [created] = twilio.kept
    assert current["provider_id"] == created["sid"]


def test_an_sms_twilio_cannot_tell_apart_is_left_with_the_reason_and_never_resent(
    conn, workspace, runtime, twilio, now
):
    # Given an SMS that landed, and the same text to the same number in the same minutes
    # from something else
    [action_id] = ambiguous_sms(conn, workspace, runtime, twilio, now, landed=True)
    twilio.keep(message(TO, BODY, created=datetime.now(UTC)))
    aged(conn, action_id, 15)
    # When the resolver runs, again and again, with the tick and dispatchers in between
    for _ in range(3):
        summary = resolve_unsettled(conn, runtime)
        assert summary.unresolved == {"twilio": 1}
        send_everything(conn, runtime, "sms")
    # Then the row stays failed ambiguous, says why, and Twilio was asked to send once
    current = row(conn, action_id)
    assert (current["status"], current["error_code"]) == ("failed", "ambiguous")
    noted = entry(conn, action_id)
    assert noted["resolution"] == "unresolved"
    assert "which one is ours cannot be told" in noted["resolution_detail"]
    assert len(twilio.messages()) == 1


def test_a_listing_that_fails_leaves_the_sms_failed_and_unsent(
    conn, workspace, runtime, twilio, now
):
    [action_id] = ambiguous_sms(conn, workspace, runtime, twilio, now, landed=False)
    aged(conn, action_id, 15)
    twilio.then(MESSAGES, Answer(503, "unavailable"))
    assert resolve_unsettled(conn, runtime).unresolved == {"twilio": 1}
    assert "HTTP 503" in entry(conn, action_id)["resolution_detail"]
    send_everything(conn, runtime, "sms")
    assert row(conn, action_id)["status"] == "failed"
    assert len(twilio.messages()) == 1


def test_twin_sms_of_which_one_landed_settle_one_and_leave_the_other(
    conn, workspace, runtime, twilio, now
):
    # Given two rows with the same text to the same number, both ambiguous, and Twilio
    # holding one such message from those minutes
    twins = ambiguous_sms(conn, workspace, runtime, twilio, now, landed=False, count=2)
    twilio.keep(message(TO, BODY, created=datetime.now(UTC)))
    for action_id in twins:
        aged(conn, action_id, 15)
    # When the resolver runs
    summary = resolve_unsettled(conn, runtime)
    # Then one row takes the message, the other is left: its sid is the first's
    assert (summary.delivered, summary.unresolved) == ({"twilio": 1}, {"twilio": 1})
    left = next(i for i in twins if row(conn, i)["status"] == "failed")
    assert "recorded for another action" in entry(conn, left)["resolution_detail"]
    send_everything(conn, runtime, "sms")
    assert len(twilio.messages()) == 2  # the two first attempts, nothing more


# -------------------------------------------------------------------------- Mastodon


def stuck_post(conn, workspace, runtime, instance, now, minutes: int = 10) -> UUID:
    """A post whose dispatcher died after claiming it `minutes` ago (the tick's `stuck`)."""
    connection = connections.create(
        conn, workspace, name="Toots", provider="mastodon",
        settings={"instance_url": instance.url}, credentials={"access_token": TOKEN},
        store=runtime.secrets, created_by=None,
    )  # fmt: skip
    action_id = actions.schedule(conn, workspace, NewAction(
        action_type="mastodon", target_key="main", publish_at=now,
        payload={"status": TEXT, "visibility": "public"}, connection_id=connection.id,
    ), runtime.settings, now).action.id  # fmt: skip
    conn.execute(
        "with failed as ("
        " update scheduled_actions set status = 'failed', error_code = 'stuck',"
        " attempt_count = 1, submitted_at = now() - make_interval(mins => %s),"
        " finished_at = now(), last_error = 'the dispatcher did not finish' where id = %s"
        " returning id, workspace_id, submitted_at)"
        " insert into action_attempts (action_id, attempt, workspace_id, started_at, outcome)"
        " select id, 1, workspace_id, submitted_at, 'stuck' from failed",
        (minutes, action_id),
    )
    return action_id


def test_a_stuck_post_the_account_has_is_published_under_its_id(
    conn, workspace, runtime, instance, now
):
    # Given a post claimed 10 minutes ago that reached the instance before its process died
    action_id = stuck_post(conn, workspace, runtime, instance, now)
    posted = instance.status(TEXT, created=datetime.now(UTC) - timedelta(minutes=10))
    # When the resolver runs
    summary = resolve_unsettled(conn, runtime)
    # Then it is published under the status id, and nothing is posted again
    assert summary.delivered == {"mastodon": 1}
    current = row(conn, action_id)
    assert (current["status"], current["provider_id"]) == ("published", posted["id"])
    send_everything(conn, runtime, "mastodon")
    assert instance.to("/api/v1/statuses") == []
    assert len(instance.statuses) == 1


def test_a_stuck_post_the_account_does_not_have_is_posted_once(
    conn, workspace, runtime, instance, now
):
    # Given a post claimed 10 minutes ago (past the 5-minute grace) that never arrived
    action_id = stuck_post(conn, workspace, runtime, instance, now)
    instance.status("Something else", created=datetime.now(UTC) - timedelta(minutes=9))
    # When the resolver runs
    assert resolve_unsettled(conn, runtime).requeued == {"mastodon": 1}
    # Then it is posted once, and the account holds one copy
    send_everything(conn, runtime, "mastodon")
    current = row(conn, action_id)
    assert current["status"] == "published"
    assert [s for s in instance.statuses if instance.sources[str(s["id"])] == TEXT] == [
        next(s for s in instance.statuses if s["id"] == current["provider_id"])
    ]


def test_a_stuck_post_the_lookup_cannot_tell_about_is_never_posted_again(
    conn, workspace, runtime, instance, now
):
    # Given a stuck post, and two statuses with its text in the attempt's minutes
    action_id = stuck_post(conn, workspace, runtime, instance, now)
    for _ in range(2):
        instance.status(TEXT, created=datetime.now(UTC) - timedelta(minutes=9))
    # When the resolver runs, repeatedly, with the engine running between
    for _ in range(3):
        assert resolve_unsettled(conn, runtime).unresolved == {"mastodon": 1}
        send_everything(conn, runtime, "mastodon")
    # Then the row stays failed stuck with the reason, and nothing was posted
    current = row(conn, action_id)
    assert (current["status"], current["error_code"]) == ("failed", "stuck")
    assert "cannot be told" in entry(conn, action_id)["resolution_detail"]
    assert instance.to("/api/v1/statuses") == []


def test_an_admin_can_resolve_a_stuck_post_now(conn, workspace, runtime, instance, now):
    action_id = stuck_post(conn, workspace, runtime, instance, now)
    posted = instance.status(TEXT, created=datetime.now(UTC) - timedelta(minutes=10))
    resolution = resolve_one(conn, runtime, get(conn, workspace, action_id))
    assert not isinstance(resolution, str)
    assert (resolution.verdict, resolution.provider_id) == ("delivered", posted["id"])
