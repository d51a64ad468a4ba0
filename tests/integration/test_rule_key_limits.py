"""A rule's per-key limit on a real Postgres: at most N actions a window per key, the excess
dropped (skipped `rate_limited`, nothing written) or collected into one digest per key
(`excess: digest`), race-free across concurrent events and duplicate deliveries."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tickwork.digests import store as digests
from tickwork.platform.db import connect
from tickwork.platform.errors import InputError
from tickwork.rules.events import EventInput, emit_event
from tickwork.rules.model import ActionTemplate, ProduceResult, RuleInput, Trigger
from tickwork.rules.store import create_rule

UTC_ZONE = ZoneInfo("UTC")
HOUR = 3600


# One message alone says hi; the digest of the excess lists the bookings it holds.
PAYLOAD = {
    "text": "hi {{ context.guest.id }}",
    "more": "{{ count | default(0) }}",
    "bookings": "{{ (items | default([])) | map(attribute='event.entities.booking') | join(',') }}",
}


def rule_with(limit: dict[str, object] | None, recipient: str | None = None) -> RuleInput:
    return RuleInput(
        name="nudge", trigger=Trigger("event", event_type="booking.confirmed"),
        action=ActionTemplate("log", "t", PAYLOAD, recipient_id=recipient, limit=limit),
    )  # fmt: skip


def booked(conn, workspace, settings, booking: str, guest: str, at: datetime) -> ProduceResult:
    event = EventInput("booking.confirmed", {"booking": booking}, {"guest": {"id": guest}})
    return emit_event(conn, workspace, event, UTC_ZONE, settings, at)


def actions_count(conn) -> int:
    found = conn.execute("select count(*) from scheduled_actions").fetchone()
    assert found is not None
    return int(found[0])


ONE_AN_HOUR = {"key": "{{ context.guest.id }}", "count": 1, "per_seconds": HOUR}


def test_one_an_hour_per_guest_drops_the_rest_until_the_hour_is_over(conn, workspace, settings):
    now = datetime.now(UTC)
    create_rule(conn, workspace, rule_with(ONE_AN_HOUR), settings, now)
    # Given a first booking for ann, then two more within the hour, and one for bob
    first = booked(conn, workspace, settings, "b1", "ann", now)
    second = booked(conn, workspace, settings, "b2", "ann", now + timedelta(minutes=10))
    third = booked(conn, workspace, settings, "b3", "ann", now + timedelta(minutes=59))
    bob = booked(conn, workspace, settings, "b4", "bob", now + timedelta(minutes=10))
    # Then ann's first and bob's make actions; ann's others are dropped, with the reason
    assert (len(first.created), len(bob.created)) == (1, 1)
    for dropped in (second, third):
        assert dropped.created == []
        [skip] = dropped.skipped
        assert skip.reason == "rate_limited"
        assert "1 per 3600 s" in skip.message
        assert dropped.success
    assert actions_count(conn) == 2
    # And once ann's hour is over she gets the next
    later = booked(conn, workspace, settings, "b5", "ann", now + timedelta(minutes=61))
    assert len(later.created) == 1


def test_the_key_defaults_to_the_recipient(conn, workspace, settings):
    limit = {"count": 1, "per_seconds": HOUR}
    with pytest.raises(InputError, match=r"action\.limit\.key is needed"):
        create_rule(conn, workspace, rule_with(limit), settings, datetime.now(UTC))
    made = create_rule(conn, workspace, rule_with(limit, "{{ context.guest.id }}"), settings,
                       datetime.now(UTC))  # fmt: skip
    assert made.rule.rate_limit == {"key": None, "count": 1, "per_seconds": HOUR,
                                    "excess": "drop"}  # fmt: skip


def test_a_duplicate_delivery_takes_no_slot(conn, workspace, settings):
    now = datetime.now(UTC)
    two = {"key": "{{ context.guest.id }}", "count": 2, "per_seconds": HOUR}
    create_rule(conn, workspace, rule_with(two), settings, now)
    booked(conn, workspace, settings, "b1", "ann", now)
    again = booked(conn, workspace, settings, "b1", "ann", now)  # the same event, again
    assert [s.reason for s in again.skipped] == ["duplicate"]
    other = booked(conn, workspace, settings, "b2", "ann", now)
    assert len(other.created) == 1
    assert actions_count(conn) == 2


def test_concurrent_events_for_one_key_make_one_action(database_url, conn, workspace, settings):
    now = datetime.now(UTC)
    create_rule(conn, workspace, rule_with(ONE_AN_HOUR), settings, now)
    racers = 6
    barrier = threading.Barrier(racers)
    results: list[ProduceResult] = []

    def producer(n: int) -> None:
        with connect(database_url) as own:
            barrier.wait()
            with own.transaction():
                results.append(booked(own, workspace, settings, f"b{n}", "ann", now))

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(len(r.created) for r in results) == 1
    assert sum(r.count("rate_limited") for r in results) == racers - 1
    assert actions_count(conn) == 1


ONE_AN_HOUR_THE_REST_IN_A_DIGEST = ONE_AN_HOUR | {
    "excess": "digest", "digest_window": {"seconds": HOUR},
}  # fmt: skip


def payload_of(conn, action_id) -> dict[str, str]:
    found = conn.execute(
        "select payload from scheduled_actions where id = %s", (action_id,)
    ).fetchone()
    assert found is not None
    return dict(found[0])


def test_one_an_hour_with_five_events_sends_one_and_a_digest_of_the_four_others(
    conn, workspace, settings
):
    now = datetime.now(UTC)
    made = create_rule(conn, workspace, rule_with(ONE_AN_HOUR_THE_REST_IN_A_DIGEST), settings, now)
    assert made.rule.rate_limit == ONE_AN_HOUR_THE_REST_IN_A_DIGEST
    # Given five bookings for ann within the hour
    results = [
        booked(conn, workspace, settings, f"b{n}", "ann", now + timedelta(minutes=n))
        for n in range(1, 6)
    ]
    # Then the first makes its action alone, the second opens the key's digest (an action
    # at the digest window's end) and the three others join that digest
    [alone] = results[0].created
    [digest_action] = results[1].created
    assert digest_action.idempotency_key.startswith("digest:")
    assert digest_action.publish_at == now + timedelta(minutes=2) + timedelta(hours=1)
    for later in results[2:]:
        assert later.created == []
        [skip] = later.skipped
        assert (skip.reason, skip.action_id) == ("digested", digest_action.action_id)
        assert "1 per 3600 s" in skip.message
    assert actions_count(conn) == 2
    assert payload_of(conn, alone.action_id) == {"text": "hi ann", "more": "0", "bookings": ""}
    assert payload_of(conn, digest_action.action_id) == {
        "text": "hi ann", "more": "4", "bookings": "b2,b3,b4,b5"}  # fmt: skip
    # And the digest is listed as the limit's, holding the four
    [view] = digests.list_digests(conn, workspace, limit=10, source_id=made.rule.id)
    assert (view.digest.source, view.digest.item_count, view.state) == ("limit", 4, "open")
    assert view.digest.action_id == digest_action.action_id
    assert view.digest.time_window == {"seconds": HOUR}
    items = digests.items_of(conn, workspace, view.digest.id)
    assert [i.data["event"]["entities"]["booking"] for i in items] == ["b2", "b3", "b4", "b5"]


def test_a_repeat_of_a_collected_event_is_a_duplicate_even_once_the_key_has_room(
    conn, workspace, settings
):
    # An event's idempotency key holds its date: the repeat 61 minutes on must fall on the
    # same day (from 23:00 UTC on it would be the next day's event, not a repeat).
    now = datetime.now(UTC).replace(hour=12)
    create_rule(conn, workspace, rule_with(ONE_AN_HOUR_THE_REST_IN_A_DIGEST), settings, now)
    booked(conn, workspace, settings, "b1", "ann", now)
    [digest_action] = booked(conn, workspace, settings, "b2", "ann", now).created
    booked(conn, workspace, settings, "b3", "ann", now)
    # The sent one and a collected one delivered again: each counted once
    for repeat in ("b1", "b3"):
        again = booked(conn, workspace, settings, repeat, "ann", now + timedelta(minutes=1))
        assert [s.reason for s in again.skipped] == ["duplicate"]
    # A collected one delivered again after the key's hour is not sent alone
    late = booked(conn, workspace, settings, "b2", "ann", now + timedelta(minutes=61))
    [skip] = late.skipped
    assert (skip.reason, skip.action_id) == ("duplicate", digest_action.action_id)
    assert actions_count(conn) == 2
    [view] = digests.list_digests(conn, workspace, limit=10)
    assert view.digest.item_count == 2


def test_concurrent_events_over_the_limit_make_one_action_and_one_digest(
    database_url, conn, workspace, settings
):
    now = datetime.now(UTC)
    create_rule(conn, workspace, rule_with(ONE_AN_HOUR_THE_REST_IN_A_DIGEST), settings, now)
    racers = 6
    barrier = threading.Barrier(racers)
    results: list[ProduceResult] = []

    def producer(n: int) -> None:
        with connect(database_url) as own:
            barrier.wait()
            with own.transaction():
                # every event twice: the second delivery is a duplicate, whichever wins
                results.append(booked(own, workspace, settings, f"b{n % 3}", "ann", now))

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # One booking sent alone, one digest of the two others; the repeats are duplicates
    assert sum(len(r.created) for r in results) == 2
    assert sum(r.count("duplicate") for r in results) == 3
    assert sum(r.count("digested") for r in results) == 1
    assert actions_count(conn) == 2
    [view] = digests.list_digests(conn, workspace, limit=10)
    assert view.digest.item_count == 2


@pytest.mark.parametrize(
    ("limit", "field"),
    [
        (ONE_AN_HOUR | {"excess": "digest"}, "action.limit.digest_window"),
        (ONE_AN_HOUR | {"digest_window": {"seconds": 60}}, "action.limit.digest_window"),
        (ONE_AN_HOUR | {"excess": "digest", "digest_window": {"seconds": 0}},
         "action.limit.digest_window.seconds"),
    ],
)  # fmt: skip
def test_a_digest_of_the_excess_needs_its_window(conn, workspace, settings, limit, field):
    with pytest.raises(InputError) as refused:
        create_rule(conn, workspace, rule_with(limit), settings, datetime.now(UTC))
    assert refused.value.details["field"] == field


def test_a_digest_of_the_excess_belongs_to_event_rules_that_send_one_by_one(
    conn, workspace, settings
):
    timed = RuleInput(
        name="reminder", trigger=Trigger("time", entity_type="booking", reference="start",
                                         offset_seconds=-HOUR),
        action=ActionTemplate("log", "t", {"text": "soon"},
                              limit=ONE_AN_HOUR_THE_REST_IN_A_DIGEST),
    )  # fmt: skip
    with pytest.raises(InputError, match="event rules") as refused:
        create_rule(conn, workspace, timed, settings, datetime.now(UTC))
    assert refused.value.details["field"] == "action.limit.excess"
    collecting = rule_with(ONE_AN_HOUR_THE_REST_IN_A_DIGEST)
    collecting = RuleInput(
        collecting.name, collecting.trigger,
        ActionTemplate("log", "t", PAYLOAD, digest={"window": {"seconds": 60}},
                       limit=ONE_AN_HOUR_THE_REST_IN_A_DIGEST),
    )  # fmt: skip
    with pytest.raises(InputError, match="already collects") as refused:
        create_rule(conn, workspace, collecting, settings, datetime.now(UTC))
    assert refused.value.details["field"] == "action.limit.excess"


@pytest.mark.parametrize(
    ("limit", "field"),
    [
        ({"count": 0, "per_seconds": 60, "key": "k"}, "action.limit.count"),
        ({"count": 1, "per_seconds": 0, "key": "k"}, "action.limit.per_seconds"),
        ({"count": 1, "per_seconds": 60, "key": "k", "excess": "queue"}, "action.limit.excess"),
        ({"count": 1, "per_seconds": 60, "key": "{{ oops"}, "action.limit.key"),
        ({"count": 1, "per_seconds": 60, "key": "k", "burst": 2}, "action.limit.burst"),
    ],
)
def test_a_bad_limit_names_its_field(conn, workspace, settings, limit, field):
    with pytest.raises(InputError) as refused:
        create_rule(conn, workspace, rule_with(limit), settings, datetime.now(UTC))
    assert refused.value.details["field"] == field
