"""Outcome events to a tenant's endpoint: made by the statement that moves an action, sent
by the engine as `event` rows, signed per Standard Webhooks, filtered by type, and, after an
outage of ten minutes of the engine's time, every one delivered, in order per action, once."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest

from tests.engine import drain, seed
from tests.fakes import LOOPBACK
from tests.fakes.event_receiver import EventReceiver, event_receiver
from tests.sequence_helpers import CHANNELS, campaign, let_time_come, recipient, sms_step
from tickwork import events
from tickwork.actions import store
from tickwork.engine.tick import run_tick
from tickwork.events import DeliveryEvent, emit_delivery_events
from tickwork.platform.config import Settings
from tickwork.platform.errors import InputError
from tickwork.providers.event import EventProvider
from tickwork.providers.http import OutboundPolicy
from tickwork.providers.log import LogProvider
from tickwork.sequences.store import advance_ready, enroll, enrollment_actions, get_enrollment


@pytest.fixture
def receiver(runtime):
    with event_receiver() as found:
        runtime.providers.register("event", EventProvider({}, timeout=2.0, policy=LOOPBACK))
        yield found


def endpoint(conn, workspace, runtime, receiver: EventReceiver, types, action_types=None):
    created = events.create(
        conn, workspace, url=receiver.url, event_types=types, action_types=action_types,
        description=None, store=runtime.secrets, policy=LOOPBACK, created_by=None,
    )  # fmt: skip
    receiver.secret = created.secret
    return created


def publish(conn, runtime, workspace, now, count=3, action_type="log") -> list[UUID]:
    ids = seed(conn, workspace, count, now, action_type=action_type)
    run_tick(conn, runtime.queues, runtime.settings)
    assert drain(runtime, action_type).published == count
    return ids


def send_events(conn, runtime) -> None:
    run_tick(conn, runtime.queues, runtime.settings)
    drain(runtime, "event")


def event_rows(conn) -> dict[str, int]:
    return dict(conn.execute(
        "select status, count(*) from scheduled_actions where source = 'event' group by 1"
    ).fetchall())  # fmt: skip


def test_an_endpoint_receives_signed_events_of_published_and_cancelled_actions(
    conn, workspace, runtime, receiver, now
):
    created = endpoint(conn, workspace, runtime, receiver, ["action.published", "action.cancelled"])
    assert created.secret.startswith("whsec_")
    published = publish(conn, runtime, workspace, now)
    [later] = seed(conn, workspace, 1, now + timedelta(hours=1))
    assert store.cancel(conn, workspace, later).changed
    send_events(conn, runtime)
    got = receiver.accepted()
    assert len(got) == 4
    assert all(r.verified for r in got)
    by_type = Counter(r.event["type"] for r in got)
    assert by_type == {"action.published": 3, "action.cancelled": 1}
    assert {r.event["data"]["id"] for r in got} == {str(i) for i in [*published, later]}
    for r in got:
        assert r.headers["webhook-id"] == r.event["id"]
        assert r.event["id"].startswith("evt_")
        assert "payload" not in r.event["data"]  # public fields only
    assert event_rows(conn) == {"published": 4}
    # The answer never shows the secret again.
    listed = events.list_all(conn, workspace)
    assert [e.id for e in listed] == [created.endpoint.id]
    assert created.secret not in repr(listed)


def test_a_forged_or_altered_event_does_not_verify(receiver):
    receiver.secret = events.new_secret()
    headers = {"webhook-id": "evt_1", "webhook-timestamp": "1700000000",
               "webhook-signature": "v1,AAAA"}  # fmt: skip
    from tests.fakes.event_receiver import signature_ok  # noqa: PLC0415 - one test's helper

    assert not signature_ok(receiver.secret, headers, b"{}")


def test_type_and_action_type_filters(conn, workspace, runtime, receiver, now):
    endpoint(conn, workspace, runtime, receiver, ["action.cancelled"])
    other = events.create(
        conn, workspace, url=receiver.url, event_types=["action.published"],
        action_types=["webhook"], description=None, store=runtime.secrets, policy=LOOPBACK,
        created_by=None,
    )  # fmt: skip
    publish(conn, runtime, workspace, now)  # log actions: neither endpoint wants them
    [later] = seed(conn, workspace, 1, now + timedelta(hours=1))
    store.cancel(conn, workspace, later)
    send_events(conn, runtime)
    assert [r.event["type"] for r in receiver.accepted()] == ["action.cancelled"]
    # A disabled endpoint gets nothing new; a filter cleared takes every type.
    events.update(conn, workspace, other.endpoint.id, clear_action_types=True)
    publish(conn, runtime, workspace, now, count=1)
    send_events(conn, runtime)
    assert Counter(r.event["type"] for r in receiver.accepted())["action.published"] == 1


def test_an_endpoint_url_must_be_public(conn, workspace, runtime):
    with pytest.raises(InputError) as refused:
        events.create(
            conn, workspace, url="http://169.254.169.254/latest", event_types=["action.failed"],
            action_types=None, description=None, store=runtime.secrets,
            policy=OutboundPolicy(), created_by=None,
        )  # fmt: skip
    assert refused.value.code == "unsafe_url"
    with pytest.raises(InputError):
        events.check_event_types(["action.exploded"])


def test_delivery_events_come_after_the_published_event_of_their_action(
    conn, workspace, runtime, receiver, now
):
    endpoint(conn, workspace, runtime, receiver, ["action.published", "action.delivered"])
    ids = publish(conn, runtime, workspace, now, count=2)
    made = emit_delivery_events(conn, [DeliveryEvent(i, "action.delivered") for i in ids])
    assert made == 2
    send_events(conn, runtime)
    assert event_rows(conn) == {"published": 2, "queued": 2}  # waiting for the published
    advance_to_next_retry(conn)
    send_events(conn, runtime)
    order = [(r.event["data"]["id"], r.event["type"]) for r in receiver.accepted()]
    for action_id in ids:
        mine = [t for i, t in order if i == str(action_id)]
        assert mine == ["action.published", "action.delivered"]


def advance_to_next_retry(conn) -> float:
    """The engine's time moves to the next event row's retry: every queued event row's times
    move back by the gap, as if that much time had passed, and the tick hands it to the queue
    again (its delayed message, on the queue's own clock, is not waited for: a claim takes a
    row once, whichever message brings it). Returns the gap in seconds."""
    gap = conn.execute(
        "select extract(epoch from min(next_attempt_at) - now()) from scheduled_actions"
        " where source = 'event' and status = 'queued'"
    ).fetchone()[0]
    gap = max(float(gap or 0.0), 0.0)
    conn.execute(
        "update scheduled_actions set next_attempt_at = next_attempt_at - %(gap)s * interval"
        " '1 second', publish_at = publish_at - %(gap)s * interval '1 second',"
        " enqueued_at = null"
        " where source = 'event' and status = 'queued'",
        {"gap": gap},
    )
    return gap


def test_an_endpoint_down_for_ten_minutes_gets_every_event_afterwards_in_order_once(
    conn, workspace, runtime, receiver, now
):
    endpoint(conn, workspace, runtime, receiver, ["action.published", "action.delivered"])
    receiver.down = True
    ids = publish(conn, runtime, workspace, now, count=5)
    send_events(conn, runtime)
    emit_delivery_events(conn, [DeliveryEvent(i, "action.delivered") for i in ids])
    elapsed = 0.0
    rounds = 0
    while event_rows(conn).get("queued", 0) and rounds < 1000:
        rounds += 1
        elapsed += advance_to_next_retry(conn)
        if elapsed >= 600:
            receiver.down = False
        send_events(conn, runtime)
    assert event_rows(conn) == {"published": 10}, (
        rounds,
        elapsed,
        conn.execute(
            "select status, error_code, last_error, attempt_count from scheduled_actions"
            " where source = 'event' and status <> 'published' limit 3"
        ).fetchall(),
    )
    assert elapsed >= 600, "the outage lasted ten minutes of the engine's time"
    assert event_rows(conn) == {"published": 10}
    refused = [r for r in receiver.received if not r.accepted]
    # Each action's first event was tried again and again through the outage (its second
    # waited behind it, untried, as the order requires).
    tries = Counter(r.headers["webhook-id"] for r in refused)
    assert len(tries) == 5
    assert min(tries.values()) >= 8
    got = receiver.accepted()
    assert all(r.verified for r in got)
    ids_seen = Counter(r.headers["webhook-id"] for r in got)
    assert len(ids_seen) == 10
    assert set(ids_seen.values()) == {1}
    for action_id in ids:
        mine = [r.event["type"] for r in got if r.event["data"]["id"] == str(action_id)]
        assert mine == ["action.published", "action.delivered"]


def test_an_enrollment_completing_sends_enrollment_completed(
    conn, workspace, runtime, receiver, now
):
    # Given a one-step drip (sms through a quiet log provider) and an endpoint for it
    runtime.settings = Settings.model_validate(
        runtime.settings.model_dump() | {"action_types": CHANNELS}
    )
    runtime.providers.register("sms", LogProvider({"quiet": True}))
    endpoint(conn, workspace, runtime, receiver, ["enrollment.completed"])
    recipient(conn, runtime, workspace)
    drip = campaign(conn, runtime, workspace, [sms_step("hello")])
    enrolled = enroll(conn, workspace, drip, "ann", {}, runtime.settings, now)
    [(_, step)] = enrollment_actions(conn, enrolled.enrollment.id)
    # When its step is sent and the enrollment advances past it
    let_time_come(conn, runtime, [step.id], "sms")
    advance_ready(conn, runtime.settings, datetime.now(UTC))
    assert get_enrollment(conn, workspace, enrolled.enrollment.id).status == "completed"
    # Then the endpoint gets enrollment.completed, and nothing for the step's action
    send_events(conn, runtime)
    [got] = receiver.accepted()
    assert got.verified
    assert got.event["type"] == "enrollment.completed"
    assert got.event["data"]["id"] == str(enrolled.enrollment.id)
    assert got.event["data"]["campaign_id"] == str(drip)
