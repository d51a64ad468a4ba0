"""Retention (tickwork.engine.retention, docs/retention.md): finished rows older than their
workspace's retention are archived (round trip byte for byte) and then removed with what
hangs on them; anything pending, referred to by something live, younger, or under legal
hold stays; a crash between archive and delete loses nothing and a re-run is idempotent.

The clock is the test's: `run_retention(now=...)` takes the instant it measures ages from,
and the rows' times are set relative to it."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import boto3
import pytest
from moto import mock_aws

from tests.conftest import make_workspace
from tickwork.engine import retention
from tickwork.engine.retention import KINDS, data_key, manifest_key, run_retention
from tickwork.platform.archive import ArchiveError, FolderArchiveStore, S3ArchiveStore
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection, connect
from tickwork.platform.sql import query

DAY = timedelta(days=1)


def action(
    conn: Connection,
    workspace_id: UUID,
    *,
    status: str,
    finished_ago: timedelta | None,
    now: datetime,
    due_ago: timedelta | None = None,
    rescheduled_from: UUID | None = None,
    source: str = "api",
) -> UUID:
    finished_at = now - finished_ago if finished_ago is not None else None
    publish_at = now - (due_ago if due_ago is not None else (finished_ago or DAY))
    row = conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, payload,"
        " publish_at, status, finished_at, submitted_at, rescheduled_from, source,"
        " error_code)"
        " values (%(ws)s, 'log', 't', '{\"text\": \"hello\", \"n\": 1.50}', %(publish_at)s,"
        "         %(status)s, %(finished_at)s,"
        "         case when %(status)s in ('submitted', 'published') then %(publish_at)s end,"
        "         %(from)s, %(source)s,"
        "         case when %(status)s = 'failed' then 'provider_rejected' end)"
        " returning id",
        {"ws": workspace_id, "publish_at": publish_at, "status": status,
         "finished_at": finished_at, "from": rescheduled_from, "source": source},
    ).fetchone()  # fmt: skip
    assert row is not None
    return UUID(str(row[0]))


def attempt_and_change(conn: Connection, workspace_id: UUID, action_id: UUID) -> None:
    conn.execute(
        "insert into action_attempts (action_id, attempt, workspace_id, started_at,"
        " finished_at, latency_ms, outcome, provider_code, excerpt)"
        " select id, 1, workspace_id, publish_at, publish_at + interval '120 ms', 120,"
        "        'delivered', '200', 'ok ü' from scheduled_actions where id = %s",
        (action_id,),
    )
    conn.execute(
        "insert into action_changes (workspace_id, action_id, kind, actor, reason)"
        " values (%s, %s, 'defer', 'tester', 'quiet hours')",
        (workspace_id, action_id),
    )


def digest(conn: Connection, workspace_id: UUID, action_id: UUID, status: str, n: int) -> UUID:
    row = conn.execute(
        "insert into digests (workspace_id, source, source_id, target_key, digest_key,"
        " group_key, status, time_window, opened_at, closes_at, item_count, action_id)"
        " values (%s, 'rule', gen_random_uuid(), 't', 'k', repeat('a', 64), %s,"
        "         '{\"seconds\": 60}', now(), now(), %s, %s) returning id, source_id",
        (workspace_id, status, n, action_id),
    ).fetchone()
    assert row is not None
    for position in range(1, n + 1):
        conn.execute(
            "insert into digest_items (digest_id, workspace_id, source, source_id, group_key,"
            " item_key, position, data, occurred_at)"
            " values (%s, %s, 'rule', %s, repeat('a', 64), %s, %s, '{\"x\": 1}', now())",
            (row[0], workspace_id, row[1], f"item-{position}", position),
        )
    return UUID(str(row[0]))


def as_json(conn: Connection, table: str, where: str, ids: list[UUID]) -> list[str]:
    """Rows as Postgres writes them as JSON: what the archive must hold, byte for byte."""
    return [
        r[0]
        for r in conn.execute(
            f"select to_jsonb(t)::text from {table} t where {where} = any(%s::uuid[]) order by 1",
            (ids,),
        ).fetchall()
    ]


def count(conn: Connection, table: str, where: str, ids: list[UUID]) -> int:
    row = conn.execute(
        f"select count(*) from {table} where {where} = any(%s::uuid[])",
        (ids,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def archived_lines(root: Path, kind: str) -> list[str]:
    lines: list[str] = []
    for path in sorted((root / kind).rglob("*.jsonl.gz")):
        lines.extend(gzip.decompress(path.read_bytes()).decode("utf-8").splitlines())
    return sorted(lines)


@pytest.fixture
def thirty_days(database_url: str) -> Settings:
    return Settings(database_url=database_url, retention_days=30)


@pytest.fixture
def store(tmp_path: Path) -> FolderArchiveStore:
    return FolderArchiveStore(tmp_path / "archive")


def test_old_finished_rows_are_archived_then_removed_with_their_children_and_nothing_else(
    conn: Connection, thirty_days: Settings, store: FolderArchiveStore, now: datetime
) -> None:
    # Given a workspace with 30-day retention (the stack's) and rows of every kind
    ws = make_workspace(conn)
    old = [
        action(conn, ws, status="published", finished_ago=31 * DAY, now=now),
        action(conn, ws, status="failed", finished_ago=40 * DAY, now=now),
        action(conn, ws, status="cancelled", finished_ago=35 * DAY, now=now),
    ]
    for action_id in old:
        attempt_and_change(conn, ws, action_id)
    sent_digest = digest(conn, ws, old[0], "closed", 3)
    young = action(conn, ws, status="published", finished_ago=29 * DAY, now=now)
    queued_old = action(conn, ws, status="queued", finished_ago=None, due_ago=400 * DAY, now=now)
    claimed_old = action(conn, ws, status="submitted", finished_ago=None, due_ago=90 * DAY,
                         now=now)  # fmt: skip
    # cancelled long ago, but due next week: its time is not old, so it stays
    cancelled_early = action(conn, ws, status="cancelled", finished_ago=60 * DAY,
                             due_ago=-7 * DAY, now=now)  # fmt: skip
    # an old row a live row was rescheduled from (the lineage) stays while that row does
    parent = action(conn, ws, status="cancelled", finished_ago=50 * DAY, now=now)
    child = action(conn, ws, status="queued", finished_ago=None, due_ago=-DAY, now=now,
                   rescheduled_from=parent)  # fmt: skip
    # an enrollment still running refers to its old step
    campaign = conn.execute(
        "insert into campaigns (workspace_id, name, steps) values (%s, 'c', '[{}]') returning id",
        (ws,),
    ).fetchone()
    conn.execute("insert into recipients (workspace_id, recipient_id, timezone)"
                 " values (%s, 'r1', 'UTC')", (ws,))  # fmt: skip
    step = action(conn, ws, status="published", finished_ago=50 * DAY, now=now, source="drip")
    assert campaign is not None
    conn.execute(
        "insert into enrollments (workspace_id, campaign_id, recipient_id, starts_at,"
        " current_action_id) values (%s, %s, 'r1', now(), %s)",
        (ws, campaign[0], step),
    )
    expected = {
        "actions": as_json(conn, "scheduled_actions", "id", old),
        "attempts": as_json(conn, "action_attempts", "action_id", old),
        "changes": as_json(conn, "action_changes", "action_id", old),
        "digests": as_json(conn, "digests", "action_id", old),
        "digest_items": as_json(conn, "digest_items", "digest_id", [sent_digest]),
    }
    assert len(expected["digest_items"]) == 3

    # When the retention runs
    done = run_retention(conn, thirty_days, store, now=now)

    # Then the old finished rows and what hangs on them are gone, archived line for line
    assert (done.removed, done.left) == (3, 0), done.as_dict()
    assert count(conn, "scheduled_actions", "id", old) == 0
    assert count(conn, "action_attempts", "action_id", old) == 0
    assert count(conn, "action_changes", "action_id", old) == 0
    assert count(conn, "digests", "id", [sent_digest]) == 0
    assert count(conn, "digest_items", "digest_id", [sent_digest]) == 0
    for kind, lines in expected.items():
        assert archived_lines(store.root, kind) == sorted(lines), kind
    # and everything else is untouched
    kept = [young, queued_old, claimed_old, cancelled_early, parent, child, step]
    assert count(conn, "scheduled_actions", "id", kept) == len(kept)
    # the round trip: each archived action goes back into the table as it was
    line = expected["actions"][0]
    row = conn.execute(
        "select (jsonb_populate_record(null::scheduled_actions, %s::jsonb)).id", (line,)
    ).fetchone()
    assert row is not None
    assert str(row[0]) == json.loads(line)["id"]


def test_each_part_has_a_manifest_with_counts_checksums_and_time_range(
    conn: Connection, thirty_days: Settings, store: FolderArchiveStore, now: datetime
) -> None:
    ws = make_workspace(conn)
    ids = [action(conn, ws, status="published", finished_ago=31 * DAY, now=now)
           for _ in range(3)]  # fmt: skip
    for action_id in ids:
        attempt_and_change(conn, ws, action_id)
    finished = conn.execute("select min(finished_at) from scheduled_actions").fetchone()
    assert finished is not None

    run_retention(conn, thirty_days, store, now=now)

    manifests = list((store.root / "manifests").rglob("*.json"))
    assert len(manifests) == 1
    manifest = json.loads(manifests[0].read_text())
    assert manifest["workspace_id"] == str(ws)
    assert manifest["day"] == finished[0].date().isoformat()
    assert manifest["counts"]["actions"] == 3
    assert manifest["counts"]["attempts"] == 3
    assert datetime.fromisoformat(manifest["finished_from"]) == finished[0]
    rows = retention.read_part(store, manifest)  # checks every file against its checksum
    assert sorted(r["id"] for r in rows["actions"]) == sorted(str(i) for i in ids)
    assert set(rows) == set(KINDS)
    # a file changed after it was written no longer matches its manifest
    key = manifest["files"]["actions"]["key"]
    store.put(key, gzip.compress(b'{"id": "forged"}\n'), "application/gzip")
    with pytest.raises(ArchiveError):
        retention.read_part(store, manifest)


def test_a_workspace_override_and_legal_hold(
    conn: Connection, thirty_days: Settings, store: FolderArchiveStore, now: datetime
) -> None:
    # Given three workspaces: the stack's 30 days, their own 60 days, and one on legal hold
    stack = make_workspace(conn, "stack")
    longer = make_workspace(conn, "longer")
    held = make_workspace(conn, "held")
    conn.execute("update workspaces set retention_days = 60 where id = %s", (longer,))
    conn.execute("update workspaces set legal_hold = true where id = %s", (held,))
    rows = {
        ws: [
            action(conn, ws, status="published", finished_ago=days * DAY, now=now)
            for days in (31, 61, 400)
        ]
        for ws in (stack, longer, held)
    }

    done = run_retention(conn, thirty_days, store, now=now)

    assert count(conn, "scheduled_actions", "id", rows[stack]) == 0
    assert count(conn, "scheduled_actions", "id", rows[longer]) == 1  # 31 days old stays
    assert count(conn, "scheduled_actions", "id", rows[held]) == 3  # the hold keeps all
    assert done.removed == 5
    # lifting the hold lets the next run remove them
    conn.execute("update workspaces set legal_hold = false where id = %s", (held,))
    assert run_retention(conn, thirty_days, store, now=now).removed == 3


def test_a_hold_set_after_the_archive_was_written_stops_the_delete(
    conn: Connection, thirty_days: Settings, store: FolderArchiveStore, now: datetime,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    ws = make_workspace(conn)
    ids = [action(conn, ws, status="published", finished_ago=31 * DAY, now=now)]
    real_write = retention.write_part

    def write_then_hold(*args: Any, **kwargs: Any) -> dict[str, Any]:
        written = real_write(*args, **kwargs)
        conn.execute("update workspaces set legal_hold = true where id = %s", (ws,))
        return written

    monkeypatch.setattr(retention, "write_part", write_then_hold)
    done = run_retention(conn, thirty_days, store, now=now)

    assert done.removed == 0
    assert done.left == 1
    assert count(conn, "scheduled_actions", "id", ids) == 1
    # and the part it had written is gone again: the archive holds only what was removed
    assert not list(store.root.rglob("*.jsonl.gz"))


def enrollment(conn: Connection, workspace_id: UUID, step: UUID, status: str) -> UUID:
    campaign = conn.execute(
        "insert into campaigns (workspace_id, name, steps) values (%s, %s, '[{}]') returning id",
        (workspace_id, f"c-{step}"),
    ).fetchone()
    assert campaign is not None
    conn.execute("insert into recipients (workspace_id, recipient_id, timezone)"
                 " values (%s, %s, 'UTC') on conflict do nothing",
                 (workspace_id, f"r-{step}"))  # fmt: skip
    row = conn.execute(
        "insert into enrollments (workspace_id, campaign_id, recipient_id, starts_at,"
        " current_action_id, status, completed_at, exited_at)"
        " values (%s, %s, %s, now(), %s, %s,"
        "         case when %s = 'completed' then now() end,"
        "         case when %s = 'exited' then now() end) returning id",
        (workspace_id, campaign[0], f"r-{step}", step, status, status, status),
    ).fetchone()
    assert row is not None
    return UUID(str(row[0]))


def test_a_finished_enrollments_last_step_leaves_and_the_enrollment_stays(
    conn: Connection, thirty_days: Settings, store: FolderArchiveStore, now: datetime
) -> None:
    # Given old sent drip steps: one the current step of a completed enrollment, one of an
    # exited one, one of an enrollment still running
    ws = make_workspace(conn)
    steps = {
        status: action(conn, ws, status="published", finished_ago=40 * DAY, now=now, source="drip")
        for status in ("completed", "exited", "active")
    }
    enrolled = {status: enrollment(conn, ws, step, status) for status, step in steps.items()}
    # When the retention runs
    done = run_retention(conn, thirty_days, store, now=now)
    # Then the finished enrollments' steps left, archived; the running one's stayed
    assert done.removed == 2, done.as_dict()
    assert count(conn, "scheduled_actions", "id", [steps["completed"], steps["exited"]]) == 0
    assert count(conn, "scheduled_actions", "id", [steps["active"]]) == 1
    assert len(archived_lines(store.root, "actions")) == 2
    # and every enrollment is still there, the finished ones no longer pointing at a step
    current = dict(conn.execute(
        "select status, current_action_id from enrollments where id = any(%s)",
        (list(enrolled.values()),),
    ).fetchall())  # fmt: skip
    assert current == {"completed": None, "exited": None, "active": steps["active"]}


def test_a_finished_actions_digest_leaves_with_it_even_if_its_row_still_says_open(
    conn: Connection, thirty_days: Settings, store: FolderArchiveStore, now: datetime
) -> None:
    # Given an old sent digest action whose digest row still says open (no next item of its
    # group came to close it): it collects no more, its action having been sent
    ws = make_workspace(conn)
    sent = action(conn, ws, status="published", finished_ago=45 * DAY, now=now)
    last = digest(conn, ws, sent, "open", 2)
    expected = as_json(conn, "digests", "id", [last])
    done = run_retention(conn, thirty_days, store, now=now)
    assert done.removed == 1, done.as_dict()
    assert count(conn, "digests", "id", [last]) == 0
    assert count(conn, "digest_items", "digest_id", [last]) == 0
    assert archived_lines(store.root, "digests") == expected
    assert len(archived_lines(store.root, "digest_items")) == 2


def failed_ambiguous(conn: Connection, workspace_id: UUID, now: datetime) -> UUID:
    action_id = action(conn, workspace_id, status="failed", finished_ago=31 * DAY, now=now)
    conn.execute(
        "update scheduled_actions set error_code = 'ambiguous', attempt_count = 1 where id = %s",
        (action_id,),
    )
    return action_id


def record_a_bounce(conn: Connection, workspace_id: UUID, action_id: UUID) -> None:
    recorded = conn.execute(query("record_delivery"), {
        "action_id": action_id, "attempt": 1, "workspace_id": workspace_id,
        "status": "bounced", "bounce": "hard", "rank": 5, "at": None, "detail": "550",
    }).fetchone()  # fmt: skip
    assert recorded is not None


def resolve_unresolved(conn: Connection, workspace_id: UUID, action_id: UUID) -> None:
    noted = conn.execute(query("resolve_unresolved"), {
        "id": action_id, "workspace_id": workspace_id, "expected_code": "ambiguous",
        "attempt": 1, "detail": "the provider could not tell",
    }).fetchone()  # fmt: skip
    assert noted is not None


@pytest.mark.parametrize("change", ["delivery callback", "resolver verdict"])
def test_a_row_whose_history_changes_after_its_archive_waits_for_the_next_run(
    conn: Connection, thirty_days: Settings, store: FolderArchiveStore, now: datetime,
    monkeypatch: pytest.MonkeyPatch, change: str,
) -> None:  # fmt: skip
    # Given an old row, and a change to its ledger entry that lands after the archive of it
    # was written and before its delete
    ws = make_workspace(conn)
    if change == "delivery callback":
        changed = action(conn, ws, status="published", finished_ago=31 * DAY, now=now)
        conn.execute("update scheduled_actions set attempt_count = 1 where id = %s", (changed,))
    else:
        changed = failed_ambiguous(conn, ws, now)
    other = action(conn, ws, status="published", finished_ago=32 * DAY, now=now)
    real_write = retention.write_part
    changes = iter([changed])

    def write_then_change(*args: Any, **kwargs: Any) -> dict[str, Any]:
        written = real_write(*args, **kwargs)
        for action_id in changes:  # once, on the first write
            if change == "delivery callback":
                record_a_bounce(conn, ws, action_id)
            else:
                resolve_unresolved(conn, ws, action_id)
        return written

    monkeypatch.setattr(retention, "write_part", write_then_change)
    # When the retention runs
    first = run_retention(conn, thirty_days, store, now=now)
    # Then the changed row stays, and its stale lines are not in the archive
    assert (first.removed, first.left) == (1, 1), first.as_dict()
    assert count(conn, "scheduled_actions", "id", [changed]) == 1
    assert [json.loads(line)["id"] for line in archived_lines(store.root, "actions")] == [
        str(other)]  # fmt: skip
    assert archived_lines(store.root, "attempts") == []
    # and the next run archives it as it now is, its ledger entry with it
    attempts = as_json(conn, "action_attempts", "action_id", [changed])
    assert len(attempts) == 1
    second = run_retention(conn, thirty_days, store, now=now)
    assert second.removed == 1, second.as_dict()
    assert archived_lines(store.root, "attempts") == attempts


def test_a_crash_between_archive_and_delete_loses_nothing_and_a_rerun_is_idempotent(
    conn: Connection, thirty_days: Settings, store: FolderArchiveStore, now: datetime,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    ws = make_workspace(conn)
    ids = [action(conn, ws, status="published", finished_ago=31 * DAY, now=now)
           for _ in range(4)]  # fmt: skip
    expected = as_json(conn, "scheduled_actions", "id", ids)

    def crash(*args: Any, **kwargs: Any) -> set[UUID]:
        raise SystemExit("the Lambda's time ran out")

    monkeypatch.setattr(retention, "_remove", crash)
    with pytest.raises(SystemExit):
        run_retention(conn, thirty_days, store, now=now)
    # the archive was written, the rows are all still there
    assert count(conn, "scheduled_actions", "id", ids) == 4
    first = sorted((store.root / "actions").rglob("*.jsonl.gz"))
    assert archived_lines(store.root, "actions") == sorted(expected)

    monkeypatch.undo()
    done = run_retention(conn, thirty_days, store, now=now)

    # the same keys, overwritten with the same rows; now removed
    assert sorted((store.root / "actions").rglob("*.jsonl.gz")) == first
    assert archived_lines(store.root, "actions") == sorted(expected)
    assert done.removed == 4
    assert count(conn, "scheduled_actions", "id", ids) == 0
    # and a third run finds nothing to do
    assert run_retention(conn, thirty_days, store, now=now).removed == 0
    assert archived_lines(store.root, "actions") == sorted(expected)


def test_removal_works_in_bounded_batches_and_stops_at_its_budget(
    conn: Connection, database_url: str, store: FolderArchiveStore, now: datetime
) -> None:
    ws = make_workspace(conn)
    for days in range(31, 31 + 25):
        action(conn, ws, status="published", finished_ago=days * DAY, now=now)
    settings = Settings(database_url=database_url, retention_days=30, retention_batch_size=10)

    done = run_retention(conn, settings, store, now=now)
    assert done.batches == 3
    assert done.removed == 25
    # one part per day
    assert len(list((store.root / "manifests").rglob("*.json"))) == 25

    for days in range(31, 41):
        action(conn, ws, status="published", finished_ago=days * DAY, now=now)
    ticks = iter([0.0, 0.0, 1e9])  # the budget ends after the first batch
    stopped = run_retention(conn, settings, store, now=now, clock=lambda: next(ticks))
    assert stopped.out_of_budget
    assert stopped.removed == 10


def test_a_row_another_transaction_holds_is_skipped_not_waited_for(
    conn: Connection, database_url: str, thirty_days: Settings, store: FolderArchiveStore,
    now: datetime,
) -> None:  # fmt: skip
    ws = make_workspace(conn)
    held = action(conn, ws, status="failed", finished_ago=31 * DAY, now=now)
    free = action(conn, ws, status="failed", finished_ago=32 * DAY, now=now)
    locked = threading.Event()
    release = threading.Event()

    def hold_the_row() -> None:  # as an admin's retry would, mid-transaction
        with connect(database_url) as other, other.transaction():
            other.execute("select 1 from scheduled_actions where id = %s for update", (held,))
            locked.set()
            release.wait(10)

    holder = threading.Thread(target=hold_the_row)
    holder.start()
    try:
        assert locked.wait(10)
        done = run_retention(conn, thirty_days, store, now=now)
    finally:
        release.set()
        holder.join()
    assert done.removed == 1
    assert done.left == 1
    assert count(conn, "scheduled_actions", "id", [held]) == 1
    assert count(conn, "scheduled_actions", "id", [free]) == 0
    # the archive holds only the row removed
    assert [json.loads(line)["id"] for line in archived_lines(store.root, "actions")] == [str(free)]
    # and once the row is free, the next run archives it beside, not over, the first part
    assert run_retention(conn, thirty_days, store, now=now).removed == 1
    archived = [json.loads(line)["id"] for line in archived_lines(store.root, "actions")]
    assert sorted(archived) == sorted([str(free), str(held)])
    assert len(list((store.root / "manifests").rglob("*.json"))) == 2


def test_no_archive_means_nothing_is_removed(
    conn: Connection, thirty_days: Settings, now: datetime
) -> None:
    ws = make_workspace(conn)
    ids = [action(conn, ws, status="published", finished_ago=400 * DAY, now=now)]
    done = run_retention(conn, thirty_days, None, now=now)
    assert done.skipped_reason == "no_archive"
    assert count(conn, "scheduled_actions", "id", ids) == 1


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="tickwork-archive")
        yield client


def test_the_archive_goes_to_the_stacks_bucket(
    conn: Connection, thirty_days: Settings, now: datetime, s3: Any
) -> None:
    ws = make_workspace(conn)
    ids = [action(conn, ws, status="published", finished_ago=31 * DAY, now=now)
           for _ in range(2)]  # fmt: skip
    for action_id in ids:
        attempt_and_change(conn, ws, action_id)
    expected = as_json(conn, "scheduled_actions", "id", ids)
    store = S3ArchiveStore("tickwork-archive", "archive/", client=s3)

    done = run_retention(conn, thirty_days, store, now=now)

    assert done.removed == 2
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="tickwork-archive")["Contents"])
    manifests = [k for k in keys if k.startswith("archive/manifests/")]
    assert len(manifests) == 1
    manifest = json.loads(s3.get_object(Bucket="tickwork-archive", Key=manifests[0])["Body"].read())
    day, part = manifest["day"], manifest["part"]
    assert manifests[0] == "archive/" + manifest_key(ws, datetime.fromisoformat(day).date(), part)
    actions_key = "archive/" + data_key("actions", ws, datetime.fromisoformat(day).date(), part)
    assert actions_key in keys
    body = s3.get_object(Bucket="tickwork-archive", Key=actions_key)["Body"].read()
    assert sorted(gzip.decompress(body).decode().splitlines()) == sorted(expected)
    assert len(retention.read_part(store, manifest)["attempts"]) == 2
