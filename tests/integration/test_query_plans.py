"""Hot queries use their indexes, checked with EXPLAIN on a realistically sized table."""

from __future__ import annotations

import contextlib
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest
from psycopg import sql

from tickwork.actions.model import Attempt, Finalization
from tickwork.actions.store import attempt_columns
from tickwork.platform.queues.enqueue import WATERMARK_START, finish_pass, take_due, unmark
from tickwork.platform.sql import query


def plan_of(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> dict[str, Any]:
    # A client-side cursor inlines the parameters, so the planner sees real values.
    with psycopg.ClientCursor(conn) as cur:
        cur.execute("explain (format json) " + sql, params)  # type: ignore[operator]
        return cur.fetchone()[0][0]["Plan"]  # type: ignore[index]


def index_scans(plan: dict[str, Any]) -> set[str]:
    found = set()
    if plan.get("Node Type", "").startswith(("Index", "Bitmap Index")):
        found.add(plan["Index Name"])
    for child in plan.get("Plans", []):
        found |= index_scans(child)
    return found


def node_types(plan: dict[str, Any]) -> list[str]:
    return [plan.get("Node Type", "")] + [t for c in plan.get("Plans", []) for t in node_types(c)]


def seq_scans(plan: dict[str, Any]) -> set[str]:
    found = {plan["Relation Name"]} if plan.get("Node Type") == "Seq Scan" else set()
    for child in plan.get("Plans", []):
        found |= seq_scans(child)
    return found


# The tables the hot plans below read. Each is filled with its realistic share of rows and
# analyzed by the fixture, so a plan never rests on statistics an earlier test left behind
# (a truncate keeps them): the plans asserted are those of a table in service.
HOT_TABLES = ("scheduled_actions", "action_queue", "action_attempts", "event_endpoints")


def load_history(conn: psycopg.Connection[Any], workspace: UUID, now: datetime) -> None:
    """Finished rows and their ledger, as a table in service holds them: 20k finished rows,
    a refused or transient call recorded for one in four, a stuck one for one in a hundred
    (a published call is recorded by its row alone, migration 0016)."""
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
        " status, attempt_count, submitted_at, finished_at, error_code)"
        " select %(ws)s, 'webhook', 'done', %(now)s - g * interval '1 second',"
        "        case when g %% 10 = 0 then 'failed' else 'published' end, 1 + g %% 4 / 3,"
        "        %(now)s - g * interval '1 second', %(now)s - g * interval '1 second',"
        "        case when g %% 10 = 0 then 'provider_rejected' end"
        " from generate_series(1, 20000) g",
        {"ws": workspace, "now": now - timedelta(days=1)},
    )
    conn.execute(
        "insert into action_attempts (action_id, attempt, workspace_id, started_at,"
        " finished_at, latency_ms, outcome)"
        " select id, 1, workspace_id, finished_at, finished_at, 80,"
        "        case when n % 100 = 1 then 'stuck' when n % 8 = 0 then 'rejected'"
        "             else 'transient' end"
        " from (select id, workspace_id, finished_at, row_number() over () as n"
        "       from scheduled_actions where target_key = 'done') r"
        " where n % 4 = 0 or n % 100 = 1",
    )


def load_big_table(conn: psycopg.Connection[Any], workspace: UUID, now: datetime) -> None:
    """100k rows due in the future, 100 due now, plus finished history and its ledger, and
    20 other workspaces' 100 rows each due in the future; every hot table analyzed."""
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %(ws)s, 'webhook', 't', %(now)s + g * interval '1 second'"
        " from generate_series(1, 100000) g",
        {"ws": workspace, "now": now + timedelta(hours=1)},
    )
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %(ws)s, 'webhook', 'due', %(now)s - g * interval '1 second'"
        " from generate_series(1, 100) g",
        {"ws": workspace, "now": now},
    )
    # Other workspaces' rows, as in any deployment with more than one
    conn.execute(
        "with others as (insert into workspaces (name)"
        "                select 'other ' || g from generate_series(1, 20) g returning id)"
        " insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select o.id, 'webhook', 't', %(now)s + g * interval '1 second'"
        " from others o, generate_series(1, 100) g",
        {"now": now + timedelta(hours=1)},
    )
    load_history(conn, workspace, now)
    for table in HOT_TABLES:
        conn.execute(sql.SQL("analyze {}").format(sql.Identifier(table)))


