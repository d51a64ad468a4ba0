"""Pure rules of the dispatcher: backoff, outcome → transition, message delays."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError, replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast
from uuid import UUID, uuid4

import pytest

from tickwork.actions.model import Claimed
from tickwork.actions.store import rows_as
from tickwork.engine.dispatch import backoff_seconds, decide, taking_turns
from tickwork.platform.config import ActionTypeConfig, Settings
from tickwork.platform.queues.port import (
    MESSAGE_WINDOW,
    MessageRow,
    OutgoingMessage,
    decode_body,
    doorbells,
)
from tickwork.providers.base import Ambiguous, Delivered, NotSent, Rejected, Transient

NOW = datetime(2026, 5, 20, 9, 0, tzinfo=UTC)
SETTINGS = Settings(max_attempts=5, backoff_base_seconds=2, backoff_cap_seconds=60)


def action(attempt_count: int = 1, manual_retries: int = 0) -> Claimed:
    return Claimed(
        id=uuid4(), workspace_id=uuid4(), action_type="webhook", thing_id=None,
        target_key="primary", payload={}, publish_at=NOW, status="submitted",
        attempt_count=attempt_count, manual_retries=manual_retries, next_attempt_at=None,
        source="api", connection_id=None, recipient_id=None, transactional=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("attempt", "low", "high"), [(1, 1, 2), (2, 2, 4), (3, 4, 8), (6, 30, 60), (20, 30, 60)]
)
def test_backoff_doubles_with_jitter_up_to_the_cap(attempt, low, high):
    assert backoff_seconds(attempt, SETTINGS, None, lambda: 0.0) == low
    assert backoff_seconds(attempt, SETTINGS, None, lambda: 1.0) == high


def test_backoff_never_undercuts_retry_after():
    assert backoff_seconds(1, SETTINGS, 120.0, lambda: 0.5) == 120.0


def test_delivered_publishes():
    f = decide(action(), Delivered("p-1"), True, SETTINGS, NOW)
    assert (f.status, f.provider_id) == ("published", "p-1")


def test_rejected_fails_with_its_code():
    f = decide(action(), Rejected("provider_rejected", "400"), True, SETTINGS, NOW)
    assert (f.status, f.error_code) == ("failed", "provider_rejected")


def test_transient_requeues_with_backoff_until_the_budget_is_spent():
    f = decide(action(2), Transient("503", retry_after=10), True, SETTINGS, NOW, lambda: 0.0)
    assert (f.status, f.next_attempt_at) == ("queued", NOW + timedelta(seconds=10))
    spent = decide(action(5), Transient("503"), True, SETTINGS, NOW)
    assert (spent.status, spent.error_code) == ("failed", "retry_exhausted")


def test_a_manual_retry_grants_a_fresh_budget():
    f = decide(action(5, manual_retries=1), Transient("503"), True, SETTINGS, NOW)
    assert f.status == "queued"


def test_ambiguous_fails_unless_the_provider_deduplicates():
    assert decide(action(), Ambiguous("timeout"), False, SETTINGS, NOW).error_code == "ambiguous"
    assert decide(action(), Ambiguous("timeout"), True, SETTINGS, NOW).status == "queued"


def test_not_sent_reverts_the_claim():
    f = decide(action(), NotSent("out of time"), False, SETTINGS, NOW)
    assert (f.status, f.attempt_delta) == ("queued", -1)


@pytest.mark.parametrize(
    ("seconds_ahead", "delay"),
    [(-5, 0), (0, 0), (0.4, 0), (30.7, 30), (899.99, 899), (5000, 900)],
)
def test_message_delay_is_the_whole_seconds_not_yet_passed(seconds_ahead, delay):
    message = OutgoingMessage((uuid4(),), "x", NOW + timedelta(seconds=seconds_ahead), NOW)
    assert message.delay_seconds == delay


@pytest.mark.parametrize("action_type", ["webhook", "send_sms", 'odd "name\\', "caf\u00e9"])
@pytest.mark.parametrize("rows", [1, 3])
def test_a_message_body_is_the_json_of_its_fields(action_type, rows):
    message = OutgoingMessage(
        tuple(uuid4() for _ in range(rows)), action_type, NOW + timedelta(seconds=3), NOW
    )
    ids: dict[str, Any] = (
        {"id": str(message.action_ids[0])} if rows == 1
        else {"ids": [str(i) for i in message.action_ids]}
    )  # fmt: skip
    fields = ids | {"type": action_type, "due_at": message.due_at.isoformat()}
    assert message.body() == json.dumps(fields)
    assert decode_body(message.body()) == [
        MessageRow(action_id, action_type, message.due_at) for action_id in message.action_ids
    ]


def test_a_body_written_otherwise_decodes_as_its_json_reads():
    action_id = uuid4()
    due = "2026-05-20T09:00:00+00:00"
    expected = [MessageRow(action_id, "log", NOW)]
    for body in [
        json.dumps({"type": "log", "id": str(action_id), "due_at": due}),  # another key order
        json.dumps({"id": str(action_id).upper(), "type": "log", "due_at": due}, indent=1),
        f'{{"id": "{action_id}", "type": "lo\\u0067", "due_at": "{due}"}}',  # an escape
        f'{{"id": "{action_id}", "type": "log", "due_at": "2026-05-20T09:00:00Z"}}',
        json.dumps({"ids": [str(action_id).upper()], "type": "log", "due_at": due}),
    ]:
        assert decode_body(body) == expected, body
    # Shaped as the dispatcher writes them, yet not ours
    for foreign in [
        f'{{"id": "{"-" * 36}", "type": "log", "due_at": "{due}"}}',
        f'{{"id": "{"-" * 5}{action_id.hex[:31]}", "type": "log", "due_at": "{due}"}}',
        f'{{"id": "{action_id}", "type": "log", "due_at": "2026-05-20T09:00:00"}}',
        f'{{"id": "{action_id}", "type": "log", "due_at": "tomorrow"}}',
    ]:
        assert decode_body(foreign) is None, foreign
    # Dashes elsewhere around 32 hex digits: what uuid.UUID makes of them, as any other path
    moved = f"{action_id.hex[:4]}-{action_id.hex[4:16]}-{action_id.hex[16:]}--"
    decoded = decode_body(f'{{"id": "{moved}", "type": "log", "due_at": "{due}"}}')
    assert decoded == [MessageRow(UUID(moved), "log", NOW)]
    assert UUID(moved) == action_id


def test_a_message_naming_several_rows_is_ours_only_when_every_id_is_one():
    ids = [str(uuid4()), str(uuid4())]
    due = "2026-05-20T09:00:00+00:00"
    for foreign in [
        {"ids": [], "type": "log", "due_at": due},  # names no row
        {"ids": ids[0], "type": "log", "due_at": due},  # not a list
        {"ids": [ids[0], 7], "type": "log", "due_at": due},  # one id not a string
        {"ids": [ids[0], "x"], "type": "log", "due_at": due},  # one id not a uuid
        {"ids": [ids[0], "-" * 36], "type": "log", "due_at": due},
        {"ids": ids, "id": ids[0], "type": "log", "due_at": due},  # both: which one?
        {"ids": ids, "type": 7, "due_at": due},
        {"ids": ids, "type": "log"},
        [ids, "log", due],
    ]:
        assert decode_body(json.dumps(foreign)) is None, foreign
    rows = decode_body(json.dumps({"ids": ids, "type": "log", "due_at": due}))
    assert rows == [MessageRow(UUID(i), "log", NOW) for i in ids]


def test_rows_due_within_the_window_share_messages_each_with_its_own_due_time():
    at_nine, ws = NOW, uuid4()
    burst = [(uuid4(), "email", at_nine, ws) for _ in range(25)]
    webhook = [(uuid4(), "webhook", at_nine, ws) for _ in range(2)]
    spread = [(uuid4(), "email", at_nine + timedelta(milliseconds=i + 1), ws) for i in range(3)]
    later = [(uuid4(), "email", at_nine + MESSAGE_WINDOW + timedelta(milliseconds=i + 1), ws)
             for i in range(2)]  # fmt: skip
    # In any order: the tick's rows are in due order, enqueue_soon's in the statement's.
    rows = burst[:10] + later[1:] + spread[:1] + webhook + burst[10:] + spread[1:] + later[:1]
    per_type = {"email": 10, "webhook": 5}
    messages = doorbells(rows, NOW, per_type.__getitem__)
    # The burst's 25 and the 3 just after fill messages of 10 in due order; the rows a
    # window later start a message of their own; the other type has its own, in the
    # first turn of nine o'clock
    assert [(m.action_type, len(m.action_ids)) for m in messages] == [
        ("email", 10), ("webhook", 2), ("email", 10), ("email", 8), ("email", 2),
    ]  # fmt: skip
    assert messages[3].action_ids[5:] == tuple(r[0] for r in spread)
    assert messages[3].offsets_us == (0,) * 5 + (1000, 2000, 3000)
    assert messages[0].offsets_us == ()  # all due at one instant: the body of old
    assert messages[4].due_at == later[0][2]
    # Each row decodes to its own due time, exactly
    due = {r[0]: r[2] for r in rows}
    for message in messages:
        decoded = decode_body(message.body())
        assert decoded is not None
        assert [(d.action_id, d.due_at) for d in decoded] == [
            (i, due[i]) for i in message.action_ids
        ]
        assert message.due_at == min(due[i] for i in message.action_ids)
        assert (message.sent_at, message.group) == (NOW, str(ws))
    assert sorted(i for m in messages for i in m.action_ids) == sorted(r[0] for r in rows)
    # One row a message when the type says so; and with no window, one instant a message
    assert all(len(m.action_ids) == 1 for m in doorbells(rows, NOW, lambda _: 1))
    instants = doorbells(rows, NOW, lambda _: 100, window=timedelta(0))
    assert sorted(len(m.action_ids) for m in instants) == [1, 1, 1, 1, 1, 2, 25]


def test_a_message_of_rows_due_at_several_instants_is_refused_when_its_offsets_are_not():
    ids = [str(uuid4()) for _ in range(3)]
    due = NOW.isoformat()
    for offsets in ([0, 5], [0, 5, 6, 7], [0, -1, 2], [0, 1.5, 2], "0,1,2", [0, True, 2],
                    [0, 1, 10**15]):  # fmt: skip
        body = json.dumps({"ids": ids, "type": "log", "due_at": due, "offsets_us": offsets})
        assert decode_body(body) is None, offsets
    body = json.dumps({"ids": ids, "type": "log", "due_at": due, "offsets_us": [0, 7, 7]})
    assert [r.due_at - NOW for r in decode_body(body) or []] == [
        timedelta(0), timedelta(microseconds=7), timedelta(microseconds=7),
    ]  # fmt: skip


def test_workspaces_due_at_one_instant_take_turns_and_never_share_a_message():
    big, small, other = uuid4(), uuid4(), uuid4()
    # Given a big workspace's 50 rows due at nine, then a small one's and a third's
    rows = [(uuid4(), "webhook", NOW, big) for _ in range(50)]
    rows += [(uuid4(), "webhook", NOW, small), (uuid4(), "webhook", NOW, other)]
    messages = doorbells(rows, NOW, lambda _: 10)
    # Then each message is one workspace's, and the small ones are sent in the first turn,
    # not behind the big one's five messages
    assert [m.group for m in messages[:3]] == [str(big), str(small), str(other)]
    assert [m.group for m in messages[3:]] == [str(big)] * 4
    owner = {r[0]: r[3] for r in rows}
    assert all({str(owner[i]) for i in m.action_ids} == {m.group} for m in messages)
    assert sorted(i for m in messages for i in m.action_ids) == sorted(r[0] for r in rows)


def test_a_waves_workspaces_take_turns_at_the_provider_each_in_its_order():
    big, small = uuid4(), uuid4()
    wave = [replace(action(), id=uuid4(), workspace_id=big) for _ in range(4)]
    wave.insert(3, replace(action(), id=uuid4(), workspace_id=small))
    turns = taking_turns(wave)
    assert [a.workspace_id for a in turns] == [big, small, big, big, big]
    assert [a.id for a in turns if a.workspace_id == big] == [a.id for a in wave[:3] + wave[4:]]
    # One workspace: the wave as it came
    alone = wave[:3]
    assert taking_turns(alone) is alone


def test_claimed_rows_become_the_actions_their_columns_make():
    template = action()
    columns = list(Claimed.__dataclass_fields__)[::-1]  # in any order the statement returns
    row = tuple(getattr(template, name) for name in columns)
    cursor = SimpleNamespace(description=[SimpleNamespace(name=name) for name in columns])
    [built] = rows_as(Claimed, cast(Any, cursor), [row])
    assert type(built) is Claimed
    assert built == template
    assert built.due_at == template.due_at
    assert replace(built, status="published").status == "published"
    with pytest.raises(FrozenInstanceError):
        built.status = "failed"  # type: ignore[misc]


def test_message_bodies_round_trip_and_foreign_ones_are_refused():
    message = OutgoingMessage((uuid4(),), "webhook", NOW, NOW)
    assert decode_body(message.body()) == [MessageRow(message.action_ids[0], "webhook", NOW)]
    naive_due = f'{{"id": "{uuid4()}", "type": "a", "due_at": "2026-01-01T00:00:00"}}'
    bad_id = '{"id": "x", "type": "a", "due_at": "2026-01-01T00:00:00Z"}'
    for foreign in ["", "{}", bad_id, naive_due]:
        assert decode_body(foreign) is None


@pytest.mark.parametrize("retry_after", [1e20, float("inf"), float("nan"), -5.0])
def test_an_absurd_retry_after_neither_overflows_nor_parks_the_row(retry_after):
    f = decide(action(), Transient("429", retry_after), True, SETTINGS, NOW)
    assert f.status == "queued"
    assert f.next_attempt_at is not None
    assert f.next_attempt_at <= NOW + timedelta(seconds=SETTINGS.max_retry_after_seconds)


def test_retry_after_is_honoured_up_to_the_types_max_lateness():
    settings = SETTINGS.model_copy(
        update={"action_types": {"webhook": ActionTypeConfig(provider="webhook",
                                                             max_lateness_seconds=600)}}
    )  # fmt: skip
    f = decide(action(), Transient("429", 7200.0), True, settings, NOW)
    assert f.next_attempt_at == NOW + timedelta(seconds=600)
