"""Events carry the stored context, on a real Postgres: a rule's `load` makes the stored
entities an event names its templates' variables, as of the event; the action keeps what it
was rendered from; a missing entity fails that rule only."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest

from tests.integration.test_query_plans import index_scans, plan_of
from tests.integration.test_rules import run_at_once
from tickwork.actions import store as actions_store
from tickwork.platform.errors import InputError
from tickwork.platform.sql import query
from tickwork.rules import entities, store, stored_context
from tickwork.rules.events import EventInput, emit_event
from tickwork.rules.loads import InvalidLoadError
from tickwork.rules.model import ActionTemplate, RuleInput, Trigger
from tickwork.rules.store import RuleChanges

UTC_ZONE = ZoneInfo("UTC")
GUEST_AND_BOOKING = {
    "guest": {"entity_type": "guest", "id": "{{ event.entities.guest }}"},
    "booking": {"entity_type": "booking"},  # the id defaults to the event's booking
}
REMINDER = {"text": "Hi {{ guest.name }}, you record at {{ booking.start }}"
                    " ({{ booking.dates.start.at }}, {{ booking.room }})"}  # fmt: skip


def rule(name: str = "welcome", *, load: dict[str, Any] | None = None,
         payload: dict[str, Any] | None = None, **more: Any) -> RuleInput:  # fmt: skip
    return RuleInput(
        name=name, trigger=Trigger("event", event_type="booking.confirmed"),
        action=ActionTemplate("log", "guest", payload or REMINDER),
        load=GUEST_AND_BOOKING if load is None else load, **more,
    )  # fmt: skip


def make(conn, workspace, settings, now, given: RuleInput) -> UUID:
    return store.create_rule(conn, workspace, given, settings, now).rule.id


def emit(conn, workspace, settings, now, entities_named: dict[str, str] | None = None, **kw: Any):
    event = EventInput(
        type="booking.confirmed",
        entities={"booking": "bk-1", "guest": "g-1"} if entities_named is None else entities_named,
        context=kw.get("context", {}),
        occurred_at=kw.get("occurred_at"),
    )
    return emit_event(conn, workspace, event, UTC_ZONE, settings, now)


def store_guest(conn, workspace, name: str, guest_id: str = "g-1", **more: Any):
    return entities.put_context(conn, workspace, "guest", guest_id, {"name": name} | more, "UTC")


def store_booking(conn, workspace, settings, now, booking_id: str = "bk-1"):
    given = entities.EntityInput(dates={"start": "2030-03-31T15:00"}, timezone="Europe/Berlin",
                                 context={"room": "studio B"})  # fmt: skip
    return entities.put_dates(conn, workspace, "booking", booking_id, given, "UTC", settings, now)


def payload_of(conn, workspace, action_id: UUID) -> dict[str, Any]:
    action = actions_store.get(conn, workspace, action_id)
    assert action is not None
    return action.payload


def snapshot_of(conn, action_id: UUID) -> dict[str, Any]:
    row = conn.execute("select context from rule_actions where action_id = %s", (action_id,))
    return row.fetchone()[0]


def test_an_event_naming_a_booking_and_a_guest_renders_their_stored_fields(
    conn, workspace, settings, now
):
    # Given a stored guest (a name, no dates) and a booking starting 15:00 Berlin time
    store_guest(conn, workspace, "Ada")
    store_booking(conn, workspace, settings, now)
    make(conn, workspace, settings, now, rule())
    # When the app posts an event that names them by id only
    result = emit(conn, workspace, settings, now)
    # Then the action reads the guest's stored name and the booking's stored time
    assert result.success, result.error
    [fired] = result.created
    assert payload_of(conn, workspace, fired.action_id) == {
        "text": "Hi Ada, you record at 2030-03-31T15:00:00+02:00"
        " (2030-03-31T13:00:00+00:00, studio B)"
    }
    # And the snapshot kept with the action holds what was loaded, as of the event
    snapshot = snapshot_of(conn, fired.action_id)
    assert snapshot["guest"] == {"name": "Ada", "id": "g-1", "entity_type": "guest",
                                 "timezone": "UTC", "dates": {}}  # fmt: skip
    assert snapshot["booking"]["start"] == "2030-03-31T15:00:00+02:00"
    assert snapshot["event"]["entities"] == {"booking": "bk-1", "guest": "g-1"}


def test_changing_the_guest_afterwards_does_not_change_the_pending_action(
    conn, workspace, settings, now
):
    store_guest(conn, workspace, "Ada")
    store_booking(conn, workspace, settings, now)
    make(conn, workspace, settings, now, rule(payload={"text": "Hi {{ guest.name }}"}))
    [fired] = emit(conn, workspace, settings, now).created
    # When the guest is renamed after the action was made
    changed = store_guest(conn, workspace, "Grace")
    assert not changed.created
    assert changed.entity.context == {"name": "Grace"}
    # Then the pending action still says what the guest was at the event
    action = actions_store.get(conn, workspace, fired.action_id)
    assert action is not None
    assert action.status == "queued"
    assert action.payload == {"text": "Hi Ada"}
    assert snapshot_of(conn, fired.action_id)["guest"]["name"] == "Ada"
    # And the next day's event sees the new name
    tomorrow = now + timedelta(days=1)
    [later] = emit(conn, workspace, settings, tomorrow, occurred_at=tomorrow).created
    assert payload_of(conn, workspace, later.action_id) == {"text": "Hi Grace"}


def test_storing_an_entitys_context_keeps_its_zone_and_dates(conn, workspace, settings, now):
    store_booking(conn, workspace, settings, now)
    done = entities.put_context(conn, workspace, "booking", "bk-1", {"room": "studio C"}, "UTC")
    assert not done.created
    assert done.entity.timezone == "Europe/Berlin"
    assert [d.name for d in done.entity.dates] == ["start"]
    assert done.entity.context == {"room": "studio C"}
    with pytest.raises(InputError) as refused:
        entities.put_context(conn, workspace, "booking", "bk-1", {"x": "\x00"}, "UTC")
    assert refused.value.field == "context"


def test_a_missing_guest_fails_that_rule_only_with_its_code(conn, workspace, settings, now):
    # Given a booking but no guest g-404, a rule that loads the guest and one that does not
    store_booking(conn, workspace, settings, now)
    needs_guest = make(conn, workspace, settings, now, rule("needs guest"))
    booking_only = make(conn, workspace, settings, now, rule(
        "booking only", load={"booking": {"entity_type": "booking"}},
        payload={"text": "{{ booking.room }}"},
    ))  # fmt: skip
    # When the event names the guest that is not stored
    result = emit(conn, workspace, settings, now, {"booking": "bk-1", "guest": "g-404"})
    # Then the guest's rule failed, naming the entity, and the other fired
    assert not result.success
    [failed] = result.failed
    assert (failed.rule_id, failed.code, failed.field) == (needs_guest, "missing_entity",
                                                           "load.guest")  # fmt: skip
    assert (failed.entity_type, failed.entity_id) == ("guest", "g-404")
    assert "g-404" in failed.message
    assert "guest" in (result.error or "")
    assert [f.rule_id for f in result.created] == [booking_only]
    assert store.get_rule(conn, workspace, needs_guest).last_error == failed.message
    # And once the guest is stored, the same event makes the missing action, once
    store_guest(conn, workspace, "Ada", guest_id="g-404")
    again = emit(conn, workspace, settings, now, {"booking": "bk-1", "guest": "g-404"})
    assert [f.rule_id for f in again.created] == [needs_guest]
    assert again.count("duplicate") == 1


def test_an_event_that_does_not_name_the_entity_fails_the_rule_with_the_field(
    conn, workspace, settings, now
):
    store_booking(conn, workspace, settings, now)
    make(conn, workspace, settings, now, rule())
    result = emit(conn, workspace, settings, now, {"booking": "bk-1"})
    [failed] = result.failed
    assert (failed.code, failed.field) == ("render_failed", "load.guest.id")
    assert result.created == []


def test_duplicate_deliveries_of_the_event_make_one_action(
    database_url, conn, workspace, settings, now
):
    # The event's day is part of its key: the late delivery must fall on the same day
    now = now.replace(hour=12, minute=0, second=0, microsecond=0)
    store_guest(conn, workspace, "Ada")
    store_booking(conn, workspace, settings, now)
    make(conn, workspace, settings, now, rule())
    conn.commit()
    # When the same event arrives four times at once, then once more
    results = run_at_once(database_url, 4, lambda own: emit(own, workspace, settings, now))
    late = emit(conn, workspace, settings, now + timedelta(minutes=1))
    # Then one action was made, and every other delivery says it was a duplicate
    assert sum(len(r.created) for r in results) == 1
    assert sum(r.count("duplicate") for r in results) == 3
    assert late.created == []
    assert late.count("duplicate") == 1
    made = conn.execute(
        "select count(*) from scheduled_actions where workspace_id = %s", (workspace,)
    ).fetchone()
    assert made == (1,)


def test_every_entity_an_event_needs_is_read_in_one_query(conn, workspace, settings, now,
                                                          monkeypatch):  # fmt: skip
    # Given three rules, each loading the guest and the booking
    store_guest(conn, workspace, "Ada")
    store_booking(conn, workspace, settings, now)
    for i in range(3):
        make(conn, workspace, settings, now, rule(f"rule {i}"))
    reads: list[set[tuple[str, str]]] = []
    real_fetch = stored_context.fetch

    def counted(conn_: Any, workspace_id: UUID, keys: set[tuple[str, str]]) -> Any:
        reads.append(set(keys))
        return real_fetch(conn_, workspace_id, keys)

    monkeypatch.setattr(stored_context, "fetch", counted)
    result = emit(conn, workspace, settings, now)
    # Then all three fired from one read of the two entities
    assert len(result.created) == 3
    assert reads == [{("guest", "g-1"), ("booking", "bk-1")}]


def test_conditions_read_the_loaded_entities(conn, workspace, settings, now):
    store_guest(conn, workspace, "Ada", vip=True)
    store_guest(conn, workspace, "Bob", guest_id="g-2", vip=False)
    store_booking(conn, workspace, settings, now)
    make(conn, workspace, settings, now, rule(
        "vip only", conditions=[{"path": "guest.vip", "op": "eq", "value": True}],
    ))  # fmt: skip
    assert len(emit(conn, workspace, settings, now).created) == 1
    skipped = emit(conn, workspace, settings, now, {"booking": "bk-1", "guest": "g-2"})
    assert skipped.created == []
    assert skipped.count("conditions") == 1


@pytest.mark.parametrize(
    ("load", "field"),
    [
        ({"event": {"entity_type": "guest"}}, "load.event"),
        ({"items": {"entity_type": "guest"}}, "load.items"),
        ({"Guest": {"entity_type": "guest"}}, "load"),
        ({"guest": {"entity_type": "Guest!"}}, "load.guest.entity_type"),
        ({"guest": {"entity_type": "guest", "idx": "1"}}, "load.guest"),
        ({"guest": {"entity_type": "guest", "id": "{{ event.entities.guest "}}, "load.guest.id"),
        ({"guest": {"entity_type": "guest", "id": ""}}, "load.guest.id"),
        ({f"g{i}": {"entity_type": "guest"} for i in range(11)}, "load"),
        (["guest"], "load"),
    ],
)
def test_a_load_that_cannot_be_used_is_refused_naming_the_field(
    conn, workspace, settings, now, load: Any, field: str
):
    with pytest.raises(InvalidLoadError) as refused:
        store.create_rule(conn, workspace, rule(load=load), settings, now)
    assert refused.value.code == "invalid_load"
    assert refused.value.field == field, refused.value.message


def test_a_time_rule_cannot_load_and_an_edit_is_checked_as_a_create(conn, workspace, settings, now):
    timed = RuleInput(
        name="t", trigger=Trigger("time", entity_type="booking", reference="start",
                                  offset_seconds=-3600),
        action=ActionTemplate("log", "guest", {"text": "x"}), load=GUEST_AND_BOOKING,
    )  # fmt: skip
    with pytest.raises(InvalidLoadError) as refused:
        store.create_rule(conn, workspace, timed, settings, now)
    assert refused.value.field == "load"
    made = make(conn, workspace, settings, now, rule(load={}))
    with pytest.raises(InvalidLoadError):
        store.edit_rule(conn, workspace, made, RuleChanges(load={"rule": {"entity_type": "x"}}),
                        settings, now)  # fmt: skip
    edited = store.edit_rule(conn, workspace, made, RuleChanges(load=GUEST_AND_BOOKING),
                             settings, now).rule  # fmt: skip
    assert edited.load == {
        "booking": {"entity_type": "booking", "id": "{{ event.entities.booking }}"},
        "guest": {"entity_type": "guest", "id": "{{ event.entities.guest }}"},
    }


def test_the_entities_of_an_event_are_read_by_their_primary_keys(conn, workspace, now):
    # Given 20,000 entities with two dates each
    conn.execute(
        "insert into entities (workspace_id, entity_type, entity_id, timezone, context)"
        " select %s, 'guest', 'g-' || g, 'UTC', '{}' from generate_series(1, 20000) g",
        (workspace,),
    )
    conn.execute(
        "insert into entity_dates (workspace_id, entity_type, entity_id, name, at)"
        " select %s, 'guest', 'g-' || g, n, %s from generate_series(1, 20000) g,"
        " unnest(array['a', 'b']) n",
        (workspace, now),
    )
    conn.execute("analyze entities")
    conn.execute("analyze entity_dates")
    plan = plan_of(conn, query("entities_by_key"), {
        "workspace_id": workspace, "entity_types": ["guest", "guest"],
        "entity_ids": ["g-1", "g-2"],
    })  # fmt: skip
    assert index_scans(plan) == {"entities_pkey", "entity_dates_pkey"}, json.dumps(plan, indent=1)