@pytest.fixture
def big_table(conn, workspace, now):
    load_big_table(conn, workspace, now)
    return now


def test_the_tick_pass_reads_a_range_of_the_queues_due_index(conn, big_table):

    for after_due, after_id in (WATERMARK_START, (big_table - timedelta(seconds=50), UUID(int=0))):
        plan = plan_of(
            conn,
            query("due_after_watermark"),
            {"action_type": "webhook", "horizon": big_table, "batch_size": 500,
             "after_due": after_due, "after_id": after_id},
        )  # fmt: skip
        shown = json.dumps(plan, indent=1)
        assert index_scans(plan) == {"ix_action_queue_due"}, shown
        assert not seq_scans(plan), shown
        # The type, the watermark and the horizon bound the walk: a range, not a filter
        walk = index_node(plan, "ix_action_queue_due")
        assert "ROW(due_at, id) >" in walk["Index Cond"], shown
        assert "due_at <=" in walk["Index Cond"], shown
        assert "Sort" not in node_types(plan), shown
    unsent = plan_of(
        conn,
        query("unsent_due"),
        {"action_type": "webhook", "horizon": big_table, "batch_size": 500},
    )
    assert index_scans(unsent) == {"ix_action_queue_unsent"}, json.dumps(unsent, indent=1)


def test_the_tick_pass_takes_only_the_due_rows(conn, big_table):

    taken = take_due(conn, "webhook", big_table, batch_size=500)
    assert taken is not None
    assert len(taken.rows) == 100


def test_each_pass_starts_after_the_rows_the_last_one_took(conn, big_table):

    first = take_due(conn, "webhook", big_table, batch_size=60)
    assert first is not None
    finish_pass(conn, first, set())
    # A row of the first pass handed back (its message could not be acted on) is behind the
    # watermark: the next pass takes it again, with the rows after the watermark.
    unmark(conn, [(first.after[0].id, first.after[0].due_at)])
    second = take_due(conn, "webhook", big_table, batch_size=60)
    assert second is not None
    finish_pass(conn, second, set())
    assert len(first.after) == 60
    assert [r.id for r in second.unsent] == [first.after[0].id]
    assert len(second.after) == 40
    assert not {r.id for r in first.after} & {r.id for r in second.after}
    third = take_due(conn, "webhook", big_table, batch_size=60)
    assert third is not None
    assert third.rows == []


def claim_and_finalize_plans(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """The plans of a wave's claim and finalizes, 500 rows, amid a burst in flight."""
    # Given a burst in flight: many rows already submitted by other dispatchers
    conn.execute(
        "update scheduled_actions set status = 'submitted', submitted_at = now(),"
        " attempt_count = 1 where id in"
        " (select id from scheduled_actions where status = 'queued' limit 3000)"
    )
    ids = [
        row[0]
        for row in conn.execute(
            "select id from scheduled_actions where status = 'submitted' limit 500"
        )
    ]
    n = len(ids)
    claim = plan_of(
        conn,
        query("claim_actions"),
        {
            "ids": ids,
            "action_type": "webhook",
            "early_tolerance": 0.5,
            "max_lateness": None,
            "reclaim_after": 120,
            "route_provider": None,
        },
    )
    finalize = plan_of(
        conn,
        query("finalize_actions"),
        {"ids": ids, "statuses": ["published"] * n, "provider_ids": ["p"] * n,
         "error_codes": [None] * n, "last_errors": [None] * n,
         "next_attempt_ats": [None] * n, "attempt_deltas": [0] * n}
        | attempt_columns([
            Finalization(i, "failed", attempt=Attempt(1, 0.0, 0.1, "rejected", "no"))
            for i in ids
        ]),
    )  # fmt: skip
    published = {"ids": ids, "provider_ids": json.dumps({str(i): "p" for i in ids})}
    finalize_published = plan_of(conn, query("finalize_published"), published)
    return [claim, finalize, finalize_published]


def assert_found_by_primary_key(plans: list[dict[str, Any]]) -> None:
    # (the finalize's outcome events probe the workspace's active event endpoints by their
    # index, migration 0026; a stuck attempt is found by the ledger's key, a published row's
    # queue entry by the queue's)
    for plan in plans:
        others = {"action_attempts_pkey", "ix_event_endpoints_workspace", "action_queue_pkey"}
        assert index_scans(plan) - others == {"scheduled_actions_pkey"}, json.dumps(plan, indent=1)
        assert not {"scheduled_actions", "action_attempts", "action_queue"} & seq_scans(plan), (
            json.dumps(plan, indent=1)
        )


def test_the_batch_claim_and_finalize_find_rows_by_primary_key(conn, big_table):
    assert_found_by_primary_key(claim_and_finalize_plans(conn))


def test_the_finalize_plan_does_not_rest_on_what_an_earlier_test_left(conn, workspace, now):
    # Given the statistics an earlier test can leave behind: a ledger of one action with 50
    # stuck attempts, analyzed, then emptied as the next test's reset empties it (a truncate
    # keeps the statistics). On such statistics alone the finalize reads the ledger by a
    # sequential scan, which is how `make test` once failed on a fresh clone (#47).
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " values (%s, 'webhook', 'skew', now())",
        (workspace,),
    )
    conn.execute(
        "insert into action_attempts (action_id, attempt, workspace_id, started_at, outcome)"
        " select id, g, workspace_id, now(), 'stuck' from scheduled_actions,"
        " generate_series(1, 50) g"
    )
    conn.execute("analyze action_attempts")
    conn.execute("truncate action_attempts, scheduled_actions cascade")
    # When the plan tests load the table in service they assert plans for
    load_big_table(conn, workspace, now)
    # Then the claim and the finalize find their rows by key all the same
    assert_found_by_primary_key(claim_and_finalize_plans(conn))


