"""Connections that RDS Proxy can multiplex: no server-side prepared statements and no
session state left behind by a request (either would pin the proxy connection)."""

from __future__ import annotations

from tests.conftest import make_workspace
from tickwork.db import Database, connect, local_api_login
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
