"""Digests and debounce on a real Postgres: the events of a digest rule become one action per
(rule, recipient, target, key) and window, whose template sees them all; sent by the
dispatcher with a recording provider."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest

from tests.sequence_helpers import action_row, changes_of, let_time_come, make_engine, recipient
from tickwork.actions.model import Claimed
from tickwork.digests import store as digests
from tickwork.digests.model import MAX_ITEM_BYTES, MAX_ITEMS, DigestError, DigestNotOpenError
from tickwork.platform.db import connect
from tickwork.providers.base import Outcome, Via
from tickwork.providers.log import LogProvider
from tickwork.rules.events import EventInput, emit_event
from tickwork.rules.model import ActionTemplate, ProduceResult, RuleInput, Trigger
from tickwork.rules.store import create_rule
from tickwork.runtime import Runtime

UTC_ZONE = ZoneInfo("UTC")
TOKYO = ZoneInfo("Asia/Tokyo")
LIST = "{{ count }} new comments: {{ items | map(attribute='context.n') | join(',') }}"


class Recording(LogProvider):
    """The log provider, keeping the payload each call sent."""

    def __init__(self) -> None:
        super().__init__({"quiet": True})
        self.payloads: list[tuple[UUID, dict[str, Any]]] = []

    def send(self, action: Claimed, via: Via | None = None) -> Outcome:
        self.payloads.append((action.id, dict(action.payload)))
        return super().send(action, via)


@pytest.fixture
def engine(database_url: str) -> Iterator[Runtime]:
    yield from make_engine(database_url)


@pytest.fixture
def provider(engine: Runtime) -> Recording:
    recording = Recording()
    engine.providers.register("sms", recording)
    return recording


def digest_rule(conn, rt, workspace, window, *, key=None, text=LIST, event="comment.added"):
    digest = {"window": window} | ({"key": key} if key else {})
    template = ActionTemplate("sms", "phone", {"text": text}, "{{ context.to }}", False, digest)
    given = RuleInput(name="comments", trigger=Trigger("event", event_type=event),
                      action=template)  # fmt: skip
    return create_rule(conn, workspace, given, rt.settings, datetime.now(UTC)).rule.id


def comment(conn, rt, workspace, n, at, *, to="ann", event_id=None, **context) -> ProduceResult:
    event = EventInput(
        type="comment.added", entities={"post": "p1"},
        context={"to": to, "n": n} | context, occurred_at=at,
        id=event_id if event_id is not None else f"evt-{n}",
    )  # fmt: skip
    result = emit_event(conn, workspace, event, UTC_ZONE, rt.settings, at)
    assert result.success, result.error
    return result


def digest_ids(conn, workspace) -> list[UUID]:
    rows = conn.execute(
        "select id from digests where workspace_id = %s order by created_at, id", (workspace,)
    ).fetchall()
    return [r[0] for r in rows]


def queued_actions(conn, workspace) -> list[UUID]:
    rows = conn.execute(
        "select id from scheduled_actions where workspace_id = %s and status = 'queued'",
        (workspace,),
    ).fetchall()
    return [r[0] for r in rows]


def test_fifty_events_in_thirty_seconds_make_one_delivery_listing_fifty_items(
    conn, workspace, engine, provider
):
    # Given a digest rule with a one-minute window and a recipient
    recipient(conn, engine, workspace)
    digest_rule(conn, engine, workspace, {"seconds": 60})
    start = datetime.now(UTC)
    # When 50 events for the recipient come within 30 seconds
    results = [
        comment(conn, engine, workspace, n, start + timedelta(seconds=n * 0.6)) for n in range(50)
    ]
    # Then the first made one action, due a minute after it; the others joined it
    assert [len(r.created) for r in results] == [1] + [0] * 49
    assert all(r.count("digested") == 1 for r in results[1:])
    [action_id] = queued_actions(conn, workspace)
    row = action_row(conn, action_id)
    assert row["publish_at"] == start + timedelta(seconds=60)
    assert row["dedupe_key"] == f"digest:{digest_ids(conn, workspace)[0]}"
    # When its time comes: one delivery, listing the 50 items in order
    let_time_come(conn, engine, [action_id], "sms")
    assert [i for i, _ in provider.payloads] == [action_id]
    listed = ",".join(str(n) for n in range(50))
    assert provider.payloads[0][1] == {"text": f"50 new comments: {listed}"}
    assert action_row(conn, action_id)["status"] == "published"
    view = digests.get_digest(conn, workspace, digest_ids(conn, workspace)[0])
    assert (view.state, view.digest.item_count, view.action_status) == ("closed", 50, "published")


def test_every_event_twice_from_four_producers_at_once_makes_one_digest_of_fifty(
    database_url, conn, workspace, engine
):
    # Given a digest rule and 50 events, each delivered twice, by two different producers
    recipient(conn, engine, workspace)
    digest_rule(conn, engine, workspace, {"seconds": 60})
    start = datetime.now(UTC)
    deliveries = [n for n in range(50) for _ in range(2)]
    shards = [deliveries[i::4] for i in range(4)]
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def producer(shard: list[int]) -> None:
        with connect(database_url) as own:
            barrier.wait()
            try:
                for n in shard:
                    comment(own, engine, workspace, n, start + timedelta(milliseconds=n))
            except BaseException as exc:  # asserted below
                errors.append(exc)

    threads = [threading.Thread(target=producer, args=(s,)) for s in shards]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then one digest, one action, 50 items each once, in positions 1..50
    assert errors == []
    [digest_id] = digest_ids(conn, workspace)
    assert len(queued_actions(conn, workspace)) == 1
    items = digests.items_of(conn, workspace, digest_id)
    assert sorted(i.data["context"]["n"] for i in items) == list(range(50))
    assert [i.position for i in items] == list(range(1, 51))
    payload = action_row(conn, queued_actions(conn, workspace)[0])["payload"]
    assert payload["text"].startswith("50 new comments: ")


def test_an_item_after_the_claim_starts_the_next_digest_and_a_late_duplicate_adds_nothing(
    conn, workspace, engine, provider
):
    recipient(conn, engine, workspace)
    digest_rule(conn, engine, workspace, {"seconds": 60})
    now = datetime.now(UTC)
    comment(conn, engine, workspace, 1, now)
    comment(conn, engine, workspace, 2, now)
    [first_action] = queued_actions(conn, workspace)
    # When the first digest is claimed and sent
    let_time_come(conn, engine, [first_action], "sms")
    # Then a new event opens a second digest with its own action; the first one's
    # event delivered again is in no digest a second time
    late = comment(conn, engine, workspace, 3, now + timedelta(seconds=5))
    again = comment(conn, engine, workspace, 2, now + timedelta(seconds=6))
    assert len(late.created) == 1
    assert again.count("duplicate") == 1
    first, second = digest_ids(conn, workspace)
    assert [i.data["context"]["n"] for i in digests.items_of(conn, workspace, first)] == [1, 2]
    assert [i.data["context"]["n"] for i in digests.items_of(conn, workspace, second)] == [3]
    [second_action] = queued_actions(conn, workspace)
    let_time_come(conn, engine, [second_action], "sms")
    assert [p["text"] for _, p in provider.payloads] == [
        "2 new comments: 1,2", "1 new comments: 3",
    ]  # fmt: skip


def test_recipients_and_keys_each_have_their_digest(conn, workspace, engine):
    recipient(conn, engine, workspace)
    recipient(conn, engine, workspace, "bob")
    digest_rule(conn, engine, workspace, {"seconds": 60}, key="{{ context.thread }}")
    now = datetime.now(UTC)
    comment(conn, engine, workspace, 1, now, thread="a")
    comment(conn, engine, workspace, 2, now, thread="b")
    comment(conn, engine, workspace, 3, now, thread="a")
    comment(conn, engine, workspace, 4, now, to="bob", thread="a")
    counts = sorted(
        (v.digest.recipient_id, v.digest.digest_key, v.digest.item_count)
        for v in digests.list_digests(conn, workspace, limit=10)
    )
    assert counts == [("ann", "a", 2), ("ann", "b", 1), ("bob", "a", 1)]


def test_a_full_digest_makes_the_next_item_open_another(conn, workspace, engine):
    recipient(conn, engine, workspace)
    digest_rule(conn, engine, workspace, {"seconds": 600}, text="{{ count }}")
    now = datetime.now(UTC)
    for n in range(MAX_ITEMS + 1):
        comment(conn, engine, workspace, n, now)
    sizes = [v.digest.item_count for v in digests.list_digests(conn, workspace, limit=10)]
    assert sorted(sizes) == [1, MAX_ITEMS]


def test_a_digest_whose_items_reach_a_mebibyte_makes_the_next_item_open_another(
    conn, workspace, engine
):
    recipient(conn, engine, workspace)
    digest_rule(conn, engine, workspace, {"seconds": 600}, text="{{ count }}")
    now = datetime.now(UTC)
    blob = "x" * 60_000  # 18 items of about 60 kB pass the bound (1 MiB) by one
    for n in range(18):
        comment(conn, engine, workspace, n, now, blob=blob)
    found = sorted(
        (v.digest.item_count, v.digest.item_bytes)
        for v in digests.list_digests(conn, workspace, limit=10)
    )
    assert [count for count, _ in found] == [1, 17]
    assert all(size <= MAX_ITEM_BYTES for _, size in found)


def test_debounce_fires_once_after_the_quiet_period(conn, workspace, engine, provider):
    # Given a debounce of 30 s quiet, at most 5 minutes
    recipient(conn, engine, workspace)
    digest_rule(conn, engine, workspace, {"quiet_seconds": 30, "max_seconds": 300})
    start = datetime.now(UTC)
    # When three events come 10 s apart
    for n in range(3):
        comment(conn, engine, workspace, n, start + timedelta(seconds=10 * n))
    # Then the action is due 30 s after the last one, and the moves are in its change log
    [action_id] = queued_actions(conn, workspace)
    assert action_row(conn, action_id)["publish_at"] == start + timedelta(seconds=50)
    kinds = [(c["kind"], c["new_at"]) for c in changes_of(conn, action_id)]
    assert kinds[0] == ("digest", None)
    assert kinds[1:] == [
        ("digest", start + timedelta(seconds=40)), ("digest", start + timedelta(seconds=50)),
    ]  # fmt: skip
    let_time_come(conn, engine, [action_id], "sms")
    assert [p["text"] for _, p in provider.payloads] == ["3 new comments: 0,1,2"]


def test_debounce_under_a_steady_stream_fires_at_the_max_delay(conn, workspace, engine):
    recipient(conn, engine, workspace)
    digest_rule(conn, engine, workspace, {"quiet_seconds": 30, "max_seconds": 120})
    start = datetime.now(UTC)
    # An event every 20 s never leaves 30 s quiet: the digest is due at first + 120 s
    for n in range(10):
        comment(conn, engine, workspace, n, start + timedelta(seconds=20 * n))
    due = sorted(action_row(conn, i)["publish_at"] for i in queued_actions(conn, workspace))
    assert due[0] == start + timedelta(seconds=120)


def test_a_moved_debounce_leaves_the_queue_and_returns_at_its_new_time(conn, workspace, engine):
    recipient(conn, engine, workspace)
    digest_rule(conn, engine, workspace, {"quiet_seconds": 30, "max_seconds": 300})
    now = datetime.now(UTC)
    comment(conn, engine, workspace, 1, now)
    [action_id] = queued_actions(conn, workspace)
    # As if the tick had handed it to its queue already
    conn.execute("update scheduled_actions set enqueued_at = now() where id = %s", (action_id,))
    comment(conn, engine, workspace, 2, now + timedelta(seconds=10))
    row = action_row(conn, action_id)
    assert row["publish_at"] == now + timedelta(seconds=40)
    assert row["enqueued_at"] is None  # the tick sends it again at its new time


def test_an_until_window_ending_in_tokyo_quiet_hours_moves_like_any_message(
    conn, workspace, engine
):
    # Given a recipient in Tokyo, quiet 21:00-08:00, and a digest until 22:00 their time
    recipient(conn, engine, workspace, timezone="Asia/Tokyo",
              quiet_hours=[{"start": "21:00", "end": "08:00"}])  # fmt: skip
    digest_rule(conn, engine, workspace, {"until": "22:00"})
    now = datetime.now(UTC)
    comment(conn, engine, workspace, 1, now)
    [action_id] = queued_actions(conn, workspace)
    row = action_row(conn, action_id)
    # Then the window ends at the next 22:00 in Tokyo, and the message goes at 08:00 after
    local = now.astimezone(TOKYO)
    ends = local.replace(hour=22, minute=0, second=0, microsecond=0)
    if ends <= local:
        ends += timedelta(days=1)
    assert row["original_publish_at"] == ends
    assert row["publish_at"] == (ends + timedelta(days=1)).replace(hour=8)
    assert [c["kind"] for c in changes_of(conn, action_id)] == ["quiet_hours", "digest"]


def test_flush_sends_now_and_the_next_item_opens_another(conn, workspace, engine, provider):
    recipient(conn, engine, workspace)
    digest_rule(conn, engine, workspace, {"seconds": 3600})
    now = datetime.now(UTC)
    comment(conn, engine, workspace, 1, now)
    [digest_id] = digest_ids(conn, workspace)
    view = digests.flush(conn, workspace, digest_id, now)
    assert view.state == "flushed"
    action_id = view.digest.action_id
    assert action_id is not None
    row = action_row(conn, action_id)
    assert row["publish_at"] == now
    assert row["enqueued_at"] is None
    assert [c["kind"] for c in changes_of(conn, action_id)] == ["digest", "flush"]
    comment(conn, engine, workspace, 2, now)
    assert len(digest_ids(conn, workspace)) == 2
    let_time_come(conn, engine, [action_id], "sms")
    assert [p["text"] for _, p in provider.payloads] == ["1 new comments: 1"]
    with pytest.raises(DigestNotOpenError):
        digests.flush(conn, workspace, digest_id, now)


def test_cancel_cancels_the_action_and_records_it(conn, workspace, engine):
    recipient(conn, engine, workspace)
    digest_rule(conn, engine, workspace, {"seconds": 3600})
    now = datetime.now(UTC)
    comment(conn, engine, workspace, 1, now)
    [digest_id] = digest_ids(conn, workspace)
    view = digests.cancel(conn, workspace, digest_id)
    assert (view.state, view.action_status) == ("cancelled", "cancelled")
    assert view.digest.action_id is not None
    changes = changes_of(conn, view.digest.action_id)
    assert [c["kind"] for c in changes] == ["digest", "cancel"]
    assert changes[-1]["reason"] == "the digest was cancelled"
    with pytest.raises(DigestNotOpenError):
        digests.cancel(conn, workspace, digest_id)


def test_a_claimed_digest_cannot_be_flushed_or_cancelled(conn, workspace, engine):
    recipient(conn, engine, workspace)
    digest_rule(conn, engine, workspace, {"seconds": 60})
    now = datetime.now(UTC)
    comment(conn, engine, workspace, 1, now)
    [digest_id] = digest_ids(conn, workspace)
    conn.execute("update scheduled_actions set status = 'submitted' where workspace_id = %s",
                 (workspace,))  # fmt: skip
    with pytest.raises(DigestNotOpenError):
        digests.flush(conn, workspace, digest_id, now)
    with pytest.raises(DigestNotOpenError):
        digests.cancel(conn, workspace, digest_id)
    assert digests.get_digest(conn, workspace, digest_id).state == "closed"


@pytest.mark.parametrize(
    ("digest", "field"),
    [
        ({"window": {"seconds": 0}}, "action.digest.window.seconds"),
        ({"window": {"seconds": 60, "until": "08:00"}}, "action.digest.window"),
        ({"window": {"until": "25:00"}}, "action.digest.window.until"),
        ({"window": {"quiet_seconds": 60, "max_seconds": 30}}, "action.digest.window.max_seconds"),
        ({"window": {"seconds": 60}, "extra": 1}, "action.digest"),
        ({"key": "x"}, "action.digest.window"),
    ],
)
def test_a_digest_that_is_not_one_is_refused_naming_the_field(
    conn, workspace, engine, digest, field
):
    template = ActionTemplate("sms", "phone", {"text": "x"}, None, False, digest)
    given = RuleInput(name="r", trigger=Trigger("event", event_type="e"), action=template)
    with pytest.raises(DigestError) as caught:
        create_rule(conn, workspace, given, engine.settings, datetime.now(UTC))
    assert caught.value.field == field


def test_a_time_rule_cannot_digest(conn, workspace, engine):
    template = ActionTemplate("sms", "phone", {"text": "x"}, None, False,
                              {"window": {"seconds": 60}})  # fmt: skip
    trigger = Trigger("time", entity_type="booking", reference="start", offset_seconds=0)
    with pytest.raises(DigestError):
        create_rule(conn, workspace, RuleInput(name="r", trigger=trigger, action=template),
                    engine.settings, datetime.now(UTC))  # fmt: skip


def test_a_debounce_held_by_quiet_hours_moves_only_when_its_time_does(conn, workspace, engine):
    # Given a recipient in Tokyo whose quiet hours run from an hour ago to three hours ahead
    local = datetime.now(TOKYO)
    quiet = {"start": (local - timedelta(hours=1)).strftime("%H:%M"),
             "end": (local + timedelta(hours=3)).strftime("%H:%M")}  # fmt: skip
    recipient(conn, engine, workspace, timezone="Asia/Tokyo", quiet_hours=[quiet])
    digest_rule(conn, engine, workspace, {"quiet_seconds": 30, "max_seconds": 300})
    now = datetime.now(UTC)
    # When two events come 10 s apart
    comment(conn, engine, workspace, 1, now)
    comment(conn, engine, workspace, 2, now + timedelta(seconds=10))
    # Then the action waits for the end of the quiet hours, and its time never moved
    [action_id] = queued_actions(conn, workspace)
    row = action_row(conn, action_id)
    end = local.replace(second=0, microsecond=0) + timedelta(hours=3)
    assert row["publish_at"] == end
    assert [c["kind"] for c in changes_of(conn, action_id)] == ["quiet_hours", "digest"]
    assert row["payload"]["text"] == "2 new comments: 1,2"


def test_an_event_that_cannot_render_fails_its_firing_and_the_digest_keeps_what_it_had(
    conn, workspace, engine
):
    recipient(conn, engine, workspace)
    digest_rule(conn, engine, workspace, {"seconds": 60}, text="{{ last.context.title }}")
    now = datetime.now(UTC)
    comment(conn, engine, workspace, 1, now, title="first")
    event = EventInput(type="comment.added", context={"to": "ann", "n": 2}, id="evt-2")
    failed = emit_event(conn, workspace, event, UTC_ZONE, engine.settings, now)
    assert [f.field for f in failed.failed] == ["action.payload.text"]
    [digest_id] = digest_ids(conn, workspace)
    assert [i.item_key for i in digests.items_of(conn, workspace, digest_id)] == ["evt-1"]
    [action_id] = queued_actions(conn, workspace)
    assert action_row(conn, action_id)["payload"] == {"text": "first"}
    # an unknown recipient makes nothing at all
    stranger = EventInput(type="comment.added", context={"to": "zed", "n": 3}, id="evt-3")
    refused = emit_event(conn, workspace, stranger, UTC_ZONE, engine.settings, now)
    assert len(refused.failed) == 1
    assert digest_ids(conn, workspace) == [digest_id]
