"""Test harness: a real Postgres for every test that touches the database.

DATABASE_URL (any database on the server; used as the admin connection) when set, else an
embedded Postgres started for the session. The schema is migrated once into a database of
the session's own (one per xdist worker); before each test every table is emptied and stray
connections are closed, so tests are free to commit, run threads and leave rows behind.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Generator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from tickwork.local.embedded import EmbeddedPostgres, with_database
from tickwork.platform import migrate
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection, Database, connect, local_api_login
from tickwork.platform.queues.memory import InProcessQueues
from tickwork.providers import ProviderRegistry
from tickwork.providers.log import LogProvider
from tickwork.runtime import Runtime

# Metrics and traces have nowhere to go in tests.
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")

_counter = itertools.count()


def _prefix() -> str:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return f"tickwork_test_{os.getpid()}_{worker}"


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    configured = os.environ.get("DATABASE_URL")
    if configured:
        yield configured
        return
    # Not under pytest's tmp_path: every pytest session re-closes that tree to its owner,
    # which would lock the server's own user out of its data directory.
    data_root = Path(tempfile.mkdtemp(prefix="tickwork-test-pg-"))
    server = EmbeddedPostgres(data_root / "pgdata", delete_on_exit=True)
    server.tune_for_tests()
    yield server.url()
    server.stop()
    shutil.rmtree(data_root, ignore_errors=True)


def create_database(admin_url: str, name: str) -> str:
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    return with_database(admin_url, name)


def drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
        )


# pg_advisory_lock key for making session databases one at a time (any constant will do).
SETUP_LOCK = 0x7469636B776F726B  # "tickwork"


@pytest.fixture(scope="session")
def _session_database(pg_admin_url: str) -> Iterator[str]:
    name = f"{_prefix()}_db"
    # Roles belong to the server, not to a database, and the migrations create them: on a
    # fresh server, two xdist workers migrating their databases at once would both create
    # them, and one would fail. The lock is taken in the admin database all workers share.
    with psycopg.connect(pg_admin_url, autocommit=True) as admin:
        admin.execute("select pg_advisory_lock(%s)", (SETUP_LOCK,))
        drop_database(pg_admin_url, name)
        url = create_database(pg_admin_url, name)
        migrate.migrate(url)
        local_api_login(url)
    yield url
    drop_database(pg_admin_url, name)


# Tables whose rows come from migrations (reference data) and survive the reset.
REFERENCE_TABLES = frozenset({"schema_migrations"})


def reset_database(url: str) -> None:
    """Empty every table but the reference ones, after disconnecting anything a previous test
    left behind (threads, servers): the next test starts on a clean, migrated schema."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "select pg_terminate_backend(pid) from pg_stat_activity"
            " where datname = current_database() and pid <> pg_backend_pid()"
        )
        tables = [
            name
            for (name,) in conn.execute(
                "select tablename from pg_tables where schemaname = 'public'"
            ).fetchall()
            if name not in REFERENCE_TABLES
        ]
        if tables:
            conn.execute(
                sql.SQL("truncate {} restart identity cascade").format(
                    sql.SQL(", ").join(sql.Identifier(t) for t in tables)
                )
            )


@pytest.fixture
def database_url(_session_database: str) -> str:
    """A migrated database with no rows, the test's own until it ends.

    Cloning a template database per test was measured here at 170-300 ms a test on the
    embedded server; emptying the tables takes about 5 ms and leaves the same state."""
    reset_database(_session_database)
    return _session_database


@pytest.fixture
def empty_database_url(pg_admin_url: str) -> Iterator[str]:
    """A database with nothing in it, not even the schema."""
    name = f"{_prefix()}_{next(_counter)}"
    yield create_database(pg_admin_url, name)
    drop_database(pg_admin_url, name)


@pytest.fixture
def conn(database_url: str) -> Iterator[Connection]:
    with connect(database_url) as connection:
        yield connection


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url)


@pytest.fixture
def now() -> datetime:
    return datetime.now(UTC)


def make_workspace(conn: Connection, name: str = "Acme", timezone: str = "UTC") -> UUID:
    row = conn.execute(
        "insert into workspaces (name, timezone) values (%s, %s) returning id", (name, timezone)
    ).fetchone()
    assert row is not None
    return UUID(str(row[0]))


@pytest.fixture
def workspace(conn: Connection) -> UUID:
    return make_workspace(conn)


REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def runtime(database_url: str, settings: Settings) -> Iterator[Runtime]:
    """Settings, database, in-process queues and quiet `log` providers for every type."""
    engine = Runtime(
        settings=settings,
        db=Database(database_url),
        queues=InProcessQueues(visibility_timeout=30),
        providers=ProviderRegistry(settings),
        # The API logs in as its own role, as in AWS.
        api_db=Database(local_api_login(database_url)),
    )
    for action_type in settings.action_types:
        engine.providers.register(action_type, LogProvider({"quiet": True}))
    yield engine
    engine.db.close()
    engine.api_database().close()


@pytest.fixture(autouse=True)
def _local_data_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test gets a data directory of its own: none writes to the user's."""
    root = tmp_path_factory.mktemp("tickwork-data")
    monkeypatch.setenv("TICKWORK_DATA_DIR", str(root))
    return root


OTHER_BACKENDS = """
select pid, pg_blocking_pids(pid) as blocked_by, application_name, client_port, state,
       wait_event_type, wait_event, now() - xact_start as transaction_age, left(query, 300)
from pg_stat_activity
where datname = current_database() and pid <> pg_backend_pid()
"""


def what_else_was_running(database_url: str) -> str:
    """The test database's other backends (who blocks whom, and their last statement) and
    this machine's Python processes: what a timed-out test was waiting for."""
    lines = []
    try:
        with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as conn:
            for row in conn.cursor(row_factory=dict_row).execute(OTHER_BACKENDS):
                lines.append(repr(row))
    except psycopg.Error as exc:
        lines.append(f"could not read pg_stat_activity: {exc}")
    ps = subprocess.run(
        ["ps", "-eww", "-o", "pid,ppid,etime,args"], capture_output=True, text=True, check=False
    )
    lines += [line for line in ps.stdout.splitlines() if "python" in line or "PID" in line]
    return "\n".join(lines)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    # A hang is rare and gone on a rerun: say at once what the database was doing.
    database_url = getattr(item, "funcargs", {}).get("database_url")
    if report.failed and database_url and "Timeout" in str(report.longrepr):
        report.sections.append(("database at the timeout", what_else_was_running(database_url)))
    return report
