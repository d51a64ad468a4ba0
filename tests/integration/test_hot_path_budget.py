"""The hot path's budget, read from the schema (docs/benchmarks.md, "What an action costs"):
what a change to scheduled_actions' triggers or to the engine's statements would add to every
claim and finalize fails here until it is looked at.

(The indexes are checked in test_query_plans.py: none names a column the claim or the
finalize writes.)"""

from __future__ import annotations

from tests.integration.test_query_plans import columns_set, trigger_calls
from tickwork.platform.sql import names, query

# Every row trigger on scheduled_actions, by the work it is there for. The claim and the
# finalize fire none of them (test_query_plans checks it with EXPLAIN ANALYZE): each one's
# WHEN clause (or its column list) is false for them. A trigger added here is evaluated on
# every update of every row: add it only with its cost measured (make bench, section f).
ROW_TRIGGERS = {
    # on insert, delete and truncate: counted, queued, checked, the change log
    "scheduled_actions_inserted": "AFTER INSERT STATEMENT",
    "scheduled_actions_deleted": "AFTER DELETE STATEMENT",
    "scheduled_actions_truncated": "AFTER TRUNCATE STATEMENT",
    "scheduled_actions_delete_attempts": "AFTER DELETE STATEMENT",
    "scheduled_actions_check_columns": "BEFORE INSERT ROW",
    "scheduled_actions_publish_guard_insert": "BEFORE INSERT ROW",
    "scheduled_actions_log_insert": "AFTER INSERT ROW",
    # after update (row), each with a WHEN false for the claim and the finalize
    "scheduled_actions_check_changed_columns": "AFTER UPDATE ROW",
    "scheduled_actions_publish_guard_update": "AFTER UPDATE ROW",
    "scheduled_actions_finished": "AFTER UPDATE ROW",
    "scheduled_actions_finished_changed": "AFTER UPDATE ROW",
    "scheduled_actions_moved": "AFTER UPDATE ROW",
    "scheduled_actions_log_cancel": "AFTER UPDATE ROW",
    "scheduled_actions_outcome_events": "AFTER UPDATE ROW",
    "scheduled_actions_enrollment_step_done": "AFTER UPDATE ROW",
    "scheduled_actions_recurring_outcome": "AFTER UPDATE ROW",
}

_TRIGGERS = """
select tgname,
       case when tgtype & 2 = 2 then 'BEFORE' when tgtype & 64 = 64 then 'INSTEAD OF'
            else 'AFTER' end
       || ' ' || concat_ws(' OR ', case when tgtype & 4 = 4 then 'INSERT' end,
                           case when tgtype & 8 = 8 then 'DELETE' end,
                           case when tgtype & 16 = 16 then 'UPDATE' end,
                           case when tgtype & 32 = 32 then 'TRUNCATE' end)
       || case when tgtype & 1 = 1 then ' ROW' else ' STATEMENT' end
from pg_trigger
where tgrelid = 'scheduled_actions'::regclass and not tgisinternal
"""


def test_the_triggers_on_the_hot_table_are_the_known_ones(conn):
    found = dict(conn.execute(_TRIGGERS).fetchall())
    assert found == ROW_TRIGGERS


def test_no_row_trigger_runs_before_an_update(conn):
    # One would lock every updated row first (a tuple lock and its WAL record), whatever its
    # WHEN clause says: a write more for every claim and every finalize.
    found = dict(conn.execute(_TRIGGERS).fetchall())
    before_update = [
        n for n, kind in found.items() if kind.startswith("BEFORE") and "UPDATE" in kind
    ]
    assert before_update == []


def test_the_hot_table_leaves_room_for_its_updates_on_each_page(conn):
    # The claim and the finalize write a new version of each row; with room left on its page
    # it stays there (a HOT update, no index entry). At 100 (the default) the finalize's
    # grown rows move pages and write an entry in every index.
    (options,) = conn.execute(
        "select reloptions from pg_class where oid = 'scheduled_actions'::regclass"
    ).fetchone()
    assert "fillfactor=70" in (options or [])


def test_every_update_of_an_action_stamps_updated_at(conn):
    # With no touch trigger, the statements stamp the row themselves: the removal of old
    # history tells a row changed since its archive by its updated_at.
    missing = [
        name
        for name in sorted(names())
        for columns in columns_set(query(name))
        if "updated_at" not in columns
    ]
    assert missing == []
    functions = conn.execute(
        "select proname, prosrc from pg_proc p join pg_namespace n on n.oid = p.pronamespace"
        " where n.nspname = 'public' and prosrc ~* 'update\\s+scheduled_actions'"
    ).fetchall()
    assert functions, "the recurring failure policy updates scheduled_actions"
    missing = [
        name
        for name, source in functions
        for columns in columns_set(source)
        if "updated_at" not in columns
    ]
    assert missing == []


def test_a_statement_that_forgets_updated_at_is_found():
    assert columns_set("update scheduled_actions a set status = 'x' where id = 1") == [{"status"}]
    assert columns_set(
        "update scheduled_actions set (status, updated_at) = (select 'x', now()) where true"
    ) == [{"status", "updated_at"}]


def test_the_queue_follows_a_due_time_but_not_a_claim(conn, workspace, now):
    # The queue's trigger names the columns it follows: a claim (none of them) does not run
    # it, a backoff (next_attempt_at) does.
    [action_id] = [
        row[0]
        for row in conn.execute(
            "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
            " values (%s, 'log', 't', now()) returning id",
            (workspace,),
        )
    ]
    claim = {"ids": [action_id], "action_type": "log", "early_tolerance": 1.0,
             "max_lateness": None, "reclaim_after": None, "route_provider": None}  # fmt: skip
    assert trigger_calls(conn, query("claim_actions"), claim) == {}
    backoff = "update scheduled_actions set next_attempt_at = now() + interval '1 minute',"
    backoff += " updated_at = now() where id = %(id)s"
    assert trigger_calls(conn, backoff, {"id": action_id}) == {"scheduled_actions_moved": 1}
