"""The reconciler on a real Postgres: the triple-publish regression, moves, zone changes,
the age and terminal-parent gates, the cron's pass, concurrency and the Lambda handler."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tests.engine import drain, in_queue
from tests.handlers import FakeLambdaContext, load_handler
from tests.intent_helpers import (
    SOCIAL,
    age_rows,
    count,
    declare,
    rows_of,
    social_settings,
    statuses_by_target,
)
from tests.waiting import wait_for
from tickwork import runtime as runtime_slot
from tickwork import workspaces
from tickwork.actions import model, scheduling, store
from tickwork.actions.model import NewAction
from tickwork.engine.tick import run_tick
from tickwork.intents import store as intents
from tickwork.intents.reconcile import ReconcileSummary, reconcile_changed, reconcile_thing
from tickwork.intents.store import IntentInput, validate_intent, write_intent
from tickwork.platform.db import connect
from tickwork.platform.wallclock import utcnow
from tickwork.recurring.store import NewSchedule, create_schedule
from tickwork.tenancy import tenant_transaction


@pytest.fixture
def settings(database_url):
    return social_settings(database_url)


@pytest.fixture
def tomorrow(now):
    return (now + timedelta(days=1)).date()


def sleep_until(instant: datetime, extra: float = 0.0) -> None:
    """Let the wall clock pass `instant`: the rows under test fall due by the clock alone."""
    time.sleep(max(0.0, (instant - utcnow()).total_seconds()) + extra)


def active_row(conn, thing_id, target):
    [found] = [r for r in rows_of(conn, thing_id, target) if r["status"] in ("queued", "submitted")]
    return found


# ------------------------------------------------------------- the triple-publish bug


@pytest.mark.parametrize("rows_age", ["young", "old"], ids=["rows-young", "rows-older-than-2m"])
def test_triple_publish_regression(conn, workspace, settings, runtime, rows_age):
    # Given a post for instagram, facebook and linkedin, due in two seconds
    due = utcnow() + timedelta(seconds=2)
    declare(conn, workspace, settings, publish_at=due)
    # and instagram already published (its provider went first)
    instagram = active_row(conn, "post-1", "instagram")
    assert store.claim(conn, "publish_post", [instagram["id"]], early_tolerance=60)
    store.finalize(conn, [model.published(instagram["id"], "ig-1")])

    # When the intent flips state twice and back, reconciling every time (the write itself
    # and the cron), with rows young (the age gate holds them) or old enough to be cancelled
    skipped_terminal = 0
    for state in ("unscheduled", "scheduled", "unscheduled", "scheduled"):
        if rows_age == "old":
            age_rows(conn, 300)
        written = declare(conn, workspace, settings, publish_at=due, state=state)
        swept = reconcile_changed(conn, settings)
        skipped_terminal += written.reconciled.skipped["terminal_history"]
        skipped_terminal += swept.skipped["terminal_history"]

    # Then instagram was never queued again: its one row is the published one
    assert [r["status"] for r in rows_of(conn, "post-1", "instagram")] == ["published"]
    assert skipped_terminal == 2  # once per flip back to scheduled
    # and when the time comes, facebook and linkedin publish once each
    sleep_until(due, 0.2)
    run_tick(conn, runtime.queues, settings)
    dispatched = drain(runtime, "publish_post")
    assert dispatched.published == 2
    published = {t: c["published"] for t, c in statuses_by_target(conn, "post-1").items()}
    assert published == {"instagram": 1, "facebook": 1, "linkedin": 1}
    assert count(conn, "scheduled_actions where status in ('queued', 'submitted')") == 0
    # and nothing is left for the reconciler to do
    assert reconcile_thing(conn, workspace, "post-1", settings).inserted == 0


# -------------------------------------------------------------------------- moves


def test_a_moved_wall_time_cancels_the_old_row_and_links_the_new_one(
    conn, workspace, settings, tomorrow
):
    # Given a post at 09:00 tomorrow (workspace zone UTC)
    declare(conn, workspace, settings, targets=("instagram",), wall_date=tomorrow,
            wall_time="09:00")  # fmt: skip
    old = active_row(conn, "post-1", "instagram")
    # When its wall time moves to 10:30
    result = declare(conn, workspace, settings, targets=("instagram",), wall_date=tomorrow,
                     wall_time="10:30")  # fmt: skip
    # Then the old row is cancelled (superseded) and a new one, linked to it, is due at 10:30
    assert result.reconciled.moved == 1
    [before, after] = rows_of(conn, "post-1", "instagram")
    assert before["id"] == old["id"]
    assert before["status"] == "cancelled"
    assert before["error_code"] == "superseded"
    assert before["publish_at"] == datetime.combine(tomorrow, datetime.min.time(), UTC).replace(
        hour=9
    )
    assert after["status"] == "queued"
    assert after["rescheduled_from"] == old["id"]
    assert after["publish_at"] == datetime.combine(tomorrow, datetime.min.time(), UTC).replace(
        hour=10, minute=30
    )
    assert after["source"] == "intent"


def test_a_moved_row_fires_at_its_new_time_and_the_old_one_never(
    conn, workspace, settings, runtime
):
    # Given a post due in 1.5 s, already handed to its queue (due within the look-ahead)
    first = utcnow() + timedelta(seconds=1.5)
    declare(conn, workspace, settings, targets=("facebook",), queues=runtime.queues,
            wall_date=first.date(), wall_time=first.time().isoformat())  # fmt: skip
    old = active_row(conn, "post-1", "facebook")
    assert in_queue(conn, old["id"])
    # When its wall time moves 1.5 s later
    second = first + timedelta(seconds=1.5)
    declare(conn, workspace, settings, targets=("facebook",), queues=runtime.queues,
            wall_date=second.date(), wall_time=second.time().isoformat())  # fmt: skip
    # Then the old row's message changes nothing and the new row fires at the new time
    sleep_until(second, 0.3)
    run_tick(conn, runtime.queues, settings)
    dispatched = drain(runtime, "publish_post")
    assert dispatched.published == 1
    [before, after] = rows_of(conn, "post-1", "facebook")
    assert before["status"] == "cancelled"
    assert after["status"] == "published"
    assert after["rescheduled_from"] == old["id"]
    assert after["publish_at"] == second
    # fired at its time, not before (the bound after allows for a busy test machine)
    assert second <= after["finished_at"] < second + timedelta(seconds=2)


def test_a_workspace_zone_change_moves_the_rows_that_follow_it(conn, workspace, settings, tomorrow):
    # Given three posts at 09:00 tomorrow: in the workspace's zone (UTC), in their own zone,
    # and at a UTC instant
    declare(conn, workspace, settings, "follows", targets=("instagram",), wall_date=tomorrow,
            wall_time="09:00")  # fmt: skip
    declare(conn, workspace, settings, "own-zone", targets=("instagram",), wall_date=tomorrow,
            wall_time="09:00", timezone="Asia/Tokyo")  # fmt: skip
    at = datetime.combine(tomorrow, datetime.min.time(), UTC).replace(hour=9)
    declare(conn, workspace, settings, "instant", targets=("instagram",), publish_at=at)
    before = {thing: active_row(conn, thing, "instagram") for thing in ("own-zone", "instant")}
    old = active_row(conn, "follows", "instagram")
    # When the workspace moves to New York
    conn.execute("update workspaces set timezone = 'America/New_York' where id = %s", (workspace,))
    summary = reconcile_changed(conn, settings)
    # Then the post in the workspace's zone follows, by cancel + insert
    assert summary.moved == 1
    new = active_row(conn, "follows", "instagram")
    expected = datetime.combine(tomorrow, datetime.min.time(), ZoneInfo("America/New_York"))
    assert new["publish_at"] == expected.replace(hour=9)
    assert new["rescheduled_from"] == old["id"]
    assert rows_of(conn, "follows", "instagram")[0]["status"] == "cancelled"
    # and the others stay as they were
    for thing, row in before.items():
        assert active_row(conn, thing, "instagram")["id"] == row["id"]


def test_a_zone_change_through_the_api_role_marks_intents_too(conn, workspace, settings, tomorrow):
    # Given an intent in the workspace's zone
    declare(conn, workspace, settings, targets=("instagram",), wall_date=tomorrow,
            wall_time="09:00")  # fmt: skip
    # When an admin changes the zone through the API (its role has no rights on intents)
    with tenant_transaction(conn, workspace):
        workspaces.update(conn, timezone="Europe/Berlin")
    # Then the change is accepted and the cron moves the row
    assert reconcile_changed(conn, settings).moved == 1
    expected = datetime.combine(tomorrow, datetime.min.time(), ZoneInfo("Europe/Berlin"))
    assert active_row(conn, "post-1", "instagram")["publish_at"] == expected.replace(hour=9)


# -------------------------------------------------------------------------- gates


def test_age_gate_keeps_a_row_for_a_removed_target_until_it_is_two_minutes_old(
    conn, workspace, settings, tomorrow
):
    # Given linkedin's row inserted 30 s ago
    declare(conn, workspace, settings, wall_date=tomorrow, wall_time="09:00")
    age_rows(conn, 30)
    linkedin = active_row(conn, "post-1", "linkedin")
    # When linkedin is removed from the intent
    result = declare(conn, workspace, settings, targets=("instagram", "facebook"),
                     wall_date=tomorrow, wall_time="09:00")  # fmt: skip
    # Then its row stays, and the reconciler will look again when it is two minutes old
    assert result.reconciled.skipped["age"] == 1
    assert result.reconciled.cancelled == 0
    assert active_row(conn, "post-1", "linkedin")["id"] == linkedin["id"]
    assert result.intent.recheck_at == linkedin["created_at"] + timedelta(seconds=120)
    # and a cron pass before then changes nothing
    assert reconcile_changed(conn, settings).intents == 0
    # When 100 s more pass (the row is 130 s old and the look-again time has come)
    age_rows(conn, 100)
    conn.execute("update schedule_intents set recheck_at = recheck_at - interval '100 seconds'")
    summary = reconcile_changed(conn, settings)
    # Then the cron cancels it
    assert summary.cancelled == 1
    [row] = rows_of(conn, "post-1", "linkedin")
    assert row["status"] == "cancelled"
    assert row["error_code"] == "withdrawn"
    assert {r["status"] for r in rows_of(conn, "post-1") if r["target_key"] != "linkedin"} == {
        "queued"
    }


def test_rows_minted_by_a_user_action_stay_when_the_intent_is_unscheduled(
    conn, workspace, settings, tomorrow, now
):
    # Given a post whose instagram row failed and was retried by an admin
    declare(conn, workspace, settings, targets=("instagram",), wall_date=tomorrow,
            wall_time="09:00")  # fmt: skip
    row = active_row(conn, "post-1", "instagram")
    assert store.claim(conn, "publish_post", [row["id"]], early_tolerance=2 * 86400)
    store.finalize(conn, [model.failed(row["id"], "provider_rejected", "400")])
    assert store.retry(conn, workspace, row["id"], settings).changed
    # and facebook sent now, linkedin scheduled directly through the API, for the same thing
    for target, source in (("facebook", "send_now"), ("linkedin", "api")):
        new = NewAction("publish_post", target, now, thing_id="post-1", source=source)
        scheduling.schedule(conn, workspace, new, settings, now)
    age_rows(conn, 600)
    # When the intent is unscheduled
    result = intents.unschedule_intent(conn, workspace, "post-1", settings)
    # Then all three stay: each was an explicit user action
    assert result.reconciled.cancelled == 0
    assert result.reconciled.skipped["user_action"] == 3
    assert sorted(a.target_key for a in result.active) == sorted(SOCIAL)
    assert active_row(conn, "post-1", "instagram")["manual_retries"] == 1


def test_a_submitted_row_is_never_touched(conn, workspace, settings, tomorrow):
    declare(conn, workspace, settings, targets=("instagram",), wall_date=tomorrow,
            wall_time="09:00")  # fmt: skip
    row = active_row(conn, "post-1", "instagram")
    assert store.claim(conn, "publish_post", [row["id"]], early_tolerance=2 * 86400)
    age_rows(conn, 600)
    moved = declare(conn, workspace, settings, targets=("instagram",), wall_date=tomorrow,
                    wall_time="10:30")  # fmt: skip
    unscheduled = intents.unschedule_intent(conn, workspace, "post-1", settings)
    assert moved.reconciled.skipped["in_flight"] == 1
    assert unscheduled.reconciled.skipped["in_flight"] == 1
    assert [r["status"] for r in rows_of(conn, "post-1")] == ["submitted"]


def test_a_user_cancelled_target_is_not_brought_back(conn, workspace, settings, tomorrow):
    declare(conn, workspace, settings, wall_date=tomorrow, wall_time="09:00")
    facebook = active_row(conn, "post-1", "facebook")
    assert store.cancel(conn, workspace, facebook["id"]).changed
    result = declare(conn, workspace, settings, wall_date=tomorrow, wall_time="10:30")
    assert result.reconciled.moved == 2
    assert result.reconciled.skipped["terminal_history"] == 1
    assert [r["status"] for r in rows_of(conn, "post-1", "facebook")] == ["cancelled"]


def test_a_recurring_schedule_naming_the_thing_is_not_the_intents_history(
    conn, workspace, settings, tomorrow
):
    # Given a weekly schedule that posts the same thing on instagram and has published once

    weekly = create_schedule(
        conn, workspace,
        NewSchedule("publish_post", "instagram", "FREQ=WEEKLY", "UTC", thing_id="post-1"),
        settings, utcnow(),
    )  # fmt: skip
    first = weekly.created[0]
    assert store.claim(conn, "publish_post", [first], early_tolerance=10**7)
    store.finalize(conn, [model.published(first, "p1")])
    # When the app declares an intent for that thing on all three platforms
    result = declare(conn, workspace, settings, wall_date=tomorrow, wall_time="09:00")
    # Then instagram is scheduled too: the schedule's occurrences are neither the intent's
    # history nor its rows
    assert result.reconciled.inserted == 3
    assert result.reconciled.skipped == dict.fromkeys(result.reconciled.skipped, 0)
    assert sorted(a.target_key for a in result.active) == sorted(SOCIAL)
    assert all(a.recurring_schedule_id is None for a in result.actions)


def test_an_unscheduled_then_rescheduled_intent_schedules_its_targets_again(
    conn, workspace, settings, tomorrow
):
    # The reconciler's own cancellations stand for the playbook's deletes: no terminal history.
    declare(conn, workspace, settings, wall_date=tomorrow, wall_time="09:00")
    age_rows(conn, 300)
    intents.unschedule_intent(conn, workspace, "post-1", settings)
    result = declare(conn, workspace, settings, wall_date=tomorrow, wall_time="09:00")
    assert result.reconciled.inserted == 3
    assert sorted(a.target_key for a in result.active) == sorted(SOCIAL)


def test_a_conflicting_insert_is_dropped_alone_and_counted(conn, workspace, settings, tomorrow):
    # Given a post for facebook
    at = datetime.combine(tomorrow, datetime.min.time(), UTC).replace(hour=9)
    declare(conn, workspace, settings, targets=("facebook",), publish_at=at)
    # and, in a transaction not yet committed, a row for instagram of the same thing made
    # through the API: the reconciler cannot see it when it reads the thing's rows
    inserted = threading.Event()
    dsn, reconciler = conn.info.dsn, conn.info.backend_pid

    def waits_on(blocker: int, watcher) -> bool:
        waits = "select %s = any(pg_blocking_pids(%s))"
        return bool(watcher.execute(waits, (blocker, reconciler)).fetchone()[0])

    def schedule_elsewhere() -> None:
        with connect(dsn) as watcher, connect(dsn) as other, other.transaction():
            other.execute(
                "insert into scheduled_actions (workspace_id, action_type, thing_id, target_key,"
                " publish_at, source) values (%s, 'publish_post', 'post-1', 'instagram', %s,"
                " 'api')",
                (workspace, at),
            )
            inserted.set()
            # committed once the reconciler's insert waits on this row's unique key
            wait_for(lambda: waits_on(other.info.backend_pid, watcher))

    writer = threading.Thread(target=schedule_elsewhere)
    writer.start()
    inserted.wait()
    # When instagram is added to the intent
    result = declare(conn, workspace, settings, targets=("facebook", "instagram"), publish_at=at)
    writer.join()
    # Then the 23505 drops only instagram's insert, and is counted; the pass goes on
    assert result.reconciled.conflicts == 1
    assert result.reconciled.inserted == 0
    assert [r["source"] for r in rows_of(conn, "post-1", "instagram")] == ["api"]
    assert [r["status"] for r in rows_of(conn, "post-1", "facebook")] == ["queued"]
    assert result.intent.recheck_at is not None  # looked at again later


# ---------------------------------------------------------------------- the cron pass


def test_the_cron_reconciles_changed_intents_once_and_sweeps_live_ones_later(
    conn, workspace, settings, tomorrow, now
):
    # Given an intent written without reconciling (as if the API's pass had failed)
    valid = validate_intent(
        IntentInput("publish_post", SOCIAL, wall_date=tomorrow, wall_time="09:00"),
        settings,
        "UTC",
        now,
    )
    with conn.transaction():
        write_intent(conn, workspace, "post-1", valid)
    assert count(conn, "scheduled_actions") == 0
    # When the cron runs
    first = reconcile_changed(conn, settings)
    # Then it schedules the targets; a second run has nothing to do
    assert (first.intents, first.inserted) == (1, 3)
    assert reconcile_changed(conn, settings).intents == 0
    # When a row disappears behind the reconciler's back and the sweep interval passes
    conn.execute("delete from scheduled_actions where target_key = 'linkedin'")
    conn.execute("update schedule_intents set recheck_at = now() - interval '1 second'")
    swept = reconcile_changed(conn, settings)
    # Then the periodic sweep repairs it
    assert (swept.intents, swept.inserted) == (1, 1)


def test_a_settled_intent_is_not_swept(conn, workspace, settings, tomorrow):
    declare(conn, workspace, settings, wall_date=tomorrow, wall_time="09:00")
    age_rows(conn, 300)
    result = intents.unschedule_intent(conn, workspace, "post-1", settings)
    assert result.intent.recheck_at is None
    assert reconcile_changed(conn, settings).intents == 0


# ----------------------------------------------------------------------- concurrency


def test_concurrent_reconcilers_make_no_duplicates_and_no_errors(
    conn, database_url, workspace, settings, tomorrow, now
):
    things = [f"post-{n}" for n in range(40)]

    def write_all(state: str, wall_time: str) -> None:
        given = IntentInput("publish_post", SOCIAL, wall_date=tomorrow, wall_time=wall_time,
                            state=state)  # fmt: skip
        valid = validate_intent(given, settings, "UTC", now)
        for thing in things:
            with conn.transaction():
                write_intent(conn, workspace, thing, valid)

    def race() -> ReconcileSummary:
        """Two cron passes and two API-style passes over every thing, all at once."""
        start = threading.Barrier(4)
        summaries: list[ReconcileSummary] = []
        errors: list[BaseException] = []

        def cron() -> None:
            with connect(database_url) as own:
                start.wait()
                summaries.append(reconcile_changed(own, settings))

        def api(order: list[str]) -> None:
            with connect(database_url) as own:
                start.wait()
                for thing in order:
                    summaries.append(reconcile_thing(own, workspace, thing, settings))

        def guarded(target, *args) -> None:
            try:
                target(*args)
            except BaseException as exc:  # collected and asserted below
                errors.append(exc)

        threads = [
            threading.Thread(target=guarded, args=(cron,)),
            threading.Thread(target=guarded, args=(cron,)),
            threading.Thread(target=guarded, args=(api, things)),
            threading.Thread(target=guarded, args=(api, things[::-1])),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        total = ReconcileSummary()
        for summary in summaries:
            total.add(summary)
        assert (total.conflicts, total.errors, total.invalid) == (0, 0, 0)
        return total

    def active_per_key() -> Counter[tuple[str, str]]:
        found = conn.execute(
            "select thing_id, target_key from scheduled_actions"
            " where status in ('queued', 'submitted')"
        ).fetchall()
        return Counter((thing, target) for thing, target in found)

    # Inserting: every (thing, target) exactly once
    write_all("scheduled", "09:00")
    assert race().inserted == 120
    assert count(conn, "scheduled_actions") == 120
    assert set(active_per_key().values()) == {1}
    # Moving: every row cancelled and replaced exactly once
    write_all("scheduled", "10:30")
    assert race().moved == 120
    assert count(conn, "scheduled_actions") == 240
    assert set(active_per_key().values()) == {1}
    # Withdrawing: every row cancelled exactly once
    age_rows(conn, 300)
    write_all("unscheduled", "10:30")
    assert race().cancelled == 120
    assert active_per_key() == Counter()


# ----------------------------------------------------------------------- the Lambda


def test_the_reconciler_handler_returns_its_summary_and_emits_metrics(
    monkeypatch, capsys, conn, workspace, settings, runtime, tomorrow, now
):
    valid = validate_intent(
        IntentInput("publish_post", SOCIAL, wall_date=tomorrow, wall_time="09:00"),
        settings,
        "UTC",
        now,
    )
    with conn.transaction():
        write_intent(conn, workspace, "post-1", valid)
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    runtime_slot.install(runtime)
    try:
        summary = load_handler("reconciler").handler({}, FakeLambdaContext(remaining_ms=60_000))
    finally:
        runtime_slot.install(None)
    assert summary["intents"] == 1
    assert summary["inserted"] == 3
    assert summary["skipped"]["terminal_history"] == 0
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    totals = next(b for b in blobs if "ReconcileInserted" in b)
    assert totals["ReconcileInserted"] == [3.0]
    assert totals["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Tickwork"
    gates = {b["gate"]: b["ReconcileSkipped"] for b in blobs if "gate" in b}
    assert set(gates) == {"terminal_history", "age", "user_action", "other_source",
                          "in_flight", "past"}  # fmt: skip
