"""The stats rollup (migrations 0015 and 0039, tickwork.rollup): counts by status and type
stay equal to a scan of every row through every transition, before and after the rollup
merges its deltas, per tenant, and what finished is counted in the ten minutes it finished
in."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from tests.conftest import REPO_ROOT, make_workspace
from tests.engine import seed
from tickwork import calendar, rollup
from tickwork.actions import model, store
from tickwork.platform import migrate
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection, connect
from tickwork.tenancy import tenant_transaction


def scanned(conn: Connection, workspace_id: UUID | None) -> list[dict[str, Any]]:
    """What /v1/stats answered before the rollup: a group by over every row."""
    return [
        {"status": status, "action_type": action_type, "count": count}
        for status, action_type, count in conn.execute(
            "select status, action_type, count(*) from scheduled_actions"
            " where %(ws)s::uuid is null or workspace_id = %(ws)s"
            " group by status, action_type order by status, action_type",
            {"ws": workspace_id},
        ).fetchall()
    ]


def scanned_needs_person(conn: Connection, workspace_id: UUID | None) -> dict[str, int]:
    stuck, ambiguous = conn.execute(
        "select count(*) filter (where error_code = 'stuck'),"
        "       count(*) filter (where error_code = 'ambiguous')"
        " from scheduled_actions where status = 'failed'"
        " and (%(ws)s::uuid is null or workspace_id = %(ws)s)",
        {"ws": workspace_id},
    ).fetchone()  # type: ignore[misc]
    return {"stuck": stuck, "ambiguous": ambiguous}


def check(conn: Connection, *workspaces: UUID) -> None:
    for workspace_id in (*workspaces, None):
        assert rollup.counts(conn, workspace_id) == scanned(conn, workspace_id), workspace_id
        needs = rollup.needs_person(conn, workspace_id)
        assert needs == scanned_needs_person(conn, workspace_id), workspace_id


def compact(conn: Connection) -> rollup.Compaction:
    return rollup.compact(conn)


def claim_and_finish(conn: Connection, ids: list[UUID], outcome: str) -> None:
    claimed = store.claim(conn, "log", ids, early_tolerance=5)
    assert len(claimed) == len(ids)
    if outcome == "published":
        results = [model.published(a.id, f"p-{a.id}") for a in claimed]
    elif outcome in ("failed", "stuck", "ambiguous"):
        code = "rejected" if outcome == "failed" else outcome
        results = [model.failed(a.id, code, "no") for a in claimed]
    else:
        soon = claimed[0].publish_at + timedelta(minutes=5)
        results = [model.requeued(a.id, soon, "later") for a in claimed]
    store.finalize(conn, results)


@pytest.fixture
def two_workspaces(conn: Connection) -> tuple[UUID, UUID]:
    return make_workspace(conn, "A"), make_workspace(conn, "B")


def test_counts_follow_every_transition_before_and_after_a_merge(conn, two_workspaces, now):
    a, b = two_workspaces
    due = seed(conn, a, 12, now - timedelta(seconds=1))
    seed(conn, a, 5, now + timedelta(days=3), action_type="webhook")
    seed(conn, b, 4, now - timedelta(seconds=1))
    check(conn, a, b)

    claim_and_finish(conn, due[:3], "published")
    claim_and_finish(conn, due[3:5], "failed")
    store.claim(conn, "log", due[5:7], early_tolerance=5)  # left submitted
    check(conn, a, b)

    compact(conn)
    # a's published (one delta: its wave's) and failed (two: a trigger's per row), one row each
    assert conn.execute(
        "select count(*) from action_finished_rows where workspace_id = %s", (a,)
    ).fetchone() == (2,)
    check(conn, a, b)

    # after the merge: more finish, one is retried for later, one is cancelled
    claim_and_finish(conn, due[7:9], "published")
    claim_and_finish(conn, due[9:10], "queued")  # submitted -> queued (a provider retry)
    assert store.cancel(conn, a, due[10]).changed
    check(conn, a, b)
    compact(conn)
    check(conn, a, b)


def test_a_retried_failure_counted_in_the_rollup_is_not_counted_twice(conn, two_workspaces, now):
    a, b = two_workspaces
    ids = seed(conn, a, 3, now - timedelta(seconds=1))
    claim_and_finish(conn, ids[:2], "ambiguous")
    claim_and_finish(conn, ids[2:], "stuck")
    compact(conn)  # the three failures are one merged row of action_finished_rows each
    assert rollup.needs_person(conn, a) == {"stuck": 1, "ambiguous": 2}
    settings = Settings(database_url="postgresql://unused")

    # failed -> queued (a manual retry) -> submitted -> published
    assert store.retry(conn, a, ids[0], settings).changed
    check(conn, a, b)
    counts = {(c["status"], c["action_type"]): c["count"] for c in rollup.counts(conn, a)}
    assert counts == {("failed", "log"): 2, ("queued", "log"): 1}
    claim_and_finish(conn, [ids[0]], "published")
    check(conn, a, b)
    compact(conn)
    check(conn, a, b)
    # and retried once more after a merge counted its second failure
    assert store.retry(conn, a, ids[1], settings).changed
    claim_and_finish(conn, [ids[1]], "stuck")
    compact(conn)
    assert rollup.needs_person(conn, a) == {"stuck": 2, "ambiguous": 0}
    assert store.retry(conn, a, ids[1], settings).changed
    check(conn, a, b)
    final = {(c["status"], c["action_type"]): c["count"] for c in rollup.counts(conn, a)}
    assert final == {("failed", "log"): 1, ("published", "log"): 1, ("queued", "log"): 1}


def test_a_finish_is_counted_in_its_own_transaction(conn, database_url, two_workspaces, now):
    a, b = two_workspaces
    ids = seed(conn, a, 2, now - timedelta(seconds=1))
    store.claim(conn, "log", ids, early_tolerance=5)
    with connect(database_url) as other, other.transaction():
        store.finalize(other, [model.published(ids[0], "p")])
        # not counted until it commits, as the row is not published until then
        check(conn, a, b)
        compact(conn)  # a merge meanwhile leaves the open transaction's delta to it
    check(conn, a, b)
    assert {(c["status"], c["count"]) for c in rollup.counts(conn, a)} >= {("published", 1)}


def test_what_finished_is_counted_in_its_ten_minutes(conn, two_workspaces, now):
    a, b = two_workspaces
    ids = seed(conn, a, 5, now - timedelta(seconds=1))
    claim_and_finish(conn, ids[:3], "published")
    claim_and_finish(conn, ids[3:4], "failed")
    assert store.cancel(conn, a, ids[4]).changed
    compact(conn)
    found = rollup.finished_between(
        conn, a, now - timedelta(minutes=10), now + timedelta(minutes=1)
    )
    assert {(f["status"], f["error_code"], f["count"]) for f in found} == {
        ("published", "", 3), ("failed", "rejected", 1), ("cancelled", "", 1)
    }  # fmt: skip
    # another workspace's, and an hour before, are not in it
    assert rollup.finished_between(conn, b, now - timedelta(minutes=10), now) == []
    earlier = now - timedelta(hours=1)
    assert rollup.finished_between(conn, a, earlier - timedelta(minutes=30), earlier) == []


def test_inserts_and_deletes_of_finished_rows_and_whole_workspaces(conn, two_workspaces, now):
    a, b = two_workspaces
    seed(conn, a, 4, now + timedelta(hours=1))
    compact(conn)
    # history inserted already finished, before and after a merge
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
        " status, submitted_at, finished_at)"
        " select %(ws)s, 'log', 'h' || g, %(at)s, 'published', %(at)s,"
        "        %(at)s + g * interval '1 hour'"
        " from generate_series(-2, 2) g",
        {"ws": a, "at": now - timedelta(days=1)},
    )
    check(conn, a, b)
    compact(conn)
    conn.execute("delete from scheduled_actions where target_key in ('h-2', 'h2', 't1')")
    check(conn, a, b)
    seed(conn, b, 2, now)
    conn.execute("delete from workspaces where id = %s", (a,))
    check(conn, b)
    assert conn.execute("select count(*) from action_type_rows where workspace_id = %s", (a,))
    conn.execute("truncate scheduled_actions cascade")
    check(conn, b)
    assert rollup.counts(conn, None) == []


def test_the_rollup_merges_its_deltas(conn, two_workspaces, now):
    a, b = two_workspaces

    def rows_in(table: str) -> int:
        return conn.execute(f"select count(*) from {table}").fetchone()[0]  # type: ignore[index]

    for _ in range(5):
        seed(conn, a, 2, now + timedelta(hours=1))
    ids = seed(conn, b, 3, now - timedelta(seconds=1))
    assert rows_in("action_type_rows") == 6  # one delta per insert statement and type
    claim_and_finish(conn, ids, "failed")
    compact(conn)
    assert rows_in("action_type_rows") == 2
    assert rows_in("action_finished_rows") == 1
    for i in ids:
        assert store.retry(conn, b, i, Settings(database_url="postgresql://unused")).changed
    assert rows_in("action_finished_rows") == 4  # -1 for each failure retried
    check(conn, a, b)
    compact(conn)
    # b's three failures and their three reversals cancel out: no row is left for them
    assert rows_in("action_finished_rows") == 0
    check(conn, a, b)


def test_the_api_role_sees_only_its_workspace_rollup(conn, two_workspaces, now):
    a, b = two_workspaces
    seed(conn, a, 3, now + timedelta(hours=1))
    ids = seed(conn, b, 2, now - timedelta(seconds=1))
    claim_and_finish(conn, ids, "published")
    compact(conn)
    with tenant_transaction(conn, a):
        assert conn.execute("select workspace_id, n from action_type_rows").fetchall() == [(a, 3)]
        assert conn.execute("select * from action_finished_rows").fetchall() == []
        found = calendar.stats(conn, a)
        # the API role inserts and cancels through the triggers
        assert store.cancel(conn, a, seed(conn, a, 1, now + timedelta(hours=2))[0]).changed
        after = calendar.stats(conn, a)
    assert found.counts == [{"status": "queued", "action_type": "log", "count": 3}]
    assert after.counts == [
        {"status": "cancelled", "action_type": "log", "count": 1},
        {"status": "queued", "action_type": "log", "count": 3},
    ]
    check(conn, a, b)


def test_rows_there_before_the_migration_are_counted(empty_database_url, tmp_path, now):
    earlier = tmp_path / "migrations"
    earlier.mkdir()
    for path in sorted((REPO_ROOT / "migrations").glob("*.sql")):
        if path.name < "0015":
            shutil.copy(path, earlier / path.name)
    migrate.migrate(empty_database_url, Path(earlier))
    with connect(empty_database_url) as conn:
        a = make_workspace(conn, "A")
        seed(conn, a, 3, now + timedelta(hours=1))
        conn.execute(
            "update scheduled_actions set status = 'cancelled', finished_at = now()"
            " where target_key = 't1'"
        )
    migrate.migrate(empty_database_url)
    with connect(empty_database_url) as conn:
        check(conn, a)
        compact(conn)
        check(conn, a)
