"""Drip sequences on a real Postgres: one enrollment per (campaign, recipient), one send per
step at the recipient's local times, optimistic-lock advances, exits and their races."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from psycopg.types.json import Jsonb

from tests.conftest import make_workspace
from tests.sequence_helpers import (
    action_row,
    campaign,
    changes_of,
    let_time_come,
    make_engine,
    recipient,
    sent,
    sms_step,
)
from tickwork.actions import model, scheduling, store
from tickwork.engine.admission import claim_admitted
from tickwork.platform.db import connect
from tickwork.rules import metering
from tickwork.rules.templating import JsonTemplate
from tickwork.runtime import Runtime
from tickwork.sequences.store import (
    advance_ready,
    enroll,
    enrollment_actions,
    exit_enrollment,
    exit_outcome,
    get_enrollment,
    update_data,
)

NEW_YORK_DST = datetime(2027, 3, 12, 12, 0, tzinfo=UTC)  # Friday; clocks go forward Sunday


@pytest.fixture
def engine(database_url: str) -> Iterator[Runtime]:
    yield from make_engine(database_url)


def three_step_drip(conn, rt, workspace, **fields):
    return campaign(
        conn, rt, workspace,
        [sms_step("welcome {{ data.name }}", day=0, at="09:00"),
         sms_step("tips", day=2, at="09:00"),
         sms_step("offer", day=7, at="09:00")],
        **fields,
    )  # fmt: skip


def test_a_3_step_drip_enrolled_twice_sends_each_step_once_at_local_times_across_dst(
    conn, workspace, engine, now
):
    # Given a recipient in New York and a drip of day 0, 2 and 7 at 09:00 local, starting
    # the Friday before the clocks go forward
    recipient(conn, engine, workspace, timezone="America/New_York")
    drip = three_step_drip(conn, engine, workspace)
    # When the recipient is enrolled twice
    first = enroll(conn, workspace, drip, "ann", {"name": "Ann"}, engine.settings, now,
                   starts_at=NEW_YORK_DST)  # fmt: skip
    again = enroll(conn, workspace, drip, "ann", {"name": "Ann"}, engine.settings, now,
                   starts_at=NEW_YORK_DST)  # fmt: skip
    # Then there is one enrollment
    assert (first.created, again.created) == (True, False)
    assert again.enrollment.id == first.enrollment.id
    eid = first.enrollment.id
    # And each step is made when the previous one is sent, at 09:00 New York time
    expected = ["2027-03-12T14:00:00+00:00", "2027-03-14T13:00:00+00:00",
                "2027-03-19T13:00:00+00:00"]  # fmt: skip
    for step, when in enumerate(expected):
        made = enrollment_actions(conn, eid)
        assert len(made) == step + 1
        index, action = made[-1]
        assert (index, action.publish_at.isoformat()) == (step, when)
        assert action.dedupe_key == f"{eid}:{step}"
        let_time_come(conn, engine, [action.id], "sms")
        # the advance pass, run twice, as a retried cron would
        advance_ready(conn, engine.settings, datetime.now(UTC))
        advance_ready(conn, engine.settings, datetime.now(UTC))
    done = get_enrollment(conn, workspace, eid)
    assert (done.status, done.current_step) == ("completed", 3)
    rows = enrollment_actions(conn, eid)
    assert [a.status for _, a in rows] == ["published"] * 3
    assert action_row(conn, rows[0][1].id)["payload"] == {"text": "welcome Ann"}
    assert sent(engine) == {a.id: 1 for _, a in rows}


def test_two_concurrent_advancers_make_one_send_per_step(
    database_url, conn, workspace, engine, now
):
    recipient(conn, engine, workspace)
    drip = campaign(conn, engine, workspace,
                    [sms_step("a"), sms_step("b", delay_seconds=3600)])  # fmt: skip
    eid = enroll(conn, workspace, drip, "ann", {}, engine.settings, now).enrollment.id
    [(_, first)] = enrollment_actions(conn, eid)
    let_time_come(conn, engine, [first.id], "sms")
    barrier = threading.Barrier(4)
    results = []

    def advancer() -> None:
        with connect(database_url) as own:
            barrier.wait()
            results.append(advance_ready(own, engine.settings, datetime.now(UTC)))

    threads = [threading.Thread(target=advancer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.advanced for r in results) == 1
    assert sum(r.lost for r in results) + sum(r.enrollments == 0 for r in results) == 3
    steps = enrollment_actions(conn, eid)
    assert [i for i, _ in steps] == [0, 1]
    assert get_enrollment(conn, workspace, eid).current_step == 1
    count = conn.execute(
        "select count(*) from scheduled_actions where source = 'sequence'"
    ).fetchone()[0]
    assert count == 2


def test_an_exit_between_steps_sends_nothing_more(conn, workspace, engine, now):
    recipient(conn, engine, workspace)
    drip = three_step_drip(conn, engine, workspace)
    eid = enroll(conn, workspace, drip, "ann", {"name": "Ann"}, engine.settings, now,
                 starts_at=NEW_YORK_DST).enrollment.id  # fmt: skip
    [(_, first)] = enrollment_actions(conn, eid)
    let_time_come(conn, engine, [first.id], "sms")
    advance_ready(conn, engine.settings, datetime.now(UTC))
    pending = enrollment_actions(conn, eid)[-1][1]
    assert pending.status == "queued"
    # When the person replies and the enrollment exits
    exited = exit_enrollment(conn, workspace, eid, "replied", "alice")
    # Then the pending step is cancelled at once, and nothing more is made or sent
    assert (exited.status, exited.exit_reason, exited.exit_outcome) == (
        "exited", "replied", "cancelled")  # fmt: skip
    assert action_row(conn, pending.id)["status"] == "cancelled"
    let_time_come(conn, engine, [pending.id], "sms")
    advance_ready(conn, engine.settings, datetime.now(UTC))
    assert len(enrollment_actions(conn, eid)) == 2
    assert sent(engine) == {first.id: 1}
    [change] = changes_of(conn, pending.id)
    assert (change["kind"], change["reason"]) == ("exit", "enrollment exited: replied")
    assert change["old_at"] == pending.publish_at
    # exiting again changes nothing
    assert exit_enrollment(conn, workspace, eid, "again", "alice").exit_reason == "replied"


def test_an_exit_after_the_claim_lets_the_step_go_and_says_so(conn, workspace, engine, now):
    recipient(conn, engine, workspace)
    drip = campaign(conn, engine, workspace, [sms_step("a"), sms_step("b")])
    eid = enroll(conn, workspace, drip, "ann", {}, engine.settings, now).enrollment.id
    [(_, step)] = enrollment_actions(conn, eid)
    # A dispatcher claimed the step; the exit arrives before it finalizes
    [claimed] = claim_admitted(conn, "sms", [step.id], early_tolerance=1)
    exited = exit_enrollment(conn, workspace, eid, "unsubscribed", "alice")
    assert exited.exit_outcome == "in_flight"
    store.finalize(conn, [model.published(claimed.id, "p-1")])
    advance_ready(conn, engine.settings, datetime.now(UTC))
    assert [a.status for _, a in enrollment_actions(conn, eid)] == ["published"]
    [change] = conn.execute("select kind, reason from action_changes").fetchall()
    assert change == ("exit", "unsubscribed; the pending step was already being sent")


def test_an_exit_racing_a_steps_dispatch_is_either_cancelled_or_sent(
    database_url, conn, workspace, engine, now
):
    recipient(conn, engine, workspace)
    drip = campaign(conn, engine, workspace, [sms_step("a"), sms_step("b")])
    outcomes = []
    for i in range(8):
        recipient(conn, engine, workspace, f"r{i}")
        eid = enroll(conn, workspace, drip, f"r{i}", {}, engine.settings, now).enrollment.id
        [(_, step)] = enrollment_actions(conn, eid)
        barrier = threading.Barrier(2)

        def dispatcher(action_id=step.id, barrier=barrier) -> None:
            with connect(database_url) as own:
                barrier.wait()
                claimed = claim_admitted(own, "sms", [action_id], early_tolerance=1)
                if claimed:
                    store.finalize(own, [model.published(action_id, "p")])

        def exiter(enrollment_id=eid, barrier=barrier) -> None:
            with connect(database_url) as own:
                barrier.wait()
                exit_enrollment(own, workspace, enrollment_id, "replied", "alice")

        threads = [threading.Thread(target=dispatcher), threading.Thread(target=exiter)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        advance_ready(conn, engine.settings, datetime.now(UTC))
        status = action_row(conn, step.id)["status"]
        enrollment = get_enrollment(conn, workspace, eid)
        assert enrollment.status == "exited"
        # exactly one of cancelled and sent, and the enrollment says which
        said = exit_outcome(enrollment, enrollment_actions(conn, eid))
        assert (status, said) in {("cancelled", "cancelled"), ("published", "sent"),
                                  ("published", "none")}  # fmt: skip
        # a cancelled step never reached the provider
        assert action_row(conn, step.id)["attempt_count"] == (status == "published")
        assert len(enrollment_actions(conn, eid)) == 1  # no next step either way
        outcomes.append(status)
    assert set(outcomes) <= {"cancelled", "published"}
    print("race outcomes:", Counter(outcomes))


def test_a_step_whose_conditions_fail_at_fire_time_is_skipped_and_the_next_made(
    conn, workspace, engine, now
):
    recipient(conn, engine, workspace)
    steps = [sms_step("a"),
             sms_step("upgrade now") | {"conditions": [
                 {"path": "data.plan", "op": "eq", "value": "free"}]},
             sms_step("c")]  # fmt: skip
    drip = campaign(conn, engine, workspace, steps)
    eid = enroll(conn, workspace, drip, "ann", {"plan": "free"}, engine.settings, now).enrollment.id
    [(_, a)] = enrollment_actions(conn, eid)
    let_time_come(conn, engine, [a.id], "sms")
    advance_ready(conn, engine.settings, datetime.now(UTC))
    [_, (_, b)] = enrollment_actions(conn, eid)
    # the person upgrades before step 1 fires: its condition no longer holds
    update_data(conn, workspace, eid, {"plan": "pro"})
    let_time_come(conn, engine, [b.id], "sms")
    skipped = action_row(conn, b.id)
    assert (skipped["status"], skipped["error_code"]) == ("cancelled", "skipped")
    assert skipped["last_error"] == "skipped: data.plan is 'pro', not 'free'"
    assert skipped["attempt_count"] == 0
    [change] = changes_of(conn, b.id)
    assert change["kind"] == "skip"
    advance_ready(conn, engine.settings, datetime.now(UTC))
    assert [i for i, _ in enrollment_actions(conn, eid)] == [0, 1, 2]
    assert sent(engine) == {a.id: 1}


def test_a_step_moved_by_a_person_is_followed_not_skipped(conn, workspace, engine, now):
    recipient(conn, engine, workspace)
    drip = campaign(conn, engine, workspace,
                    [sms_step("a", delay_seconds=3600), sms_step("b")])  # fmt: skip
    eid = enroll(conn, workspace, drip, "ann", {}, engine.settings, now).enrollment.id
    [(_, a)] = enrollment_actions(conn, eid)
    _, moved = scheduling.reschedule(conn, workspace, a.id, now + timedelta(hours=2),
                                  engine.settings, now)  # fmt: skip
    assert moved is not None
    advance_ready(conn, engine.settings, datetime.now(UTC))
    enrollment = get_enrollment(conn, workspace, eid)
    assert (enrollment.current_step, enrollment.current_action_id) == (0, moved.id)
    [change] = changes_of(conn, a.id)
    assert (change["kind"], change["new_action_id"]) == ("reschedule", moved.id)
    assert change["new_at"] == now + timedelta(hours=2)


def test_two_clients_enrolling_the_same_recipient_at_once_make_one_enrollment(
    database_url, conn, workspace, engine, now
):
    recipient(conn, engine, workspace)
    drip = campaign(conn, engine, workspace, [sms_step("a"), sms_step("b")])
    barrier = threading.Barrier(4)
    results = []

    def client() -> None:
        with connect(database_url) as own:
            barrier.wait()
            results.append(enroll(own, workspace, drip, "ann", {}, engine.settings, now))

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.created for r in results) == [False, False, False, True]
    assert len({r.enrollment.id for r in results}) == 1
    assert conn.execute("select count(*) from scheduled_actions").fetchone() == (1,)


# ------------------------------------------------------------------- template budgets

POWER = "{% set x = (((data.n ** 64) ** 64) ** 64) ** 64 %}b"
SPENDER = "{% for i in range(1000) %}" + "{{ i }}" * 30 + "{% endfor %}"


@pytest.fixture
def no_clock(monkeypatch):
    """Only the counts and sizes stop a template (the CPU budget is made generous)."""
    monkeypatch.setattr(metering, "MAX_CPU_SECONDS", 3600.0)


@pytest.fixture
def renders(monkeypatch) -> Counter[str]:
    """How many times each template field was rendered."""
    counted: Counter[str] = Counter()
    real = JsonTemplate.render

    def render(self, context, budget=None):
        counted[self.field] += 1
        return real(self, context, budget)

    monkeypatch.setattr(JsonTemplate, "render", render)
    return counted


@pytest.mark.timeout(30)
def test_a_step_over_its_budget_is_skipped_once_with_the_reason_and_the_next_made(
    conn, workspace, engine, now, renders
):
    # Given a drip whose middle step's template would grow without end on this data
    recipient(conn, engine, workspace)
    drip = campaign(conn, engine, workspace, [sms_step("a"), sms_step(POWER), sms_step("c")])
    eid = enroll(conn, workspace, drip, "ann", {"n": 9}, engine.settings, now).enrollment.id
    [(_, a)] = enrollment_actions(conn, eid)
    # When its time comes and the advance pass makes the next step
    let_time_come(conn, engine, [a.id], "sms")
    renders.clear()
    advance_ready(conn, engine.settings, datetime.now(UTC))
    # Then the step was rendered once, skipped with the reason, and the next one made
    assert [i for i, _ in enrollment_actions(conn, eid)] == [0, 2]
    assert get_enrollment(conn, workspace, eid).last_error == (
        "step 1 was skipped: action.payload.text: the template would make a number of more"
        " than 4,300 digits"
    )
    assert renders == {"action.target_key": 2, "action.payload": 2}  # steps 1 and 2
    # And later passes never render it again
    renders.clear()
    for _ in range(3):
        advance_ready(conn, engine.settings, datetime.now(UTC))
    assert renders == {}


@pytest.mark.usefixtures("no_clock")
def test_a_workspaces_steps_in_one_pass_share_a_budget_and_another_workspaces_are_made(
    conn, workspace, engine, now
):
    # Given more enrollments whose next step spends a whole render than a pass renders in
    # full for one workspace, and another workspace's ordinary drip, all ready at once
    count = metering.MANY_RENDERS + 3
    drip = campaign(conn, engine, workspace, [sms_step("a"), sms_step(SPENDER)])
    ids = []
    for i in range(count):
        recipient(conn, engine, workspace, f"r{i}")
        ids.append(enroll(conn, workspace, drip, f"r{i}", {}, engine.settings, now).enrollment.id)
    other = make_workspace(conn, "Other")
    recipient(conn, engine, other, "bea")
    theirs = campaign(conn, engine, other, [sms_step("a"), sms_step("b {{ data.x }}")])
    bea = enroll(conn, other, theirs, "bea", {"x": 1}, engine.settings, now).enrollment.id
    firsts = [a.id for e in [*ids, bea] for _, a in enrollment_actions(conn, e)]
    let_time_come(conn, engine, firsts, "sms")
    # When one advance pass runs
    advance_ready(conn, engine.settings, datetime.now(UTC))
    # Then the first workspace's steps were rendered until its budget for the pass was
    # spent, and the rest skipped at once with the reason
    errors = [get_enrollment(conn, workspace, e).last_error or "" for e in ids]
    own = "the template used more than 20,000 operations"
    shared = "this workspace's drip steps in this pass used more than 400,000 operations"
    assert all(e.startswith("step 1 was skipped: ") for e in errors), errors
    assert metering.MANY_RENDERS - 1 <= sum(own in e for e in errors) <= metering.MANY_RENDERS
    assert sum(shared in e for e in errors) >= count - metering.MANY_RENDERS
    assert sum("not rendered" in e for e in errors) >= 2
    # And the other workspace's step was made as usual
    assert [i for i, _ in enrollment_actions(conn, bea)] == [0, 1]
    assert enrollment_actions(conn, bea)[1][1].payload == {"text": "b 1"}


def test_a_stored_step_that_no_longer_compiles_is_skipped_not_retried(conn, workspace, engine, now):
    # Given a campaign stored before the sandbox refused recursive loops
    recipient(conn, engine, workspace)
    drip = campaign(conn, engine, workspace, [sms_step("a"), sms_step("b")])
    recursive = "{% for x in data.l recursive %}{{ loop(x) }}{% endfor %}"
    conn.execute(
        "update campaigns set steps = jsonb_set(steps, '{0,action,payload,text}', %s)"
        " where id = %s",
        (Jsonb(recursive), drip),
    )
    # When a recipient is enrolled
    enrolled = enroll(conn, workspace, drip, "ann", {"l": [1]}, engine.settings, now)
    # Then the step is skipped with the reason and the next one made
    eid = enrolled.enrollment.id
    assert [i for i, _ in enrollment_actions(conn, eid)] == [1]
    assert get_enrollment(conn, workspace, eid).last_error == (
        "step 0 was skipped: action.payload.text: recursive loops are not available in templates"
    )
