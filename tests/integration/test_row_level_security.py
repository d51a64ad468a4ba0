"""Row-level security: the API's role sees and writes only its workspace, whatever the
query; the workers' role (the table owner) sees everything."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from tests.conftest import make_workspace
from tests.engine import seed
from tickwork.platform.config import Settings
from tickwork.platform.db import (
    API_LOGIN_ROLE,
    connect,
    local_api_login,
    local_api_password,
    provision_api_login,
)
from tickwork.platform.errors import ForbiddenError
from tickwork.tenancy import authorize, tenant_transaction
from tickwork.workspaces import add_member


@pytest.fixture
def two_tenants(conn, now):
    a = make_workspace(conn, "A")
    b = make_workspace(conn, "B")
    seed(conn, a, 3, now + timedelta(hours=1))
    seed(conn, b, 5, now + timedelta(hours=1))
    add_member(conn, a, "alice", "admin")
    add_member(conn, b, "bob", "member")
    return a, b


def test_a_query_without_a_workspace_filter_sees_only_the_tenant(conn, two_tenants):
    a, _ = two_tenants
    with tenant_transaction(conn, a):
        # no WHERE clause at all: the policy filters
        rows = conn.execute("select workspace_id from scheduled_actions").fetchall()
        members = conn.execute("select user_id from workspace_members").fetchall()
        spaces = conn.execute("select id from workspaces").fetchall()
    assert {row[0] for row in rows} == {a}
    assert len(rows) == 3
    assert members == [("alice",)]
    assert spaces == [(a,)]


def test_an_unfiltered_update_touches_only_the_tenant(conn, two_tenants):
    a, b = two_tenants
    with tenant_transaction(conn, a):
        changed = conn.execute(
            "update scheduled_actions set status = 'cancelled', finished_at = now()"
        ).rowcount
    assert changed == 3
    untouched = conn.execute(
        "select count(*) from scheduled_actions where workspace_id = %s and status = 'queued'",
        (b,),
    ).fetchone()[0]
    assert untouched == 5


def test_writing_into_another_workspace_is_refused(conn, two_tenants, now):
    a, b = two_tenants
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"),
        tenant_transaction(conn, a),
    ):
        conn.execute(
            "insert into scheduled_actions (workspace_id, action_type, target_key,"
            " publish_at) values (%s, 'log', 't', now())",
            (b,),
        )


def test_the_role_does_not_outlive_the_transaction(conn, two_tenants):
    a, _ = two_tenants
    with tenant_transaction(conn, a):
        assert conn.execute("select current_user").fetchone() == ("tickwork_api",)
    assert conn.execute("select current_user").fetchone() != ("tickwork_api",)
    assert conn.execute("select count(*) from scheduled_actions").fetchone() == (8,)


def test_membership_is_checked_within_the_tenant(conn, two_tenants):
    a, _ = two_tenants
    with tenant_transaction(conn, a):
        assert authorize(conn, "alice", a, Settings()).is_admin
    with pytest.raises(ForbiddenError, match="not a member"), tenant_transaction(conn, a):
        authorize(conn, "bob", a, Settings())


# --- the API's own login: row-level security it cannot leave --------------------------------


@pytest.fixture
def api_conn(database_url):
    with connect(local_api_login(database_url)) as connection:
        yield connection


def test_the_api_logs_in_as_its_own_role(api_conn):
    assert api_conn.execute("select session_user").fetchone() == (API_LOGIN_ROLE,)


def test_an_unfiltered_query_from_the_api_login_sees_one_workspace(api_conn, two_tenants):
    a, _ = two_tenants
    with tenant_transaction(api_conn, a):
        rows = api_conn.execute("select workspace_id from scheduled_actions").fetchall()
    assert {row[0] for row in rows} == {a}
    assert len(rows) == 3


def test_reset_role_leaves_the_api_login_with_nothing(api_conn, two_tenants):
    a, _ = two_tenants
    with tenant_transaction(api_conn, a):
        api_conn.execute("reset role")
        assert api_conn.execute("select current_user").fetchone() == (API_LOGIN_ROLE,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="scheduled_actions"):
            api_conn.execute("select count(*) from scheduled_actions")


def test_the_api_login_cannot_become_the_owner(api_conn, two_tenants):
    a, _ = two_tenants
    owner = api_conn.execute(
        "select tableowner from pg_tables where tablename = 'scheduled_actions'"
    ).fetchone()[0]
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied to set role"):
        api_conn.execute(sql.SQL("set role {}").format(sql.Identifier(owner)))
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied to set role"),
        tenant_transaction(api_conn, a),
    ):
        api_conn.execute(sql.SQL("set local role {}").format(sql.Identifier(owner)))


def test_outside_a_tenant_transaction_the_api_login_reads_nothing(api_conn, two_tenants):
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="scheduled_actions"):
        api_conn.execute("select count(*) from scheduled_actions")


def test_the_api_login_password_is_set_as_a_scram_verifier(conn, database_url):
    # The password the local runtime derives; the server stores only a SCRAM verifier.
    provision_api_login(conn, "correct horse battery staple")
    row = conn.execute(
        "select rolpassword like 'SCRAM-SHA-256$%%' from pg_authid where rolname = %s",
        (API_LOGIN_ROLE,),
    ).fetchone()
    provision_api_login(conn, local_api_password(database_url))
    assert row == (True,)
