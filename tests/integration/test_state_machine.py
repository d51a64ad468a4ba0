"""Every legal transition of scheduled_actions, and every illegal one, on a real Postgres."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import psycopg
import pytest

from tests.conftest import make_workspace
from tickwork.actions import model, scheduling, store
from tickwork.actions.model import Action, NewAction
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection, connect
from tickwork.platform.errors import ConflictError
from tickwork.platform.queues.enqueue import finish_pass, take_due

STATES = ("queued", "submitted", "published", "failed", "cancelled")


def new_action(publish_at: datetime | None = None, **overrides: object) -> NewAction:
    values: dict[str, object] = {
        "action_type": "webhook",
        "target_key": "primary",
        "publish_at": publish_at or datetime.now(UTC),
        "payload": {"body": "hello"},
    }
    values.update(overrides)
    return NewAction(**values)  # type: ignore[arg-type]


def fetch(conn: Connection, action_id: UUID) -> Action:
    row = conn.execute("select workspace_id from scheduled_actions where id = %s", (action_id,))
    workspace_id = row.fetchone()[0]
    found = store.get(conn, workspace_id, action_id)
    assert found is not None
    return found


def put_in_state(
    conn: Connection, workspace: UUID, settings: Settings, state: str, **overrides: object
) -> Action:
    """Drive a new row to `state` through the state machine itself."""
    row = scheduling.schedule(conn, workspace, new_action(**overrides), settings, datetime.now(UTC))
    action = row.action
    if state == "queued":
        return action
    if state == "cancelled":
        assert store.cancel(conn, workspace, action.id).changed
        return fetch(conn, action.id)
    assert store.claim(conn, "webhook", [action.id])
    if state == "published":
        store.finalize(conn, [model.published(action.id, "prov-1")])
    elif state == "failed":
        store.finalize(conn, [model.failed(action.id, "provider_rejected", "400 bad")])
    return fetch(conn, action.id)


# --------------------------------------------------------------------------- legal paths


def test_schedule_inserts_a_queued_row(conn, workspace, settings, now):
    # Given a valid new action
    # When it is scheduled
    result = scheduling.schedule(
        conn, workspace, new_action(now + timedelta(hours=1)), settings, now
    )
    # Then a queued row exists with the time in UTC
    assert result.created
    assert result.action.status == "queued"
    assert result.action.publish_at == now + timedelta(hours=1)
    assert result.action.attempt_count == 0
    assert fetch(conn, result.action.id).status == "queued"


def test_claim_then_publish(conn, workspace, settings):
    action = put_in_state(conn, workspace, settings, "queued")
    claimed = store.claim(conn, "webhook", [action.id])
    assert [a.id for a in claimed] == [action.id]
    assert claimed[0].status == "submitted"
    assert claimed[0].attempt_count == 1
    assert fetch(conn, action.id).submitted_at is not None

    applied = store.finalize(conn, [model.published(action.id, "msg-42")])
    assert applied == {action.id: "published"}
    row = fetch(conn, action.id)
    assert (row.status, row.provider_id, row.error_code) == ("published", "msg-42", None)
    assert row.finished_at is not None


AWKWARD_TEXT = [
    'say "hi", {then} bye',
    'back\\slash \\" and NULL',
    "NULL",
    "",
    "  spaced  ",
    "naïve ✓ 日本",
    "line\nbreak\ttab",
]


def test_a_wave_of_outcomes_stores_any_text_exactly(conn, workspace, settings):
    """The finalize sends each column as one array literal: quotes, backslashes, commas,
    braces, the word NULL and an empty string come back as they were sent."""
    rows = [put_in_state(conn, workspace, settings, "queued") for _ in range(len(AWKWARD_TEXT) + 1)]
    claimed = store.claim(conn, "webhook", [row.id for row in rows])
    assert {a.id for a in claimed} == {row.id for row in rows}
    outcomes = [
        model.published(row.id, text) for row, text in zip(rows, AWKWARD_TEXT, strict=False)
    ]
    outcomes.append(model.failed(rows[-1].id, "provider_rejected", AWKWARD_TEXT[1]))
    applied = store.finalize(conn, outcomes)
    assert len(applied) == len(rows)
    for row, text in zip(rows, AWKWARD_TEXT, strict=False):
        assert fetch(conn, row.id).provider_id == text
    last = fetch(conn, rows[-1].id)
    assert (last.status, last.provider_id, last.last_error) == ("failed", None, AWKWARD_TEXT[1])


def test_claim_then_fail(conn, workspace, settings):
    action = put_in_state(conn, workspace, settings, "submitted")
    store.finalize(conn, [model.failed(action.id, "provider_rejected", "400: bad number")])
    row = fetch(conn, action.id)
    assert (row.status, row.error_code, row.last_error) == (
        "failed",
        "provider_rejected",
        "400: bad number",
    )
    assert row.finished_at is not None


def test_requeue_counts_the_attempt_and_sets_next_attempt(conn, workspace, settings, now):
    action = put_in_state(conn, workspace, settings, "submitted")
    later = now + timedelta(seconds=30)
    store.finalize(conn, [model.requeued(action.id, later, "429 Too Many Requests")])
    row = fetch(conn, action.id)
    assert row.status == "queued"
    assert row.next_attempt_at == later
    assert row.attempt_count == 1
    assert row.submitted_at is None
    assert row.enqueued_at is None
    assert row.last_error == "429 Too Many Requests"


def test_revert_restores_the_attempt_count(conn, workspace, settings):
    action = put_in_state(conn, workspace, settings, "submitted")
    assert fetch(conn, action.id).attempt_count == 1
    store.finalize(conn, [model.reverted(action.id, None, "shutting down before send")])
    row = fetch(conn, action.id)
    assert (row.status, row.attempt_count, row.submitted_at) == ("queued", 0, None)


def test_cancel_a_queued_row(conn, workspace, settings):
    action = put_in_state(conn, workspace, settings, "queued")
    result = store.cancel(conn, workspace, action.id)
    assert result.changed
    assert result.action is not None
    assert result.action.status == "cancelled"
    assert result.action.finished_at is not None


def test_retry_a_failed_row_on_the_same_row(conn, workspace, settings):
    action = put_in_state(conn, workspace, settings, "failed")
    result = store.retry(conn, workspace, action.id, settings)
    assert result.changed
    row = fetch(conn, action.id)
    assert row.id == action.id
    assert (row.status, row.manual_retries, row.error_code, row.finished_at) == (
        "queued",
        1,
        None,
        None,
    )
    assert row.next_attempt_at is not None  # due at once
    assert conn.execute("select count(*) from scheduled_actions").fetchone()[0] == 1


def test_retry_is_bounded_at_five(conn, workspace, settings):
    action = put_in_state(conn, workspace, settings, "failed")
    for _ in range(5):
        assert store.retry(conn, workspace, action.id, settings).changed
        store.claim(conn, "webhook", [action.id])
        store.finalize(conn, [model.failed(action.id, "provider_rejected", "still bad")])
    sixth = store.retry(conn, workspace, action.id, settings)
    assert not sixth.changed
    assert sixth.action is not None
    assert (sixth.action.status, sixth.action.manual_retries) == ("failed", 5)


def test_reschedule_cancels_and_inserts_with_lineage(conn, workspace, settings, now):
    action = put_in_state(conn, workspace, settings, "queued", thing_id="post-1")
    later = now + timedelta(days=2)
    cancelled, replacement = scheduling.reschedule(conn, workspace, action.id, later, settings, now)
    assert cancelled.changed
    assert replacement is not None
    assert fetch(conn, action.id).status == "cancelled"
    assert replacement.status == "queued"
    assert replacement.rescheduled_from == action.id
    assert replacement.publish_at == later
    assert (replacement.thing_id, replacement.target_key, replacement.payload) == (
        action.thing_id,
        action.target_key,
        action.payload,
    )
    # publish_at of the original row was never edited
    assert fetch(conn, action.id).publish_at == action.publish_at


def test_reschedule_is_one_transaction(conn, workspace, settings, now):
    # Given the replacement cannot be inserted (its time is in the past)
    action = put_in_state(conn, workspace, settings, "queued")
    # When rescheduling fails part-way
    with pytest.raises(Exception, match="in the past"):
        scheduling.reschedule(conn, workspace, action.id, now - timedelta(days=1), settings, now)
    # Then the original is still queued and nothing was inserted
    assert fetch(conn, action.id).status == "queued"
    assert conn.execute("select count(*) from scheduled_actions").fetchone()[0] == 1


# ------------------------------------------------------------------------- illegal paths

Attempt = Callable[[Connection, UUID, Settings, Action], bool]


def try_cancel(conn: Connection, ws: UUID, settings: Settings, a: Action) -> bool:
    return store.cancel(conn, ws, a.id).changed


def try_retry(conn: Connection, ws: UUID, settings: Settings, a: Action) -> bool:
    return store.retry(conn, ws, a.id, settings).changed


def try_claim(conn: Connection, ws: UUID, settings: Settings, a: Action) -> bool:
    return bool(store.claim(conn, "webhook", [a.id]))


def try_publish(conn: Connection, ws: UUID, settings: Settings, a: Action) -> bool:
    return bool(store.finalize(conn, [model.published(a.id, "x")]))


def try_fail(conn: Connection, ws: UUID, settings: Settings, a: Action) -> bool:
    return bool(store.finalize(conn, [model.failed(a.id, "provider_rejected", "x")]))


def try_requeue(conn: Connection, ws: UUID, settings: Settings, a: Action) -> bool:
    later = datetime.now(UTC) + timedelta(minutes=1)
    return bool(store.finalize(conn, [model.requeued(a.id, later, "x")]))


def try_revert(conn: Connection, ws: UUID, settings: Settings, a: Action) -> bool:
    return bool(store.finalize(conn, [model.reverted(a.id, None, "x")]))


def try_reschedule(conn: Connection, ws: UUID, settings: Settings, a: Action) -> bool:
    now = datetime.now(UTC)
    _, replacement = scheduling.reschedule(conn, ws, a.id, now + timedelta(hours=1), settings, now)
    return replacement is not None


# transition -> the one state it may start from
LEGAL_FROM: dict[str, tuple[Attempt, str]] = {
    "cancel": (try_cancel, "queued"),
    "retry": (try_retry, "failed"),
    "claim": (try_claim, "queued"),
    "publish": (try_publish, "submitted"),
    "fail": (try_fail, "submitted"),
    "requeue": (try_requeue, "submitted"),
    "revert": (try_revert, "submitted"),
    "reschedule": (try_reschedule, "queued"),
}

ILLEGAL = [
    (name, state)
    for name, (_, legal_state) in LEGAL_FROM.items()
    for state in STATES
    if state != legal_state
]


@pytest.mark.parametrize(("transition", "state"), ILLEGAL)
def test_transition_from_the_wrong_state_changes_nothing(
    conn, workspace, settings, transition, state
):
    # Given a row in a state the transition does not start from
    action = put_in_state(conn, workspace, settings, state)
    before = conn.execute(
        "select to_jsonb(a) from scheduled_actions a where id = %s", (action.id,)
    ).fetchone()[0]
    count_before = conn.execute("select count(*) from scheduled_actions").fetchone()[0]
    attempt, _ = LEGAL_FROM[transition]
    # When the transition is attempted
    changed = attempt(conn, workspace, settings, action)
    # Then it reports no change, and the row and the table are exactly as they were
    assert changed is False
    after = conn.execute(
        "select to_jsonb(a) from scheduled_actions a where id = %s", (action.id,)
    ).fetchone()[0]
    assert after == before
    assert conn.execute("select count(*) from scheduled_actions").fetchone()[0] == count_before


@pytest.mark.parametrize("transition", sorted(LEGAL_FROM))
def test_each_transition_succeeds_from_its_legal_state(conn, workspace, settings, transition):
    attempt, state = LEGAL_FROM[transition]
    action = put_in_state(conn, workspace, settings, state)
    assert attempt(conn, workspace, settings, action) is True


def test_wrong_state_returns_the_row_as_it_is(conn, workspace, settings):
    action = put_in_state(conn, workspace, settings, "published")
    result = store.cancel(conn, workspace, action.id)
    assert not result.changed
    assert result.action is not None
    assert result.action.status == "published"


def test_unknown_or_foreign_id_is_not_found(conn, workspace, settings):

    other = make_workspace(conn, "Other")
    action = put_in_state(conn, workspace, settings, "queued")
    assert not store.cancel(conn, workspace, uuid4()).found
    # another workspace cannot touch the row, and it stays queued
    assert not store.cancel(conn, other, action.id).found
    assert fetch(conn, action.id).status == "queued"


def test_claim_skips_rows_not_yet_due(conn, workspace, settings, now):
    future = put_in_state(
        conn, workspace, settings, "queued", publish_at=now + timedelta(minutes=5)
    )
    assert store.claim(conn, "webhook", [future.id]) == []
    assert fetch(conn, future.id).status == "queued"


def test_claim_is_atomic_between_two_claimers(conn, workspace, settings, database_url):

    action = put_in_state(conn, workspace, settings, "queued")
    with connect(database_url) as other:
        first = store.claim(conn, "webhook", [action.id])
        second = store.claim(other, "webhook", [action.id])
    assert len(first) + len(second) == 1


# ----------------------------------------------------------- uniqueness and the guard


def test_one_active_row_per_thing_and_target(conn, workspace, settings, now):
    scheduling.schedule(conn, workspace, new_action(thing_id="post-1"), settings, now)
    with pytest.raises(ConflictError, match="active action already exists"):
        scheduling.schedule(conn, workspace, new_action(thing_id="post-1"), settings, now)
    # a different target, or another workspace, is a different (thing, target)
    scheduling.schedule(
        conn, workspace, new_action(thing_id="post-1", target_key="b"), settings, now
    )
    assert conn.execute("select count(*) from scheduled_actions").fetchone()[0] == 2


def test_cancelled_row_frees_the_thing_and_target(conn, workspace, settings, now):
    first = scheduling.schedule(conn, workspace, new_action(thing_id="post-1"), settings, now)
    store.cancel(conn, workspace, first.action.id)
    second = scheduling.schedule(conn, workspace, new_action(thing_id="post-1"), settings, now)
    assert second.created


def test_publish_guard_refuses_an_active_row_beside_a_published_sibling(
    conn, workspace, settings, now
):
    put_in_state(conn, workspace, settings, "published", thing_id="post-1")
    with pytest.raises(ConflictError, match="already published") as raised:
        scheduling.schedule(conn, workspace, new_action(thing_id="post-1"), settings, now)
    assert raised.value.details["constraint"] == "scheduled_actions_publish_guard"
    # the raw SQLSTATE is 23505, as the playbook's guard

    with pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute(
            "insert into scheduled_actions (workspace_id, action_type, thing_id, target_key,"
            " publish_at) values (%s, 'webhook', 'post-1', 'primary', now())",
            (workspace,),
        )


def test_publish_guard_refuses_retry_of_a_failed_sibling(conn, workspace, settings):
    failed = put_in_state(conn, workspace, settings, "failed", thing_id="post-1")
    put_in_state(conn, workspace, settings, "published", thing_id="post-1")
    with pytest.raises(ConflictError, match="already published"):
        store.retry(conn, workspace, failed.id, settings)
    assert fetch(conn, failed.id).status == "failed"


def test_the_publish_guard_reads_an_index_in_a_large_insert_on_stale_statistics(database_url):
    # Statistics taken while the table was empty, and a session with no plan of the guard
    # cached: the plan the guard caches for the insert's first rows would read the whole
    # table for each row after them (8,000 rows in one statement read 32M tuples, 5 s).
    # The guard's function forbids sequential scans, so its lookup is an index's at any size.
    rows = 8000
    with connect(database_url) as fresh:
        fresh.execute("analyze scheduled_actions")
        workspace = make_workspace(fresh)
        with fresh.transaction():
            fresh.execute(
                "insert into scheduled_actions (workspace_id, action_type, thing_id,"
                " target_key, publish_at)"
                " select %s, 'webhook', 'post-' || g, 'primary', now() + interval '1 day'"
                " from generate_series(1, %s) g",
                (workspace, rows),
            )
            row = fresh.execute(
                "select coalesce(seq_tup_read, 0) from pg_stat_xact_user_tables"
                " where relname = 'scheduled_actions'"
            ).fetchone()
    assert row is not None
    assert row[0] < rows


def test_publish_guard_leaves_duplicate_history_alone(conn, workspace):
    # Given legacy history: the same thing and target published twice (provider redelivery)
    for _ in range(2):
        conn.execute(
            "insert into scheduled_actions (workspace_id, action_type, thing_id, target_key,"
            " publish_at, status, finished_at) values (%s, 'webhook', 'post-1', 'primary',"
            " now(), 'published', now())",
            (workspace,),
        )
    # When history rows are touched (not made active)
    conn.execute("update scheduled_actions set last_error = 'audited' where thing_id = 'post-1'")
    # Then nothing is refused and both rows remain
    rows = conn.execute(
        "select count(*) from scheduled_actions where status = 'published'"
    ).fetchone()[0]
    assert rows == 2


# --------------------------------------------------------------------- due ordering


def test_due_rows_are_ordered_by_time_then_id(conn, workspace, now):

    # Given many rows sharing one publish_at and a few earlier ones
    same = now - timedelta(seconds=5)
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %s, 'webhook', 't' || g, %s from generate_series(1, 50) g",
        (workspace, same),
    )
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %s, 'webhook', 'early' || g, %s from generate_series(1, 5) g",
        (workspace, same - timedelta(seconds=1)),
    )
    expected = [
        row[0]
        for row in conn.execute(
            "select id from scheduled_actions order by publish_at, id"
        ).fetchall()
    ]
    # When the tick takes them in small batches
    taken: list[UUID] = []
    while (batch := take_due(conn, "webhook", now, batch_size=7)) and batch.rows:
        finish_pass(conn, batch, set())
        taken.extend(row.id for row in batch.rows)
    # Then they come in (publish_at, id) order, each exactly once
    assert taken == expected


# ------------------------------------------------------------------------------ updated_at


def test_every_write_of_a_row_stamps_updated_at(conn, workspace, settings, now):

    # Given a row due now, and a clock read before each write (each in its own transaction)
    action = scheduling.schedule(conn, workspace, new_action(now), settings, now).action

    def stamped_after(write: Callable[[], object]) -> datetime:
        before = conn.execute("select clock_timestamp()").fetchone()[0]
        write()
        stamp = fetch(conn, action.id).updated_at
        assert stamp > before
        return stamp

    # When the tick hands it to its queue (a pass writes no row: the stamp stays), a
    # dispatcher claims it and the provider's outcome is written, and a person retries it
    # and then cancels it (each statement stamps the row itself: no trigger does)
    created = fetch(conn, action.id).updated_at

    def handed() -> None:
        taken = take_due(conn, "webhook", now, 10)
        assert taken is not None
        assert [row.id for row in taken.rows] == [action.id]
        finish_pass(conn, taken, set())

    handed()
    assert fetch(conn, action.id).updated_at == created
    claimed = stamped_after(lambda: store.claim(conn, "webhook", [action.id]))
    failed = stamped_after(
        lambda: store.finalize(conn, [model.failed(action.id, "provider_rejected", "no")])
    )
    retried = stamped_after(lambda: store.retry(conn, workspace, action.id, settings))
    edited = stamped_after(lambda: store.cancel(conn, workspace, action.id))
    # Then each write moved updated_at forward
    assert created < claimed < failed < retried < edited