@pytest.mark.parametrize(
    ("name", "params"),
    [("recover_stuck", {"stuck_timeout": 900}),
     ("release_lost_messages", {"redelivery_timeout": 900}),
     ("expire_late", {"max_lateness": 60, "batch_size": 5000, "action_type": "webhook"})],
)  # fmt: skip
def test_zombies_lost_and_late_rows_are_a_range_of_the_queue(conn, big_table, name, params):
    # No index of scheduled_actions names a column the claim or the finalize writes (they
    # must stay HOT updates): the rows in flight are a range of the queue's due index (a row
    # in flight was due within the look-ahead when it was sent), each row by its key.
    plan = plan_of(conn, query(name), params | {"due_within": 180, "action_types": ["webhook"]})
    shown = json.dumps(plan, indent=1)
    assert "ix_action_queue_due" in index_scans(plan), shown
    assert "due_at <" in index_node(plan, "ix_action_queue_due")["Index Cond"], shown
    assert not {"scheduled_actions", "action_queue"} & seq_scans(plan), shown


def test_the_calendar_page_walks_the_calendar_index(conn, big_table, workspace):
    plan = plan_of(
        conn,
        query("list_actions"),
        {"workspace_id": workspace, "after_at": big_table + timedelta(hours=2),
         "after_id": "00000000-0000-0000-0000-000000000000",
         "to": big_table + timedelta(hours=3), "status": None, "action_type": None,
         "thing_id": None, "error_code": None, "target_key": None, "tag": None, "limit": 101},
    )  # fmt: skip
    assert index_scans(plan) == {"ix_scheduled_actions_calendar"}, json.dumps(plan, indent=1)
    assert "scheduled_actions" not in seq_scans(plan)


@pytest.mark.parametrize("name", ["calendar_counts", "calendar_firsts"])
def test_the_calendar_summary_walks_the_calendar_index(conn, big_table, workspace, name):
    plan = plan_of(
        conn,
        query(name),
        {"workspace_id": workspace, "from": big_table + timedelta(hours=2),
         "to": big_table + timedelta(hours=3), "zone": "Asia/Tokyo", "unit": "hour",
         "per_bucket": 4, "status": None, "action_type": None},
    )  # fmt: skip
    assert index_scans(plan) == {"ix_scheduled_actions_calendar"}, json.dumps(plan, indent=1)
    assert "scheduled_actions" not in seq_scans(plan)


