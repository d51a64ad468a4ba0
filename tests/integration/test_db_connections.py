"""Connections that RDS Proxy can multiplex: no server-side prepared statements and no
session state left behind by a request (either would pin the proxy connection)."""

from __future__ import annotations

import json
import time

import psycopg
import pytest

from tests.conftest import make_workspace
from tickwork.platform.config import Settings
from tickwork.platform.db import Database, SessionLimits, connect, local_api_login
from tickwork.tenancy import tenant_transaction


def prepared(conn) -> int:
    return conn.execute("select count(*) from pg_prepared_statements").fetchone()[0]


def test_a_statement_run_many_times_is_never_prepared(database_url):
    # psycopg prepares a statement server-side after five executions by default.
    with connect(database_url) as conn:
        for _ in range(20):
            conn.execute("select count(*) from scheduled_actions where status = %s", ("queued",))
        assert conn.prepare_threshold is None
        assert prepared(conn) == 0


def test_the_api_session_keeps_nothing_after_a_request(database_url):
    owner = Database(database_url)
    workspace = make_workspace(owner.connection())
    api = Database(local_api_login(database_url))
    try:
        conn = api.connection()
        for _ in range(10):
            with tenant_transaction(conn, workspace):
                conn.execute("select count(*) from scheduled_actions").fetchone()
        assert prepared(conn) == 0
        row = conn.execute(
            "select current_user, coalesce(current_setting('tickwork.workspace_id', true), '')"
        ).fetchone()
        assert row == ("tickwork_api_login", "")
    finally:
        api.close()
        owner.close()


# ------------------------------------------- a transaction left idle is ended by the server


def test_a_transaction_left_idle_is_terminated_and_its_locks_released(database_url):
    # Given an engine connection with a 1 s idle-in-transaction limit, holding a row lock
    db = Database(database_url, SessionLimits(idle_in_transaction_seconds=1, statement_seconds=0))
    other = Database(database_url)
    try:
        workspace = make_workspace(other.connection())
        conn = db.connection()
        pid = conn.info.backend_pid
        ended = None
        try:
            with conn.transaction():
                conn.execute("select id from workspaces where id = %s for update", (workspace,))
                # When the process hangs inside the transaction
                time.sleep(1.6)  # the hang itself, past the 1 s limit under test
                conn.execute("select 1")
        except psycopg.Error as exc:
            ended = exc
        # The server's own message, or the connection it closed (depending on timing)
        assert isinstance(
            ended, psycopg.errors.IdleInTransactionSessionTimeout | psycopg.OperationalError
        ), ended
        # Then the server has ended that session, and the row can be locked by another
        probe = other.connection()
        alive = probe.execute(
            "select count(*) from pg_stat_activity where pid = %s", (pid,)
        ).fetchone()
        assert alive == (0,)
        with probe.transaction():
            probe.execute("set local lock_timeout = '1s'")
            locked = probe.execute(
                "select id from workspaces where id = %s for update", (workspace,)
            ).fetchone()
        assert locked == (workspace,)
        # And the next use opens a fresh connection
        assert db.connection().execute("select 1").fetchone() == (1,)
    finally:
        db.close()
        other.close()


SHOW_LIMITS = (
    "select current_setting('idle_in_transaction_session_timeout'),"
    " current_setting('statement_timeout')"
)


def test_the_limits_are_local_to_each_transaction_and_pauses_under_them_pass(database_url):
    db = Database(database_url, SessionLimits(idle_in_transaction_seconds=2, statement_seconds=5))
    try:
        conn = db.connection()
        before = conn.execute(SHOW_LIMITS).fetchone()
        with conn.transaction():
            time.sleep(0.5)  # a pause under the limit (the thing under test) is fine
            inside = conn.execute(SHOW_LIMITS).fetchone()
            with conn.transaction():  # a savepoint sets nothing more
                conn.execute("select 1")
        assert inside == ("2s", "5s")
        # Nothing is left on the session (RDS Proxy would pin it)
        assert conn.execute(SHOW_LIMITS).fetchone() == before != inside
    finally:
        db.close()


def test_a_statement_past_its_limit_is_cancelled(database_url):
    db = Database(database_url, SessionLimits(idle_in_transaction_seconds=0, statement_seconds=0.5))
    try:
        conn = db.connection()
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled), conn.transaction():
            conn.execute("select pg_sleep(5)")
        assert time.monotonic() - started < 2.0
    finally:
        db.close()


def test_migrations_connect_without_the_limits(database_url):
    # The migration runner's connection (db.connect) may hold a long transaction.
    with connect(database_url) as conn, conn.transaction():
        row = conn.execute("select current_setting('idle_in_transaction_session_timeout')")
        assert row.fetchone() == ("0",)


def test_the_runtime_takes_its_limits_from_settings():
    settings = Settings(db_idle_in_transaction_timeout_seconds=30, db_statement_timeout_seconds=0)
    assert SessionLimits.of(settings) == SessionLimits(30, 0)
    assert SessionLimits.of(Settings()) == SessionLimits(60, 300)


JSON_TEXTS = [
    '{"n": 123456789012345678901234567890, "m": -9223372036854775809}',  # beyond 64 bits
    '{"s": "caf\\u00e9 \\u2603 \\ud83d\\ude00", "t": "crème brûlée"}',
    '{"x": 1e308, "y": -0.0, "z": 0.1, "nested": ' + "[" * 200 + "]" * 200 + "}",
    '{"a": 1, "a": 2}',
    "[]",
    '"text"',
]


@pytest.mark.parametrize("text", JSON_TEXTS)
@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("kind", ["json", "jsonb"])
def test_json_values_load_as_json_loads_reads_what_postgres_sends(database_url, text, binary, kind):
    # The loaders skip json.loads' guess of the encoding; what comes back must not change:
    # huge integers stay exact, non-ASCII text stays whole, nesting and duplicates as before.
    with connect(database_url) as conn, conn.cursor(binary=binary) as cur:
        [(loaded, sent)] = cur.execute(
            f"select %(t)s::{kind}, %(t)s::{kind}::text", {"t": text}
        ).fetchall()
    assert loaded == json.loads(sent)
    assert type(loaded) is type(json.loads(sent))
