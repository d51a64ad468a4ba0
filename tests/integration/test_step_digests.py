"""Drip steps that collect (`digest`) or are limited per key (`limit`) on a real Postgres: a
step is decided when it is due; collected, it joins the recipient's shared digest for its key
and window (the same one rules with a shared digest join) and the enrollment moves on; its
limit counts in the workspace's shared window for the key, with the rules' shared limits.
Exactly once under the drip advance running twice and concurrently."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest
from psycopg.rows import dict_row

from tests.sequence_helpers import (
    action_row,
    campaign,
    let_time_come,
    make_engine,
    recipient,
    sms_step,
)
from tickwork.digests import store as digests
from tickwork.digests.model import DigestError
from tickwork.platform.db import Connection, connect
from tickwork.platform.errors import InputError
from tickwork.rules.events import EventInput, emit_event
from tickwork.rules.model import ActionTemplate, RuleInput, Trigger
from tickwork.rules.store import create_rule
from tickwork.runtime import Runtime
from tickwork.sequences.store import (
    AdvanceSummary,
    advance_ready,
    enroll,
    enrollment_actions,
    exit_enrollment,
    get_enrollment,
)

HOUR = 3600
MORNING = {"key": "activity", "window": {"until": "08:00"}}
# What every contributor's template renders: the count and where each item came from.
LISTING = {
    "text": "{{ count }}: {{ items | map(attribute='source') | join(',') }}",
    "steps": "{{ items | selectattr('source', 'equalto', 'sequence')"
    " | map(attribute='step.name') | join(',') }}",
}


@pytest.fixture
def engine(database_url: str) -> Iterator[Runtime]:
    yield from make_engine(database_url)


def collecting_step(name: str, digest: dict[str, Any] | None = None, **wait: Any) -> dict[str, Any]:
    return {
        "name": name,
        "wait": wait or {"delay_seconds": 0},
        "action": {"action_type": "sms", "target_key": "phone", "payload": LISTING,
                   "digest": digest or MORNING},
    }  # fmt: skip


def limited_step(text: str, limit: dict[str, Any], **wait: Any) -> dict[str, Any]:
    step = sms_step(text, **wait)
    step["action"]["limit"] = limit
    return step


def shared_rule(conn: Connection, rt: Runtime, workspace: UUID, **action: Any) -> None:
    rule = RuleInput(
        name="activity", trigger=Trigger("event", event_type="activity.logged"),
        action=ActionTemplate("sms", "phone", action.pop("payload", LISTING),
                              recipient_id="{{ context.who }}", **action),
    )  # fmt: skip
    create_rule(conn, workspace, rule, rt.settings, datetime.now(UTC))


def logged(conn: Connection, rt: Runtime, workspace: UUID, who: str, n: int, at: datetime) -> Any:
    event = EventInput("activity.logged", {"thing": str(n)}, {"who": who}, id=f"evt-{n}")
    return emit_event(conn, workspace, event, ZoneInfo("UTC"), rt.settings, at)


def shared_digests(conn: Connection, workspace: UUID) -> list[digests.DigestView]:
    return [
        d for d in digests.list_digests(conn, workspace, limit=50) if d.digest.source == "shared"
    ]


def step_changes(conn: Connection, enrollment_id: UUID) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "select * from action_changes where enrollment_id = %s order by id", (enrollment_id,)
        ).fetchall()


def test_steps_of_two_campaigns_and_a_rule_collect_into_the_recipients_one_morning_digest(
    conn, workspace, engine, now
):
    # Given ann, two campaigns whose first step collects her "activity" until 08:00, one
    # of them with a plain step after it, and a rule whose shared digest names the same
    recipient(conn, engine, workspace)
    welcome = campaign(conn, engine, workspace,
                       [collecting_step("welcome"), sms_step("thanks", delay_seconds=60)],
                       name="welcome")  # fmt: skip
    tips = campaign(conn, engine, workspace, [collecting_step("tips")], name="tips")
    shared_rule(conn, engine, workspace, digest=MORNING | {"shared": True})
    # When she is enrolled in both and an event of hers comes
    first = enroll(conn, workspace, welcome, "ann", {}, engine.settings, now).enrollment
    second = enroll(conn, workspace, tips, "ann", {}, engine.settings, now).enrollment
    fired = logged(conn, engine, workspace, "ann", 1, now)
    # Then one digest holds the three, and one action (due at 08:00) lists them
    [digest] = shared_digests(conn, workspace)
    assert digest.digest.item_count == 3
    assert digest.digest.digest_key == "activity"
    assert fired.skipped[0].reason == "digested"
    action = action_row(conn, digest.digest.action_id)
    assert action["payload"] == {"text": "3: sequence,sequence,rule", "steps": "welcome,tips"}
    assert (action["source"], action["action_type"], action["recipient_id"]) == (
        "digest", "sms", "ann")  # fmt: skip
    assert action["publish_at"].astimezone(UTC).time().isoformat() == "08:00:00"
    # And the enrollments moved on as if the steps were sent: the next step is made, the
    # one-step campaign completed, each with the collect in its change log
    moved = get_enrollment(conn, workspace, first.id)
    [(index, thanks)] = enrollment_actions(conn, first.id)
    assert (moved.current_step, index, thanks.payload) == (1, 1, {"text": "thanks"})
    assert get_enrollment(conn, workspace, second.id).status == "completed"
    for enrollment_id in (first.id, second.id):
        [entry] = step_changes(conn, enrollment_id)
        assert (entry["kind"], entry["action_id"]) == ("digest", digest.digest.action_id)
        assert str(digest.digest.id) in entry["reason"]


def test_a_rules_own_digest_is_not_shared_with_steps(conn, workspace, engine, now):
    recipient(conn, engine, workspace)
    drip = campaign(conn, engine, workspace, [collecting_step("welcome")])
    shared_rule(conn, engine, workspace, digest=MORNING)  # the rule's own
    enroll(conn, workspace, drip, "ann", {}, engine.settings, now)
    logged(conn, engine, workspace, "ann", 1, now)
    views = digests.list_digests(conn, workspace, limit=10)
    assert sorted((v.digest.source, v.digest.item_count) for v in views) == [
        ("rule", 1), ("shared", 1)]  # fmt: skip


def test_a_step_due_later_waits_and_is_collected_once_by_concurrent_advances(
    database_url, conn, workspace, engine, now
):
    # Given a drip whose second step, an hour after the first, collects
    recipient(conn, engine, workspace)
    drip = campaign(conn, engine, workspace,
                    [sms_step("hello"), collecting_step("recap", delay_seconds=HOUR)])  # fmt: skip
    eid = enroll(conn, workspace, drip, "ann", {}, engine.settings, now).enrollment.id
    [(_, hello)] = enrollment_actions(conn, eid)
    let_time_come(conn, engine, [hello.id], "sms")
    # When the advance passes the first step, the second is not collected yet: it waits
    advance_ready(conn, engine.settings, now)
    waiting = get_enrollment(conn, workspace, eid)
    assert (waiting.current_step, waiting.current_action_id) == (1, None)
    assert waiting.next_send_at is not None
    assert waiting.next_send_at > now
    assert shared_digests(conn, workspace) == []
    # When it is due, four advances run at once, and then once more
    due = waiting.next_send_at + timedelta(seconds=1)
    barrier = threading.Barrier(4)
    results: list[AdvanceSummary] = []

    def advancer() -> None:
        with connect(database_url) as own:
            barrier.wait()
            results.append(advance_ready(own, engine.settings, due))

    threads = [threading.Thread(target=advancer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    again = advance_ready(conn, engine.settings, due + timedelta(minutes=1))
    # Then the step was decided once: one item in one digest, the enrollment completed
    assert sum(r.decided for r in results) + again.decided == 1
    assert sum(r.errors for r in results) + again.errors == 0
    [digest] = shared_digests(conn, workspace)
    assert digest.digest.item_count == 1
    [item] = digests.items_of(conn, workspace, digest.digest.id)
    assert item.item_key == f"step:{eid}:1"
    assert item.data["step"] == {"index": 1, "name": "recap"}
    assert get_enrollment(conn, workspace, eid).status == "completed"
    assert [c["kind"] for c in step_changes(conn, eid)] == ["digest"]


def test_an_exit_before_a_waiting_step_is_due_collects_nothing(conn, workspace, engine, now):
    recipient(conn, engine, workspace)
    drip = campaign(conn, engine, workspace, [collecting_step("recap", delay_seconds=HOUR)])
    enrolled = enroll(conn, workspace, drip, "ann", {}, engine.settings, now).enrollment
    assert enrolled.next_send_at is not None
    assert enrolled.current_action_id is None
    done = exit_enrollment(conn, workspace, enrolled.id, "bye", "tester")
    assert (done.status, done.exit_outcome) == ("exited", "none")
    summary = advance_ready(conn, engine.settings, now + timedelta(hours=2))
    assert summary.decided == 0
    assert shared_digests(conn, workspace) == []


def test_a_step_whose_conditions_fail_when_due_is_skipped_not_collected(
    conn, workspace, engine, now
):
    recipient(conn, engine, workspace)
    step = collecting_step("recap")
    step["conditions"] = [{"path": "data.active", "op": "eq", "value": True}]
    drip = campaign(conn, engine, workspace, [step])
    eid = enroll(conn, workspace, drip, "ann", {"active": False}, engine.settings, now)
    assert shared_digests(conn, workspace) == []
    [entry] = step_changes(conn, eid.enrollment.id)
    assert entry["kind"] == "skip"
    assert get_enrollment(conn, workspace, eid.enrollment.id).status == "completed"


ONE_AN_HOUR = {"count": 1, "per_seconds": HOUR}


def test_a_step_limit_keyed_on_the_recipient_counts_with_a_rules_shared_limit(
    conn, workspace, engine, now
):
    # Given a rule limited to one an hour per recipient in the shared window, and a drip
    # whose step has the same limit
    for who in ("ann", "bob"):
        recipient(conn, engine, workspace, who)
    shared_rule(conn, engine, workspace, payload={"text": "hi"},
                limit=ONE_AN_HOUR | {"shared": True})  # fmt: skip
    drip = campaign(conn, engine, workspace, [limited_step("welcome", ONE_AN_HOUR)])
    # When the rule sends ann one, and ann and bob are enrolled
    assert len(logged(conn, engine, workspace, "ann", 1, now).created) == 1
    ann = enroll(conn, workspace, drip, "ann", {}, engine.settings, now).enrollment
    bob = enroll(conn, workspace, drip, "bob", {}, engine.settings, now).enrollment
    # Then ann's step is dropped (her hour had its one) and the enrollment moves on;
    # bob's is sent alone, as any step
    assert enrollment_actions(conn, ann.id) == []
    [entry] = step_changes(conn, ann.id)
    assert entry["kind"] == "drop"
    assert "1 per 3600 s" in entry["reason"]
    assert get_enrollment(conn, workspace, ann.id).status == "completed"
    [(_, bobs)] = enrollment_actions(conn, bob.id)
    assert (bobs.source, bobs.payload) == ("sequence", {"text": "welcome"})
    # And the rule's next firing for bob is over the limit his step took
    assert logged(conn, engine, workspace, "bob", 2, now).skipped[0].reason == "rate_limited"


def test_a_rules_own_limit_does_not_count_a_steps(conn, workspace, engine, now):
    recipient(conn, engine, workspace)
    shared_rule(conn, engine, workspace, payload={"text": "hi"}, limit=ONE_AN_HOUR)
    drip = campaign(conn, engine, workspace, [limited_step("welcome", ONE_AN_HOUR)])
    assert len(logged(conn, engine, workspace, "ann", 1, now).created) == 1
    ann = enroll(conn, workspace, drip, "ann", {}, engine.settings, now).enrollment
    assert len(enrollment_actions(conn, ann.id)) == 1


def test_a_steps_excess_goes_into_the_keys_shared_digest(conn, workspace, engine, now):
    recipient(conn, engine, workspace)
    limit = ONE_AN_HOUR | {"excess": "digest", "digest_window": {"seconds": 600}}
    first = campaign(conn, engine, workspace, [limited_step("one", limit)], name="one")
    more = "{{ count | default(1) }} more"
    second = campaign(conn, engine, workspace, [limited_step(more, limit)], name="two")
    third = campaign(conn, engine, workspace, [limited_step(more, limit)], name="three")
    alone = enroll(conn, workspace, first, "ann", {}, engine.settings, now).enrollment
    enroll(conn, workspace, second, "ann", {}, engine.settings, now)
    enroll(conn, workspace, third, "ann", {}, engine.settings, now)
    assert len(enrollment_actions(conn, alone.id)) == 1
    [digest] = shared_digests(conn, workspace)
    assert (digest.digest.item_count, digest.digest.digest_key) == (2, "ann")
    assert action_row(conn, digest.digest.action_id)["payload"] == {"text": "2 more"}


def test_a_step_that_collects_under_a_limit_counts_digests_not_items(conn, workspace, engine, now):
    recipient(conn, engine, workspace)
    step = collecting_step("recap", {"window": {"seconds": 60}})
    step["action"]["limit"] = ONE_AN_HOUR
    drips = [campaign(conn, engine, workspace, [step], name=f"c{n}") for n in range(3)]
    for drip in drips[:2]:
        enroll(conn, workspace, drip, "ann", {}, engine.settings, now)
    [digest] = shared_digests(conn, workspace)
    assert digest.digest.item_count == 2  # the second joined the open digest: no new one
    digests.flush(conn, workspace, digest.digest.id, now)
    # The next would open a second digest within the hour: dropped
    third = enroll(conn, workspace, drips[2], "ann", {}, engine.settings, now).enrollment
    assert [c["kind"] for c in step_changes(conn, third.id)] == ["drop"]
    assert len(shared_digests(conn, workspace)) == 1


@pytest.mark.parametrize(
    ("action", "error", "field"),
    [
        ({"digest": {"window": {"minutes": 5}}}, DigestError, "steps[0].action.digest.window"),
        ({"digest": MORNING | {"shared": False}}, DigestError, "steps[0].action.digest.shared"),
        (
            {"digest": {"window": {"seconds": 60}, "key": "{{ data.x"}},
            InputError,
            "steps[0].action.digest.key",
        ),
        ({"limit": {"per_seconds": 60}}, InputError, "steps[0].action.limit.count"),
        ({"limit": ONE_AN_HOUR | {"shared": False}}, InputError, "steps[0].action.limit.shared"),
        (
            {"limit": ONE_AN_HOUR | {"excess": "digest"}},
            InputError,
            "steps[0].action.limit.digest_window",
        ),
        (
            {
                "digest": MORNING,
                "limit": ONE_AN_HOUR | {"excess": "digest", "digest_window": {"seconds": 60}},
            },
            InputError,
            "steps[0].action.limit.excess",
        ),
        ({"deliver": "now"}, InputError, "steps[0].action"),
    ],
)
def test_a_step_asking_for_a_digest_or_limit_it_cannot_have_is_refused_naming_the_field(
    conn, workspace, engine, action, error, field
):
    step = sms_step("x")
    step["action"] |= action
    with pytest.raises(error) as refused:
        campaign(conn, engine, workspace, [step])
    assert refused.value.details.get("field") == field


def test_a_rules_digest_honours_its_limit_counting_the_digests_it_opens(
    conn, workspace, engine, now
):
    # Given a rule collecting for a minute, at most one digest an hour per recipient
    recipient(conn, engine, workspace)
    shared_rule(conn, engine, workspace, digest={"window": {"seconds": 60}},
                limit={"count": 1, "per_seconds": HOUR})  # fmt: skip
    # When three events come: all join the one digest (items are not counted)
    results = [logged(conn, engine, workspace, "ann", n, now) for n in range(3)]
    assert [len(r.created) for r in results] == [1, 0, 0]
    [digest] = digests.list_digests(conn, workspace, limit=10)
    assert digest.digest.item_count == 3
    # When its action is taken, the next event would open a second digest within the hour:
    # it is dropped, and nothing is written
    digests.flush(conn, workspace, digest.digest.id, now)
    late = logged(conn, engine, workspace, "ann", 3, now + timedelta(minutes=5))
    assert [s.reason for s in late.skipped] == ["rate_limited"]
    assert "digests" in late.skipped[0].message
    assert len(digests.list_digests(conn, workspace, limit=10)) == 1
    # Once the hour is over the next opens a new one
    later = logged(conn, engine, workspace, "ann", 4, now + timedelta(minutes=61))
    assert len(later.created) == 1
    assert len(digests.list_digests(conn, workspace, limit=10)) == 2