def bulk_params(workspace: UUID, start: datetime, **extra: Any) -> dict[str, Any]:
    """A bulk call's commonest filter: a type and a range of publish_at."""
    return {
        "workspace_id": workspace, "after_at": start, "after_id": UUID(int=0),
        "before": start + timedelta(hours=2), "action_type": "webhook", "error_code": None,
        "thing_id": None, "target_key": None, "limit": 500, **extra,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("name", "extra"),
    [("bulk_cancel_actions", {}), ("bulk_retry_actions", {"max_manual_retries": 5})],
)
def test_a_bulk_calls_selection_walks_the_calendar_index(conn, big_table, workspace, name, extra):
    # Given history beside the queued rows: a third published, some failed
    conn.execute(
        "update scheduled_actions set status = case when extract(second from publish_at) < 6"
        " then 'failed' else 'published' end, finished_at = now()"
        " where id in (select id from scheduled_actions order by id limit 35000)"
    )
    conn.execute("analyze scheduled_actions")
    for after in (big_table + timedelta(hours=2), big_table + timedelta(hours=20)):
        ranged = bulk_params(workspace, after, **extra)
        for params in (ranged, ranged | {"before": datetime(9999, 12, 31, tzinfo=UTC)}):
            plan = plan_of(conn, query(name), params)
            shown = json.dumps(plan, indent=1)
            # The workspace, the cursor and the range bound a walk of the calendar index;
            # the status and the type are filtered on the way
            picked = subplan(plan, "CTE picked")
            assert "ix_scheduled_actions_calendar" in index_scans(picked), shown
            walk = index_node(picked, "ix_scheduled_actions_calendar")
            assert "publish_at <" in walk["Index Cond"], shown
            assert "ROW(publish_at, id) >" in walk["Index Cond"], shown
            assert "scheduled_actions" not in seq_scans(plan), shown
        # With no end to the range, the walk is in the index's order, stopping at the limit:
        # never a sort of every row after the cursor
        assert "Sort" not in node_types(picked), shown


def index_node(plan: dict[str, Any], index: str) -> dict[str, Any]:
    if plan.get("Index Name") == index:
        return plan
    for child in plan.get("Plans", []):
        with contextlib.suppress(LookupError):
            return index_node(child, index)
    raise LookupError(index)


def subplan(plan: dict[str, Any], name: str) -> dict[str, Any]:
    if plan.get("Subplan Name") == name:
        return plan
    for child in plan.get("Plans", []):
        with contextlib.suppress(LookupError):
            return subplan(child, name)
    raise LookupError(name)


def columns_set(sql_text: str) -> list[set[str]]:
    """The columns each UPDATE of scheduled_actions in `sql_text` writes: the names on the
    left of its SET list (a list of columns set together included)."""
    code = re.sub(r"--[^\n]*", "", sql_text)
    found = []
    for clause in re.findall(
        r"update\s+scheduled_actions\b(?:\s+(?:as\s+)?[a-z])?\s+set\b(.*?)\b(?:from|where)\b",
        code, re.S | re.I,
    ):  # fmt: skip
        together = re.match(r"\s*\(([^)]*)\)\s*=", clause)
        if together:
            found.append({c.strip() for c in together.group(1).split(",")})
        else:
            found.append(set(re.findall(r"(?:^|,)\s*([a-z_]+)\s*=", clause)))
    return found


def columns_set_by(name: str) -> set[str]:
    """The columns a named statement's updates of scheduled_actions write."""
    return set().union(*columns_set(query(name)))


HOT_PATH = (
    "claim_actions", "claim_addressed_actions", "finalize_actions", "finalize_published"
)  # fmt: skip


def test_no_index_names_a_column_the_claim_or_the_finalize_writes(conn):
    # The claim (queued -> submitted) and the finalize (submitted -> published) write these
    # columns (read from their SQL); an index naming any of them, in its key or its
    # predicate, makes every such write a new row version elsewhere on the heap with an
    # entry in every index (no HOT update): docs/benchmarks.md, "What an action costs".
    written = set().union(*(columns_set_by(name) for name in HOT_PATH))
    assert {"status", "finished_at", "provider_id", "submitted_at", "updated_at"} <= written
    rows = conn.execute(
        "select indexrelid::regclass::text, pg_get_indexdef(indexrelid) from pg_index"
        " where indrelid = 'scheduled_actions'::regclass"
    ).fetchall()
    assert len(rows) >= 8
    for name, definition in rows:
        named = set(re.findall(r"[a-z_]+", definition.split(" USING ", 1)[1]))
        assert not named & written, f"{name} names {named & written}: {definition}"


