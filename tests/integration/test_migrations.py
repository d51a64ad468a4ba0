"""The migration runner: idempotent, serialised by an advisory lock, refuses edited history."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from tickwork import cli
from tickwork.actions.model import Action, Claimed
from tickwork.platform import migrate
from tickwork.platform.errors import MigrationChecksumError, MigrationError
from tickwork.platform.sql import query


def write(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


def ledger(url: str) -> list[tuple[str, str]]:
    with psycopg.connect(url) as conn:
        return conn.execute("select version, name from schema_migrations order by 1").fetchall()


def test_applied_twice_the_second_run_is_a_no_op(empty_database_url, tmp_path):
    folder = write(tmp_path / "m", {"0001_a.sql": "create table a (x int);"})
    assert migrate.migrate(empty_database_url, folder) == ["0001_a"]
    assert migrate.migrate(empty_database_url, folder) == []
    assert ledger(empty_database_url) == [("0001", "a")]


def test_new_files_are_applied_in_order(empty_database_url, tmp_path):
    folder = write(tmp_path / "m", {"0001_a.sql": "create table a (x int);"})
    migrate.migrate(empty_database_url, folder)
    write(folder, {"0003_c.sql": "alter table b add column z int;",
                   "0002_b.sql": "create table b (y int);"})  # fmt: skip
    assert migrate.migrate(empty_database_url, folder) == ["0002_b", "0003_c"]


def test_concurrent_runners_one_applies_the_other_waits_without_error(empty_database_url, tmp_path):
    # Given migrations slow enough that two runners overlap
    folder = write(
        tmp_path / "m",
        {
            "0001_a.sql": "create table a (x int); select pg_sleep(0.3);",
            "0002_b.sql": "create table b (y int); select pg_sleep(0.3);",
        },
    )
    start = threading.Barrier(2)
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def run() -> None:
        start.wait()
        try:
            results.append(migrate.migrate(empty_database_url, folder))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    # When two runners start at the same moment
    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then one applied everything, the other nothing, and neither failed
    assert errors == []
    assert sorted(results, key=len) == [[], ["0001_a", "0002_b"]]
    assert ledger(empty_database_url) == [("0001", "a"), ("0002", "b")]


def test_an_edited_applied_migration_is_refused(empty_database_url, tmp_path):
    folder = write(tmp_path / "m", {"0001_a.sql": "create table a (x int);"})
    migrate.migrate(empty_database_url, folder)
    write(folder, {"0001_a.sql": "create table a (x bigint);",
                   "0002_b.sql": "create table b (y int);"})  # fmt: skip
    with pytest.raises(MigrationChecksumError, match="edited after it was applied"):
        migrate.migrate(empty_database_url, folder)
    # and nothing after it ran
    assert ledger(empty_database_url) == [("0001", "a")]


def test_a_failing_migration_rolls_back_alone(empty_database_url, tmp_path):
    folder = write(
        tmp_path / "m",
        {"0001_a.sql": "create table a (x int);",
         "0002_b.sql": "create table b (y int); select no_such_function();"},
    )  # fmt: skip
    with pytest.raises(psycopg.errors.UndefinedFunction):
        migrate.migrate(empty_database_url, folder)
    assert ledger(empty_database_url) == [("0001", "a")]
    with psycopg.connect(empty_database_url) as conn:
        assert conn.execute("select to_regclass('b')").fetchone() == (None,)
    # the lock was released: a fixed file applies
    write(folder, {"0002_b.sql": "create table b (y int);"})
    assert migrate.migrate(empty_database_url, folder) == ["0002_b"]


@pytest.mark.parametrize("name", ["1_a.sql", "0001-a.sql", "0001_A.sql"])
def test_badly_named_files_are_refused(tmp_path, name):
    folder = write(tmp_path / "m", {name: "select 1;"})
    with pytest.raises(MigrationError, match=r"NNNN_name\.sql"):
        migrate.load(folder)


def test_two_files_with_one_number_are_refused(tmp_path):
    folder = write(tmp_path / "m", {"0001_a.sql": "select 1;", "0001_b.sql": "select 1;"})
    with pytest.raises(MigrationError, match="share a number"):
        migrate.load(folder)


def test_the_schema_matches_what_the_code_reads(database_url):
    # (a generated column, derived for an index, is not read)
    with psycopg.connect(database_url) as conn:
        columns = [
            row[0]
            for row in conn.execute(
                "select column_name from information_schema.columns"
                " where table_name = 'scheduled_actions' and is_generated = 'NEVER'"
                " order by ordinal_position"
            ).fetchall()
        ]
    assert sorted(columns) == sorted(Action.__dataclass_fields__)


def test_the_claim_returns_what_a_dispatcher_reads(conn, workspace, now):
    # Given a row due now
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " values (%s, 'webhook', 't', %s)",
        (workspace, now),
    )
    [(row_id,)] = conn.execute("select id from scheduled_actions").fetchall()
    # When the claim statement takes it, its columns are exactly Claimed's
    params = {"ids": [row_id], "action_type": "webhook", "early_tolerance": 1.0,
              "max_lateness": None, "reclaim_after": None,
              "route_provider": None}  # fmt: skip
    with conn.cursor() as cur:
        cur.execute(query("claim_actions"), params)
        assert cur.description is not None
        returned = [column.name for column in cur.description]
    assert sorted(returned) == sorted(Claimed.__dataclass_fields__)


def test_cli_migrate(empty_database_url, capsys):
    assert cli.main(["migrate", "--database-url", empty_database_url]) == 0
    assert "applied: 0001_core" in capsys.readouterr().out
    assert cli.main(["migrate", "--database-url", empty_database_url]) == 0
    assert "up to date" in capsys.readouterr().out
