"""Automation rules on a real Postgres: events and reference dates become scheduled actions,
made, moved and withdrawn through tickwork.actions."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest

from tests.conftest import make_workspace
from tickwork.actions import model
from tickwork.actions import store as actions_store
from tickwork.platform.db import connect
from tickwork.platform.errors import InputError, NotFoundError
from tickwork.rules import entities, metering, store
from tickwork.rules.events import EventInput, emit_event
from tickwork.rules.model import ActionTemplate, Rule, RuleInput, Trigger
from tickwork.rules.store import RuleChanges
from tickwork.tenancy import tenant_transaction

UTC_ZONE = ZoneInfo("UTC")
HOUR = 3600


def event_rule(name: str = "confirm", event: str = "booking.confirmed", **action: Any) -> RuleInput:
    template = ActionTemplate(
        action.get("action_type", "log"),
        action.get("target_key", "guest"),
        action.get("payload", {"text": "Hi {{ context.guest.name }}"}),
    )
    return RuleInput(name=name, trigger=Trigger("event", event_type=event), action=template,
                     conditions=action.get("conditions", []))  # fmt: skip


def time_rule(name: str, offset: int, reference: str = "start", **action: Any) -> RuleInput:
    template = ActionTemplate(
        "log", "guest", action.get("payload", {"text": "{{ context.guest.name }} at"
                                                       " {{ reference.local }}"})
    )  # fmt: skip
    trigger = Trigger("time", entity_type="booking", reference=reference, offset_seconds=offset)
    return RuleInput(name=name, trigger=trigger, action=template)


def make(conn, workspace, settings, now, given: RuleInput) -> UUID:
    return store.create_rule(conn, workspace, given, settings, now).rule.id


def emit(conn, workspace, settings, now, **overrides: Any):
    event = EventInput(
        type=overrides.get("type", "booking.confirmed"),
        entities=overrides.get("entities", {"booking": "bk-1", "podcast": "pod-1"}),
        context=overrides.get("context", {"guest": {"name": "Ann"}}),
        occurred_at=overrides.get("occurred_at"),
    )
    return emit_event(conn, workspace, event, UTC_ZONE, settings, now)


def put(conn, workspace, settings, now, dates: dict[str, str], entity_id: str = "bk-1",
        timezone: str = "UTC", context: dict[str, Any] | None = None):  # fmt: skip
    given = entities.EntityInput(dates=dates, timezone=timezone,
                                 context=context or {"guest": {"name": "Ann"}})  # fmt: skip
    return entities.put_dates(conn, workspace, "booking", entity_id, given, "UTC", settings, now)


def rows(conn, workspace) -> list[model.Action]:
    found = conn.execute(
        "select id from scheduled_actions where workspace_id = %s order by created_at, id",
        (workspace,),
    ).fetchall()
    return [a for (i,) in found if (a := actions_store.get(conn, workspace, i)) is not None]


def live(conn, workspace) -> list[model.Action]:
    return [a for a in rows(conn, workspace) if a.status == "queued"]


# ------------------------------------------------------------------------------- events


def test_the_same_event_twice_makes_one_action_per_rule_and_the_next_day_another(
    conn, workspace, settings, now
):
    # Given two rules on booking.confirmed
    first = make(conn, workspace, settings, now, event_rule("guest mail"))
    second = make(conn, workspace, settings, now, event_rule("host sms", target_key="host"))
    # When the event comes once
    once = emit(conn, workspace, settings, now)
    # Then each rule made one action, due now, from the context snapshot
    assert once.success
    assert len(once.created) == 2
    assert set(once.rule_ids) == {first, second}
    made = live(conn, workspace)
    assert {a.payload["text"] for a in made} == {"Hi Ann"}
    assert all(a.source == "rule" and a.publish_at == now for a in made)
    assert {a.dedupe_key for a in made} == {
        f"{first}:booking.confirmed:booking=bk-1,podcast=pod-1:{now.date().isoformat()}",
        f"{second}:booking.confirmed:booking=bk-1,podcast=pod-1:{now.date().isoformat()}",
    }
    # When it comes again the same day: nothing new, and the answer says so
    again = emit(conn, workspace, settings, now + timedelta(minutes=5))
    assert again.success
    assert again.created == []
    assert again.count("duplicate") == 2
    assert len(rows(conn, workspace)) == 2
    # When it comes the next day: one more per rule
    tomorrow = now + timedelta(days=1)
    later = emit(conn, workspace, settings, tomorrow, occurred_at=tomorrow)
    assert len(later.created) == 2
    assert len(rows(conn, workspace)) == 4


def test_the_same_event_from_two_clients_at_once_makes_one_action_per_rule(
    database_url, conn, workspace, settings, now
):
    for i in range(3):
        make(conn, workspace, settings, now, event_rule(f"rule {i}"))
    start = threading.Barrier(4)
    results: list[Any] = []
    errors: list[BaseException] = []

    def client() -> None:
        with connect(database_url) as own:
            start.wait()
            try:
                results.append(emit(own, workspace, settings, now))
            except BaseException as exc:  # collected and asserted below
                errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sum(len(r.created) for r in results) == 3
    assert sum(r.count("duplicate") for r in results) == 9
    assert len(rows(conn, workspace)) == 3


def run_at_once(database_url: str, clients: int, work: Any) -> list[Any]:
    """`work(conn)` from `clients` threads, each on its own connection, released together."""
    start = threading.Barrier(clients)
    results: list[Any] = []
    errors: list[BaseException] = []

    def client() -> None:
        with connect(database_url) as own:
            start.wait()
            try:
                results.append(work(own))
            except BaseException as exc:  # collected and asserted below
                errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return results


def test_concurrent_events_with_a_failing_rule_neither_deadlock_nor_double(
    database_url, conn, workspace, settings, now
):
    make(conn, workspace, settings, now, event_rule("broken", payload={"x": "{{ context.nope }}"}))
    make(conn, workspace, settings, now, event_rule("good"))
    results = run_at_once(database_url, 4, lambda own: emit(own, workspace, settings, now))
    assert sum(len(r.created) for r in results) == 1
    assert all(len(r.failed) == 1 for r in results)


def test_the_same_dates_from_two_clients_at_once_make_one_set_of_actions(
    database_url, conn, workspace, settings, now
):
    make(conn, workspace, settings, now, time_rule("24h before", -24 * HOUR))
    make(conn, workspace, settings, now, time_rule("1h after", HOUR))
    start = (now + timedelta(days=5)).isoformat()
    results = run_at_once(
        database_url, 4, lambda own: put(own, workspace, settings, now, {"start": start})
    )
    assert sum(len(r.result.created) for r in results) == 2
    assert len(live(conn, workspace)) == 2


def test_an_event_no_rule_matches_is_a_success_with_nothing_made(conn, workspace, settings, now):
    make(conn, workspace, settings, now, event_rule())
    result = emit(conn, workspace, settings, now, type="episode.published")
    assert result.success
    assert result.created == []
    assert result.error is None
    assert rows(conn, workspace) == []


def test_a_template_error_in_one_rule_leaves_the_others_made_and_names_it(
    conn, workspace, settings, now
):
    good = make(conn, workspace, settings, now, event_rule("good"))
    bad = make(conn, workspace, settings, now,
               event_rule("needs phone", payload={"to": "{{ context.guest.phone }}"}))  # fmt: skip
    result = emit(conn, workspace, settings, now)
    assert result.rule_ids == [good]
    [failed] = result.failed
    assert (failed.rule_id, failed.rule_name, failed.field) == (bad, "needs phone",
                                                                "action.payload.to")  # fmt: skip
    assert "phone" in failed.message
    assert not result.success
    assert result.error is not None
    assert "needs phone" in result.error
    assert [a.payload for a in rows(conn, workspace)] == [{"text": "Hi Ann"}]
    # the failure is recorded on the rule, for the tenant to see
    assert "phone" in (store.get_rule(conn, workspace, bad).last_error or "")


def test_conditions_decide_which_rules_fire(conn, workspace, settings, now):
    conditions = [{"path": "context.booking.status", "op": "eq", "value": "confirmed"},
                  {"path": "context.guest.name", "op": "exists"}]  # fmt: skip
    rule = make(conn, workspace, settings, now, event_rule(conditions=conditions))
    pending = {"booking": {"status": "pending"}, "guest": {"name": "Ann"}}
    held_back = emit(conn, workspace, settings, now, context=pending)
    [skipped] = held_back.skipped
    assert (skipped.rule_id, skipped.reason) == (rule, "conditions")
    assert "pending" in skipped.message
    confirmed = {"booking": {"status": "confirmed"}, "guest": {"name": "Ann"}}
    fired = emit(conn, workspace, settings, now, context=confirmed)
    assert fired.rule_ids == [rule]


def test_the_snapshot_is_what_the_action_carries_after_the_apps_data_changed(
    conn, workspace, settings, now
):
    make(conn, workspace, settings, now, event_rule())
    emit(conn, workspace, settings, now, context={"guest": {"name": "Ann"}})
    # the app's guest is renamed and the event replayed: the action keeps its snapshot
    emit(conn, workspace, settings, now, context={"guest": {"name": "Bea"}})
    [action] = rows(conn, workspace)
    assert action.payload == {"text": "Hi Ann"}
    stored = conn.execute(
        "select context from rule_actions where action_id = %s", (action.id,)
    ).fetchone()[0]
    assert stored["context"] == {"guest": {"name": "Ann"}}
    assert stored["event"]["entities"] == {"booking": "bk-1", "podcast": "pod-1"}


# A rule whose template reads its data and would stall everyone: numbers, strings and loops.
POWER = {"text": "{% set x = (((context.n ** 64) ** 64) ** 64) ** 64 %}ok"}
DOUBLING = {"text": "{% set s = context.guest.name %}" + "{% set s = s ~ s %}" * 60}
SPENDER = {"text": "{% for i in range(1000) %}" + "{{ i }}" * 30 + "{% endfor %}"}


@pytest.fixture
def no_clock(monkeypatch):
    """Only the counts and sizes stop a template (the CPU budget is made generous), so the
    test says the same on any machine."""
    monkeypatch.setattr(metering, "MAX_CPU_SECONDS", 3600.0)


def spent(failed: list[Any], label: str, operations: int) -> tuple[int, int, int]:
    """Failures of renders that shared a budget: how many stopped at their own limit, how
    many ran at all, and how many did not start (or stopped) because it was spent."""
    own = f"the template used more than {metering.MAX_OPERATIONS:,} operations"
    shared = f"{label} used more than {operations:,} operations together"
    assert all(f.message.endswith((own, shared)) for f in failed), failed
    stopped = [f for f in failed if "not rendered" not in f.message]
    return sum(f.message.endswith(own) for f in failed), len(stopped), len(failed) - len(stopped)


@pytest.mark.timeout(30)
def test_a_template_over_its_budget_fails_its_rule_with_the_reason_and_the_others_fire(
    conn, workspace, settings, now
):
    # Given a good rule and three whose templates would grow without end on this event
    good = make(conn, workspace, settings, now, event_rule("good"))
    power = make(conn, workspace, settings, now, event_rule("power", payload=POWER))
    doubling = make(conn, workspace, settings, now, event_rule("doubling", payload=DOUBLING))
    spender = make(conn, workspace, settings, now, event_rule("spender", payload=SPENDER))
    # When the event comes
    result = emit(conn, workspace, settings, now, context={"guest": {"name": "Ann"}, "n": 9})
    # Then the good rule made its action, and each other failed with what it exceeded
    assert result.rule_ids == [good]
    failed = {f.rule_id: (f.field, f.message) for f in result.failed}
    assert failed == {
        power: ("action.payload.text", "action.payload.text: the template would make a"
                " number of more than 4,300 digits"),
        doubling: ("action.payload.text", "action.payload.text: the template would make a"
                   " value of more than 262,144 characters or items"),
        spender: ("action.payload.text", "action.payload.text: the template used more"
                  " than 20,000 operations"),
    }  # fmt: skip
    assert [a.payload for a in rows(conn, workspace)] == [{"text": "Hi Ann"}]
    # And each failure is recorded on its rule
    for rule_id, (_, message) in failed.items():
        assert store.get_rule(conn, workspace, rule_id).last_error == message


@pytest.mark.usefixtures("no_clock")
def test_the_rules_of_one_event_share_one_render_budget(conn, workspace, settings, now):
    # Given more rules on one event than its budget renders in full
    spenders = [make(conn, workspace, settings, now, event_rule(f"r{i}", payload=SPENDER))
                for i in range(metering.FEW_RENDERS + 2)]  # fmt: skip
    # When the event comes
    result = emit(conn, workspace, settings, now)
    # Then the first ones stop at their own limit, and once the event's budget is spent
    # the others are not rendered at all: the event costs at most FEW_RENDERS renders
    own, rendered, shared = spent(result.failed, "the templates of this event", 100_000)
    assert metering.FEW_RENDERS - 1 <= own <= rendered <= metering.FEW_RENDERS
    assert rendered + shared == len(spenders)
    assert {f.rule_id for f in result.failed} == set(spenders)
    assert rows(conn, workspace) == []


@pytest.mark.timeout(30)
def test_a_time_rule_over_its_budget_fails_for_that_entity_and_the_others_are_made(
    conn, workspace, settings, now
):
    good = make(conn, workspace, settings, now, time_rule("good", -HOUR))
    power = make(conn, workspace, settings, now, time_rule("power", -2 * HOUR, payload=POWER))
    start = (now + timedelta(days=3)).isoformat()
    put_result = put(conn, workspace, settings, now, {"start": start},
                     context={"guest": {"name": "Ann"}, "n": 9})  # fmt: skip
    [made] = put_result.result.created
    assert made.rule_id == good
    [failed] = put_result.result.failed
    assert (failed.rule_id, failed.field) == (power, "action.payload.text")
    assert "a number of more than 4,300 digits" in failed.message
    assert len(live(conn, workspace)) == 1


@pytest.mark.usefixtures("no_clock")
def test_a_time_rule_written_over_many_entities_costs_one_bounded_budget(
    conn, workspace, settings, now
):
    # Given more entities than a rule write renders in full
    start = (now + timedelta(days=3)).isoformat()
    entity_count = metering.MANY_RENDERS + 3
    for i in range(entity_count):
        put(conn, workspace, settings, now, {"start": start}, entity_id=f"bk-{i}")
    # When a time rule whose template spends a whole render is written
    written = store.create_rule(conn, workspace, time_rule("spender", -HOUR, payload=SPENDER),
                                settings, now)  # fmt: skip
    # Then at most MANY_RENDERS entities were rendered, and the others failed at once
    own, rendered, shared = spent(
        written.result.failed, "this rule's templates in this request", 400_000
    )
    assert metering.MANY_RENDERS - 1 <= own <= rendered <= metering.MANY_RENDERS
    assert rendered + shared == entity_count
    assert rows(conn, workspace) == []


# -------------------------------------------------------------------------------- dates


def test_a_booking_at_15_with_24h_before_and_1h_after_moved_then_cancelled(
    conn, workspace, settings, now
):
    before = make(conn, workspace, settings, now, time_rule("24h before", -24 * HOUR))
    after = make(conn, workspace, settings, now, time_rule("1h after", HOUR))
    day = (now + timedelta(days=10)).date().isoformat()
    # Given a booking at 15:00
    first = put(conn, workspace, settings, now, {"start": f"{day}T15:00"})
    assert first.created
    assert first.result.success
    at = {f.rule_id: f for f in first.result.created}
    start = datetime.fromisoformat(f"{day}T15:00+00:00")
    assert at[before].publish_at == start - timedelta(hours=24)
    assert at[after].publish_at == start + timedelta(hours=1)
    assert at[before].idempotency_key == (
        f"time_trigger:{before}:booking.start:booking/bk-1:{start.isoformat()}"
    )
    # When it moves to 15:45: the two are cancelled, two new ones with new keys and lineage
    moved = put(conn, workspace, settings, now, {"start": f"{day}T15:45"})
    assert sorted(moved.result.cancelled) == sorted(f.action_id for f in at.values())
    new = {f.rule_id: f for f in moved.result.created}
    later = start + timedelta(minutes=45)
    assert new[before].publish_at == later - timedelta(hours=24)
    assert new[after].publish_at == later + timedelta(hours=1)
    for rule in (before, after):
        assert new[rule].rescheduled_from == at[rule].action_id
        assert new[rule].idempotency_key != at[rule].idempotency_key
        old = actions_store.get(conn, workspace, at[rule].action_id)
        assert old is not None
        assert (old.status, old.error_code) == ("cancelled", "superseded")
    # the same dates again change nothing
    same = put(conn, workspace, settings, now, {"start": f"{day}T15:45"})
    assert same.result.created == []
    assert same.result.cancelled == []
    # When the booking is cancelled (deleted): nothing pending
    gone = entities.delete_entity(conn, workspace, "booking", "bk-1")
    assert sorted(gone.result.cancelled) == sorted(f.action_id for f in new.values())
    assert live(conn, workspace) == []
    with pytest.raises(NotFoundError):
        entities.get_entity(conn, workspace, "booking", "bk-1")


def test_a_removed_date_cancels_and_moving_back_makes_the_first_time_again(
    conn, workspace, settings, now
):
    make(conn, workspace, settings, now, time_rule("1h before", -HOUR))
    day = (now + timedelta(days=3)).date().isoformat()
    first = put(conn, workspace, settings, now, {"start": f"{day}T14:00"})
    put(conn, workspace, settings, now, {"start": f"{day}T15:45"})
    back = put(conn, workspace, settings, now, {"start": f"{day}T14:00"})
    [again] = back.result.created
    # the answer carries the row's own key: the first time's, with its generation
    assert again.idempotency_key == f"{first.result.created[0].idempotency_key}#2"
    action = actions_store.get(conn, workspace, again.action_id)
    assert action is not None
    assert action.dedupe_key == again.idempotency_key
    removed = put(conn, workspace, settings, now, {})
    assert removed.result.cancelled == [again.action_id]
    assert live(conn, workspace) == []


def test_a_reference_date_in_another_zone_across_dst(conn, workspace, settings, now):
    make(conn, workspace, settings, now, time_rule("24h before", -24 * HOUR))
    make(conn, workspace, settings, now, time_rule("1h after", HOUR))
    # Europe/Berlin moves to summer time on 2027-03-28 at 02:00: 15:00 that day is CEST
    result = put(conn, workspace, settings, now, {"start": "2027-03-28T15:00"},
                 timezone="Europe/Berlin")  # fmt: skip
    [date] = result.entity.dates
    assert date.at == datetime(2027, 3, 28, 13, 0, tzinfo=UTC)
    instants = sorted(f.publish_at for f in result.result.created)
    # 24 hours before is 14:00 CET the day before (13:00 UTC); 1 hour after, 16:00 CEST
    assert instants == [datetime(2027, 3, 27, 13, 0, tzinfo=UTC),
                        datetime(2027, 3, 28, 14, 0, tzinfo=UTC)]  # fmt: skip
    payloads = {a.payload["text"] for a in rows(conn, workspace)}
    assert payloads == {"Ann at 2027-03-28T15:00:00+02:00"}
    # 02:30 does not exist that night: read as 03:30 CEST (the project's gap rule)
    gap = put(conn, workspace, settings, now, {"start": "2027-03-28T02:30"},
              entity_id="bk-2", timezone="Europe/Berlin")  # fmt: skip
    assert gap.entity.dates[0].at == datetime(2027, 3, 28, 1, 30, tzinfo=UTC)


def test_a_time_already_passed_is_skipped_or_fired_within_the_grace(conn, workspace, settings, now):
    make(conn, workspace, settings, now, time_rule("24h before", -24 * HOUR))
    soon = (now + timedelta(hours=3)).isoformat()
    skipped = put(conn, workspace, settings, now, {"start": soon})
    [why] = skipped.result.skipped
    assert why.reason == "past"
    just = (now + timedelta(hours=24) - timedelta(seconds=30)).isoformat()
    fired = put(conn, workspace, settings, now, {"start": just}, entity_id="bk-2")
    assert len(fired.result.created) == 1  # 30 s late, within the 60 s grace: fires at once


def test_a_sent_or_user_cancelled_row_is_never_made_again(conn, workspace, settings, now):
    rule = make(conn, workspace, settings, now, time_rule("1h before", -HOUR))
    start = (now + timedelta(days=2)).isoformat()
    [made] = put(conn, workspace, settings, now, {"start": start}).result.created
    conn.execute(
        "update scheduled_actions set status = 'published', finished_at = now() where id = %s",
        (made.action_id,),
    )
    # editing the offset moves pending rows, but this one was sent: not made again
    edit = store.edit_rule(conn, workspace, rule, RuleChanges(trigger=Trigger(
        "time", entity_type="booking", reference="start", offset_seconds=-2 * HOUR)),
        settings, now)  # fmt: skip
    assert edit.result.created == []
    assert [s.reason for s in edit.result.skipped] == ["already_sent"]
    # a row a person cancelled is history too
    [other] = put(conn, workspace, settings, now, {"start": start}, entity_id="bk-2").result.created
    actions_store.cancel(conn, workspace, other.action_id)
    again = put(conn, workspace, settings, now, {"start": start}, entity_id="bk-2")
    assert [s.reason for s in again.result.skipped] == ["cancelled"]
    assert actions_store.get(conn, workspace, made.action_id).status == "published"  # type: ignore[union-attr]


def test_the_context_snapshot_stays_when_only_the_context_changes(conn, workspace, settings, now):
    make(conn, workspace, settings, now, time_rule("1h before", -HOUR))
    start = (now + timedelta(days=2)).isoformat()
    put(conn, workspace, settings, now, {"start": start}, context={"guest": {"name": "Ann"}})
    put(conn, workspace, settings, now, {"start": start}, context={"guest": {"name": "Bea"}})
    [action] = rows(conn, workspace)
    assert action.payload["text"].startswith("Ann at")


# ----------------------------------------------------------------------- rule lifecycle


def test_a_new_time_rule_schedules_for_dates_already_known(conn, workspace, settings, now):
    start = (now + timedelta(days=2)).isoformat()
    put(conn, workspace, settings, now, {"start": start})
    put(conn, workspace, settings, now, {"end": start}, entity_id="bk-2")
    created = store.create_rule(conn, workspace, time_rule("1h before", -HOUR), settings, now)
    assert len(created.result.created) == 1
    assert len(live(conn, workspace)) == 1


def test_editing_the_offset_moves_pending_actions_with_lineage(conn, workspace, settings, now):
    rule = make(conn, workspace, settings, now, time_rule("1h before", -HOUR))
    start = now + timedelta(days=2)
    [first] = put(conn, workspace, settings, now, {"start": start.isoformat()}).result.created
    edit = store.edit_rule(conn, workspace, rule, RuleChanges(trigger=Trigger(
        "time", entity_type="booking", reference="start", offset_seconds=-2 * HOUR)),
        settings, now)  # fmt: skip
    assert edit.rule.revision == 2
    [moved] = edit.result.created
    assert moved.publish_at == start - timedelta(hours=2)
    assert moved.rescheduled_from == first.action_id
    assert edit.result.cancelled == [first.action_id]
    # a rename moves nothing
    renamed = store.edit_rule(conn, workspace, rule, RuleChanges(name="2h before"), settings, now)
    assert renamed.result.created == []
    assert renamed.result.cancelled == []


def test_disabling_or_deleting_a_rule_cancels_its_pending_actions(conn, workspace, settings, now):
    timed = make(conn, workspace, settings, now, time_rule("1h before", -HOUR))
    evented = make(conn, workspace, settings, now, event_rule())
    put(conn, workspace, settings, now, {"start": (now + timedelta(days=2)).isoformat()})
    emit(conn, workspace, settings, now)
    assert len(live(conn, workspace)) == 2
    off = store.edit_rule(conn, workspace, timed, RuleChanges(enabled=False), settings, now)
    assert len(off.result.cancelled) == 1
    gone = store.delete_rule(conn, workspace, evented, settings, now)
    assert len(gone.result.cancelled) == 1
    assert live(conn, workspace) == []
    assert {a.error_code for a in rows(conn, workspace)} == {"withdrawn"}
    with pytest.raises(NotFoundError):
        store.get_rule(conn, workspace, evented)
    # enabled again: its action for the known date is made again
    on = store.edit_rule(conn, workspace, timed, RuleChanges(enabled=True), settings, now)
    assert len(on.result.created) == 1


@pytest.mark.parametrize(
    ("given", "field"),
    [
        (event_rule(action_type="send_fax"), "action.action_type"),
        (event_rule(payload={"text": "{{ context.guest.name"}), "action.payload.text"),
        (event_rule(payload={"text": "{{ x.__class__|attr('y') }}"}), "action.payload.text"),
        (time_rule("far", 400 * 86400), "trigger.offset_seconds"),
        (event_rule(conditions=[{"path": "context.x", "op": "like", "value": 1}]),
         "conditions[0].op"),
        (event_rule(conditions=[{"path": "guest.name", "op": "eq", "value": 1}]),
         "conditions[0].path"),
        (event_rule(conditions=[{"path": "context.n", "op": "in", "value": 3}]),
         "conditions[0].value"),
        (RuleInput(name="x", trigger=Trigger("event", event_type="bad type!"),
                   action=ActionTemplate("log", "t")), "trigger.event"),
    ],
)  # fmt: skip
def test_a_rule_that_cannot_fire_is_refused_naming_the_field(
    conn, workspace, settings, now, given, field
):
    with pytest.raises(InputError) as refused:
        store.create_rule(conn, workspace, given, settings, now)
    assert refused.value.field == field
    assert conn.execute("select count(*) from rules").fetchone()[0] == 0


# ---------------------------------------------------------------------------- tenancy


def test_another_workspaces_rules_and_entities_are_invisible_and_untouched(
    conn, workspace, settings, now
):
    other = make_workspace(conn, "Globex")
    mine = make(conn, workspace, settings, now, time_rule("1h before", -HOUR))
    make(conn, workspace, settings, now, event_rule())
    put(conn, workspace, settings, now, {"start": (now + timedelta(days=2)).isoformat()})
    # the other workspace's event and entity of the same names touch nothing of ours
    assert emit(conn, other, settings, now).created == []
    theirs = put(conn, other, settings, now, {"start": (now + timedelta(days=5)).isoformat()})
    assert theirs.result.created == []
    assert theirs.created
    with pytest.raises(NotFoundError):
        store.get_rule(conn, other, mine)
    with pytest.raises(NotFoundError):
        store.edit_rule(conn, other, mine, RuleChanges(enabled=False), settings, now)
    assert len(live(conn, workspace)) == 1
    # and under row-level security, the API's role sees none of our rows
    with tenant_transaction(conn, other):
        for table in ("rules", "entities", "entity_dates", "rule_actions"):
            assert conn.execute(f"select count(*) from {table}").fetchone() == (
                1 if table in ("entities", "entity_dates") else 0,
            )


def test_every_table_with_a_workspace_has_row_level_security(conn):
    unprotected = conn.execute(
        "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname = 'public' and c.relkind = 'r' and not c.relrowsecurity"
        " and exists (select 1 from pg_attribute a where a.attrelid = c.oid"
        "             and a.attname = 'workspace_id' and not a.attisdropped)"
    ).fetchall()
    assert unprotected == []


def test_the_schema_matches_what_the_code_reads(conn):
    columns = {
        name
        for (name,) in conn.execute(
            "select column_name from information_schema.columns where table_name = 'rules'"
        ).fetchall()
    }
    assert columns == set(Rule.__dataclass_fields__)