def test_zombie_recovery_reads_no_row_of_a_burst_just_due(conn, workspace, now):
    # Given a burst just due, claimed by dispatchers a moment ago
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %s, 'webhook', 't' || g, %s from generate_series(1, 3000) g",
        (workspace, now - timedelta(seconds=1)),
    )
    conn.execute(
        "update scheduled_actions set status = 'submitted', submitted_at = now(),"
        " attempt_count = 1, updated_at = now()"
    )
    conn.execute("analyze action_queue")
    # When the tick looks for zombies (claimed longer than the stuck timeout ago)
    params = {"stuck_timeout": 900, "due_within": 180, "action_types": ["webhook"]}
    with conn.transaction(force_rollback=True), psycopg.ClientCursor(conn) as cur:
        cur.execute("explain (analyze, format json) " + query("recover_stuck"), params)
        plan = cur.fetchone()[0][0]["Plan"]  # type: ignore[index]
    # Then it reads none of them: a row is claimed only once due (within the clock-skew
    # tolerance), so a zombie was due before now - stuck timeout + due_within
    scan = index_node(plan, "ix_action_queue_due")
    assert scan["Actual Rows"] == 0, json.dumps(plan, indent=1)


def test_a_row_claimed_without_its_mark_is_still_found_as_a_zombie(conn, workspace, now):
    # Given a row a duplicate message claimed after its mark was cleared
    row = conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " values (%s, 'webhook', 't', %s) returning id",
        (workspace, now - timedelta(hours=1)),
    ).fetchone()
    claimed = conn.execute(
        query("claim_actions"),
        {"ids": [row[0]], "action_type": "webhook", "early_tolerance": 0.5,
         "max_lateness": None, "reclaim_after": None, "route_provider": None},
    ).fetchall()  # fmt: skip
    assert len(claimed) == 1
    # When its claimer dies and the stuck timeout passes (its times an hour back)
    conn.execute(
        "update scheduled_actions set submitted_at = submitted_at - interval '1 hour'"
        " where id = %s",
        (row[0],),
    )
    recovered = conn.execute(
        query("recover_stuck"),
        {"stuck_timeout": 900, "due_within": 180, "action_types": ["webhook"]},
    ).fetchall()
    # Then zombie recovery finds it
    assert [r[0] for r in recovered] == [row[0]]


def test_the_resolvers_candidates_come_from_the_ledgers_partial_index(conn, big_table):
    # Given history as it is (the fixture's: most finished rows published, a ledger of
    # refused and transient calls, a few stuck), and a few rows failed ambiguous
    conn.execute(
        "with failed as ("
        " update scheduled_actions set status = 'failed', error_code = 'ambiguous',"
        " attempt_count = 1, submitted_at = now(), finished_at = now()"
        " where id in (select id from scheduled_actions where status = 'queued'"
        "              order by id desc limit 5) returning id, workspace_id)"
        " insert into action_attempts (action_id, attempt, workspace_id, started_at, outcome)"
        " select id, 1, workspace_id, now(), 'ambiguous' from failed"
    )
    conn.execute("analyze action_attempts")
    plan = plan_of(
        conn,
        query("unresolved_actions"),
        # A type's own provider, and a provider of a type with fallbacks (its attempts')
        {"action_types": ["webhook", "email"], "providers": ["webhook", "postmark"],
         "routed": [False, True], "retention_seconds": [604800.0, 3888000.0],
         "after_at": datetime(1970, 1, 1, tzinfo=UTC), "after_id": UUID(int=0),
         "recheck_seconds": 300, "limit": 100},
    )  # fmt: skip
    shown = json.dumps(plan, indent=1)
    assert "ix_action_attempts_unresolved" in index_scans(plan), shown
    assert not {"scheduled_actions", "action_attempts"} & seq_scans(plan), shown


def trigger_calls(
    conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]
) -> dict[str, int]:
    """The triggers a statement ran and how often, by EXPLAIN ANALYZE, rolled back."""
    with conn.transaction(force_rollback=True), psycopg.ClientCursor(conn) as cur:
        cur.execute("explain (analyze, format json) " + sql, params)  # type: ignore[operator]
        plan = cur.fetchone()[0][0]  # type: ignore[index]
    return {t["Trigger Name"]: t["Calls"] for t in plan.get("Triggers", []) if t["Calls"]}


