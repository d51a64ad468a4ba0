"""Recipient policies on a real Postgres: quiet hours move a message at creation and are
re-checked at claim; caps per channel per local day are taken race-free at claim."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tests.sequence_helpers import (
    action_row,
    changes_of,
    let_time_come,
    make_engine,
    recipient,
    sent,
)
from tickwork.actions import model, scheduling, store
from tickwork.actions.model import NewAction
from tickwork.engine.admission import admit, claim_admitted
from tickwork.platform.db import connect
from tickwork.platform.errors import InputError
from tickwork.recipients.model import local_day, next_day_slot
from tickwork.recipients.store import find_recipient
from tickwork.rules.events import EventInput, emit_event
from tickwork.rules.model import ActionTemplate, RuleInput, Trigger
from tickwork.rules.store import create_rule
from tickwork.runtime import Runtime

TOKYO = ZoneInfo("Asia/Tokyo")
NIGHTS = [{"start": "21:00", "end": "08:00"}]


@pytest.fixture
def engine(database_url: str) -> Iterator[Runtime]:
    yield from make_engine(database_url)


def raw_claim(conn, action_id):
    """The claim alone, without its admission, for admitting at a chosen time."""
    return store.claim(conn, "sms", [action_id], early_tolerance=1)


def sms(conn, rt, workspace, at, recipient_id="ann", **fields):
    new = NewAction(action_type="sms", target_key="phone", publish_at=at,
                    payload={"text": "hi"}, recipient_id=recipient_id, **fields)  # fmt: skip
    return scheduling.schedule(conn, workspace, new, rt.settings, datetime.now(UTC)).action


def test_an_sms_due_2330_in_tokyo_quiet_hours_goes_at_0800_local(conn, workspace, engine):
    recipient(conn, engine, workspace, timezone="Asia/Tokyo", quiet_hours=NIGHTS)
    asked = datetime(2027, 6, 1, 23, 30, tzinfo=TOKYO)
    action = sms(conn, engine, workspace, asked)
    assert action.publish_at == datetime(2027, 6, 2, 8, 0, tzinfo=TOKYO)
    assert action.original_publish_at == asked
    [change] = changes_of(conn, action.id)
    assert (change["kind"], change["old_at"], change["new_at"]) == (
        "quiet_hours", asked, action.publish_at)  # fmt: skip
    # outside the window nothing moves; transactional messages are exempt
    assert sms(conn, engine, workspace, asked - timedelta(hours=3)).original_publish_at is None
    receipt = sms(conn, engine, workspace, asked, transactional=True, thing_id="receipt")
    assert (receipt.publish_at, receipt.original_publish_at) == (asked, None)


def test_quiet_hours_are_checked_again_when_the_message_fires(conn, workspace, engine):
    recipient(conn, engine, workspace, timezone="Asia/Tokyo")
    action = sms(conn, engine, workspace, datetime.now(UTC) + timedelta(minutes=5))
    # the recipient sets quiet hours after the message was made
    recipient(conn, engine, workspace, timezone="Asia/Tokyo", quiet_hours=NIGHTS)
    conn.execute("update scheduled_actions set next_attempt_at = now() where id = %s", (action.id,))
    night = datetime(2027, 6, 1, 23, 30, tzinfo=TOKYO)
    with conn.transaction():
        [claimed] = raw_claim(conn, action.id)
        admitted = admit(conn, [claimed], now=night)
    assert admitted == []
    row = action_row(conn, action.id)
    assert (row["status"], row["next_attempt_at"], row["attempt_count"]) == (
        "queued", datetime(2027, 6, 2, 8, 0, tzinfo=TOKYO), 0)  # fmt: skip
    assert row["publish_at"] == action.publish_at  # never edited in place
    [change] = changes_of(conn, action.id)
    assert (change["kind"], change["reason"]) == ("defer", "in the recipient's quiet hours")
    # at 08:00 local it goes
    with conn.transaction():
        conn.execute("update scheduled_actions set next_attempt_at = now() where id = %s",
                     (action.id,))  # fmt: skip
        [claimed] = raw_claim(conn, action.id)
        assert admit(conn, [claimed], now=datetime(2027, 6, 2, 8, 0, tzinfo=TOKYO)) == [claimed]


@pytest.mark.parametrize("zone_name", ["Asia/Tokyo", "America/Los_Angeles"])
def test_a_cap_of_2_a_day_defers_the_third_to_tomorrow(conn, workspace, engine, zone_name):
    recipient(conn, engine, workspace, timezone=zone_name, caps={"sms": 2})
    soon = datetime.now(UTC) + timedelta(minutes=1)
    ids = [sms(conn, engine, workspace, soon + timedelta(seconds=i)).id for i in range(3)]
    email = scheduling.schedule(
        conn, workspace,
        NewAction(action_type="email", target_key="inbox", publish_at=soon, recipient_id="ann"),
        engine.settings, datetime.now(UTC),
    ).action  # fmt: skip
    for action_id in ids:  # one at a time, in order
        let_time_come(conn, engine, [action_id], "sms")
    let_time_come(conn, engine, [email.id], "email")
    assert sent(engine) == {ids[0]: 1, ids[1]: 1}
    assert sent(engine, "email") == {email.id: 1}  # another channel, no cap
    third = action_row(conn, ids[2])
    who = find_recipient(conn, workspace, "ann")
    assert who is not None
    tomorrow = next_day_slot(datetime.now(UTC), who)
    assert (third["status"], third["next_attempt_at"]) == ("queued", tomorrow)
    assert tomorrow.astimezone(ZoneInfo(zone_name)).time().isoformat() == "00:00:00"
    [change] = changes_of(conn, ids[2])
    assert change["kind"] == "defer"
    assert change["reason"] == "the recipient's cap of 2 sms a day is reached"
    counter = conn.execute("select day, sent from recipient_day_counts").fetchall()
    assert counter == [(local_day(datetime.now(UTC), who), 2)]


def test_a_cap_with_the_drop_policy_drops_the_third(conn, workspace, engine):
    recipient(conn, engine, workspace, caps={"sms": 2}, cap_policy="drop")
    soon = datetime.now(UTC) + timedelta(minutes=1)
    ids = [sms(conn, engine, workspace, soon).id for _ in range(3)]
    let_time_come(conn, engine, ids, "sms")  # one batch
    assert sum(sent(engine).values()) == 2
    [dropped] = [i for i in ids if i not in sent(engine)]
    row = action_row(conn, dropped)
    assert (row["status"], row["error_code"]) == ("cancelled", "capped")
    assert changes_of(conn, dropped)[0]["kind"] == "drop"


def test_the_next_slot_after_a_cap_skips_quiet_hours(conn, workspace, engine):
    recipient(conn, engine, workspace, timezone="Asia/Tokyo", quiet_hours=NIGHTS)
    who = find_recipient(conn, workspace, "ann")
    assert who is not None
    evening = datetime(2027, 6, 1, 19, 0, tzinfo=TOKYO)
    assert next_day_slot(evening, who) == datetime(2027, 6, 2, 8, 0, tzinfo=TOKYO)


def test_two_dispatchers_racing_for_the_last_slot_take_it_once(
    database_url, conn, workspace, engine
):
    recipient(conn, engine, workspace, caps={"sms": 2})
    soon = datetime.now(UTC) + timedelta(minutes=1)
    [first] = [sms(conn, engine, workspace, soon).id]
    let_time_come(conn, engine, [first], "sms")  # one slot left
    racers = [sms(conn, engine, workspace, soon).id for _ in range(6)]
    conn.execute("update scheduled_actions set next_attempt_at = now() where id = any(%s)",
                 (racers,))  # fmt: skip
    barrier = threading.Barrier(len(racers))
    admitted: list[object] = []

    def dispatcher(action_id) -> None:
        with connect(database_url) as own:
            barrier.wait()
            admitted.extend(claim_admitted(own, "sms", [action_id], early_tolerance=1))

    threads = [threading.Thread(target=dispatcher, args=(i,)) for i in racers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(admitted) == 1
    statuses = conn.execute(
        "select status, count(*) from scheduled_actions where id = any(%s) group by 1", (racers,)
    ).fetchall()
    assert dict(statuses) == {"submitted": 1, "queued": 5}
    assert conn.execute("select sent from recipient_day_counts").fetchall() == [(2,)]


def test_a_requeued_message_keeps_its_slot(conn, workspace, engine):
    recipient(conn, engine, workspace, caps={"sms": 1})
    action = sms(conn, engine, workspace, datetime.now(UTC) + timedelta(minutes=1))
    conn.execute("update scheduled_actions set next_attempt_at = now() where id = %s", (action.id,))
    [claimed] = claim_admitted(conn, "sms", [action.id], early_tolerance=1)
    store.finalize(conn, [model.requeued(claimed.id, datetime.now(UTC), "503")])
    [again] = claim_admitted(conn, "sms", [action.id], early_tolerance=1)
    assert again.id == action.id
    assert conn.execute("select sent from recipient_day_counts").fetchall() == [(1,)]


def test_an_unknown_recipient_is_refused(conn, workspace, engine):
    with pytest.raises(InputError, match="register it"):
        sms(conn, engine, workspace, datetime.now(UTC) + timedelta(hours=1), recipient_id="bob")
    assert conn.execute("select count(*) from scheduled_actions").fetchone() == (0,)


def test_quiet_hours_that_leave_no_time_are_refused(conn, workspace, engine):
    with pytest.raises(InputError, match="leave no time"):
        recipient(conn, engine, workspace, quiet_hours=[{"start": "08:00", "end": "08:00"}])


def test_a_rules_action_to_a_recipient_counts_against_their_cap(conn, workspace, engine):
    recipient(conn, engine, workspace, "guest-7", caps={"sms": 1})
    rule = RuleInput(
        name="sms", trigger=Trigger("event", event_type="booking.confirmed"),
        action=ActionTemplate("sms", "phone", {"text": "hi"},
                              recipient_id="{{ context.guest.id }}"),
    )  # fmt: skip
    create_rule(conn, workspace, rule, engine.settings, datetime.now(UTC), created_by="alice")
    first = sms(conn, engine, workspace, datetime.now(UTC) + timedelta(minutes=1), "guest-7")
    let_time_come(conn, engine, [first.id], "sms")
    event = EventInput("booking.confirmed", {"booking": "b1"}, {"guest": {"id": "guest-7"}})
    result = emit_event(conn, workspace, event, ZoneInfo("UTC"), engine.settings,
                        datetime.now(UTC))  # fmt: skip
    [made] = result.created
    assert action_row(conn, made.action_id)["recipient_id"] == "guest-7"
    let_time_come(conn, engine, [made.action_id], "sms")
    assert sent(engine) == {first.id: 1}
    assert changes_of(conn, made.action_id)[0]["kind"] == "defer"
    # a rule naming a recipient that is not registered fails that firing, with the reason
    other = EventInput("booking.confirmed", {"booking": "b2"}, {"guest": {"id": "nobody"}})
    failed = emit_event(conn, workspace, other, ZoneInfo("UTC"), engine.settings,
                        datetime.now(UTC))  # fmt: skip
    assert [f.field for f in failed.failed] == ["recipient_id"]