def triggers_fired(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> set[str]:
    """The triggers a statement ran, by EXPLAIN ANALYZE, in a transaction rolled back."""
    return set(trigger_calls(conn, sql, params))


def test_the_claim_and_finalize_call_no_row_trigger(conn, workspace, now):
    # A row trigger is a plpgsql call per row and write: two per action in a burst. The
    # hot path's writes stamp updated_at themselves, a published row leaves the queue in the
    # finalize's own statement, and every other trigger's WHEN clause is false for them (the
    # queue's, the rollup's, the publish guard, recurring and sequence outcomes).
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %s, 'webhook', 't' || g, %s from generate_series(1, 20) g",
        (workspace, now - timedelta(seconds=1)),
    )
    ids = [row[0] for row in conn.execute("select id from scheduled_actions")]
    n = len(ids)
    claim = {"ids": ids, "action_type": "webhook", "early_tolerance": 0.5,
             "max_lateness": None, "reclaim_after": None, "route_provider": None}  # fmt: skip
    assert triggers_fired(conn, query("claim_actions"), claim) == set()
    conn.execute(query("claim_actions"), claim)
    finalize = {
        "ids": ids,
        "statuses": ["published"] * n,
        "provider_ids": ["p"] * n,
        "error_codes": [None] * n,
        "last_errors": [None] * n,
        "next_attempt_ats": [None] * n,
        "attempt_deltas": [0] * n,
    } | attempt_columns([])
    # (the wave's counts are a row per workspace and type in each of the rollup's two tables,
    # each checked against its workspace's key: two calls for the 20 rows, not one a row)
    calls = trigger_calls(conn, query("finalize_actions"), finalize)
    assert all(name.startswith("RI_ConstraintTrigger") for name in calls), calls
    assert sum(calls.values()) <= 2, calls
    # and so for the wave of publications alone
    published = {"ids": ids, "provider_ids": json.dumps({str(i): "p" for i in ids})}
    calls = trigger_calls(conn, query("finalize_published"), published)
    assert all(name.startswith("RI_ConstraintTrigger") for name in calls), calls
    assert sum(calls.values()) <= 2, calls
    # and no row trigger runs before an update: an edit by hand fires none either
    edit = "update scheduled_actions set last_error = 'x' where id = %(id)s"
    assert triggers_fired(conn, edit, {"id": ids[0]}) == set()


def test_the_operations_series_reads_ranges_of_three_indexes(conn, big_table, workspace):
    # Given ten days of finished history, this workspace's and another's, beside the queued
    # rows (100k due later, 100 due now)
    other = conn.execute("insert into workspaces (name) values ('Globex') returning id").fetchone()
    for ws in (workspace, other[0]):  # type: ignore[index]
        conn.execute(
            "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
            " status, finished_at)"
            " select %(ws)s, 'webhook', 'done', %(now)s - g * interval '10 seconds',"
            " case when g %% 10 = 0 then 'failed' else 'published' end,"
            " %(now)s - g * interval '10 seconds' + interval '1 second'"
            " from generate_series(1, 86400) g",
            {"ws": ws, "now": big_table},
        )
    for table in ("scheduled_actions", "action_queue", "action_finished_windows"):
        conn.execute(sql.SQL("analyze {}").format(sql.Identifier(table)))
    start = big_table - timedelta(hours=6)
    params = {
        "workspace_id": workspace, "start": start, "stop": big_table, "width": 600,
        "buckets": 37, "action_types": ["log", "webhook"],
    }  # fmt: skip
    for name in ("operations_series", "operations_outcomes"):
        plan = plan_of(conn, query(name), params)
        shown = json.dumps(plan, indent=1)
        assert not {"scheduled_actions", "action_queue", "action_finished_windows"} & seq_scans(
            plan
        ), shown
        assert {"ix_action_finished_windows_workspace", "ix_action_finished_windows_bucket"} & (
            index_scans(plan)
        ), shown
    series = plan_of(conn, query("operations_series"), params)
    shown = json.dumps(series, indent=1)
    # Rows due in the window (and, for their lag, a window before it): the workspace's range
    # of the calendar index
    assert "publish_at >=" in index_node(series, "ix_scheduled_actions_calendar")["Index Cond"]
    # Rows still behind: the rows not finished due by now (the workspace's range, or each
    # type's when the planner finds it as small), not all 100k of them
    active = next(
        index_node(series, name) for name in ("ix_action_queue_workspace", "ix_action_queue_due")
        if name in index_scans(series)
    )  # fmt: skip
    assert "due_at <=" in active["Index Cond"], shown
