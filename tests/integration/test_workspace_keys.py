"""Every key of a workspace-owned table holds within one workspace (docs/scaling.md).

Read from the catalog of the migrated schema (pg_index, pg_constraint), so a migration that
adds a unique index, a primary key or a foreign key without `workspace_id` fails here: with
`workspace_id` as a distributed Postgres's distribution key (Citus), a workspace's rows live
on one node, and only a key that names it can be enforced there.

A table is workspace-owned when it has a `workspace_id` column. Every other table is named
in GLOBAL_TABLES with the reason it belongs to no workspace; the few keys of
workspace-owned tables that are global by design are named in GLOBAL_KEYS with theirs.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

import psycopg
import pytest

from tests.conftest import REPO_ROOT, make_workspace
from tickwork.platform import migrate
from tickwork.platform.db import Connection, connect

# Tables with no workspace_id: none of their keys is checked, and no key of a workspace's
# table may point at them (but `workspaces`). In a distributed Postgres they are reference
# tables (copied to every node) or stay on the coordinator: docs/scaling.md says which.
GLOBAL_TABLES = {
    # The tenants themselves: a workspace's id is its `workspace_id` everywhere else, the
    # key the cell directory routes by and the distribution key. A reference table.
    "workspaces": "the workspaces: their id is every other table's workspace_id",
    # The migration runner's ledger: the schema's version, one for the whole database.
    "schema_migrations": "the schema's version, one per database",
    # The tick's position per action type, and its passes (migration 0039): the tick runs
    # each type's queue for every workspace at once.
    "tick_watermarks": "the tick's position per action type, for the whole stack",
    "tick_passes": "the tick's passes per action type, for the whole stack",
    # Rate windows of a provider's limits (`type:<type>:<per>`, `connection:<id>:<per>`):
    # a type's limit is the stack's contract with a provider, shared by all workspaces.
    "rate_windows": "a provider's send windows, shared by every workspace that sends to it",
    # A provider's circuit per (provider, connection): a provider that is down is down
    # for every workspace sending through the stack's own account (the nil connection).
    "provider_circuits": "a provider's health, shared by every workspace calling it",
}

# Keys of workspace-owned tables that do not name workspace_id, by (table, index). Each is
# the primary key on a surrogate id the database makes (gen_random_uuid() or an identity):
# unique across all workspaces by construction, so it needs no workspace to hold. Workers
# find rows by id alone (a callback's connection, the expander's schedule, an enrollment
# being advanced), which is why it stays a key of its own; where a composite foreign key
# names the table, a unique (workspace_id, id) stands beside it (migration 0037). On a
# distributed Postgres these become (workspace_id, id) when the table is distributed
# (docs/scaling.md). scheduled_actions' primary key is (id, workspace_id) already
# (migration 0039): a lookup by id uses it as before.
GLOBAL_KEYS = {
    # A provider's callback URL names the connection; its workspace is read from it.
    ("connections", "connections_pkey"): "uuid: callback URLs carry it",
    ("recurring_schedules", "recurring_schedules_pkey"): "uuid: the expander locks by it",
    ("rules", "rules_pkey"): "uuid: rule jobs and the API name it",
    ("campaigns", "campaigns_pkey"): "uuid: the API names it",
    ("enrollments", "enrollments_pkey"): "uuid: the drip advance reads by it",
    ("digests", "digests_pkey"): "uuid: a digest's flush names it",
    ("event_endpoints", "event_endpoints_pkey"): "uuid: the API names it",
    # Identities from one sequence each: unique across workspaces, in insertion order.
    ("action_changes", "action_changes_pkey"): "identity: the change log's order",
    ("digest_items", "digest_items_pkey"): "identity: an item's order of arrival",
    ("event_outbox", "event_outbox_pkey"): "identity: the outbox's delivery order",
}

_TABLES = """
select c.relname as name,
       exists (select 1 from pg_attribute a
               where a.attrelid = c.oid and a.attname = 'workspace_id' and not a.attisdropped)
           as owned
from pg_class c join pg_namespace n on n.oid = c.relnamespace
where n.nspname = 'public' and c.relkind in ('r', 'p')
"""

# Unique indexes (primary keys, unique constraints and plain unique indexes alike, partial
# or on expressions) of public tables, with their key columns only (not INCLUDE ones); an
# expression's slot is attnum 0, which names no column.
_UNIQUE_INDEXES = """
select t.relname as table_name, i.relname as index_name, ix.indisprimary as is_primary,
       array(select a.attname::text
             from unnest((ix.indkey::int2[])[0:ix.indnkeyatts - 1]) as k (attnum)
             join pg_attribute a on a.attrelid = ix.indrelid and a.attnum = k.attnum)
           as key_columns,
       pg_get_indexdef(ix.indexrelid) as definition
from pg_index ix
join pg_class t on t.oid = ix.indrelid
join pg_class i on i.oid = ix.indexrelid
join pg_namespace n on n.oid = t.relnamespace
where n.nspname = 'public' and (ix.indisunique or ix.indisexclusion)
"""

# Foreign keys between public tables, with their column pairs in order.
_FOREIGN_KEYS = """
select c.conname as name, child.relname as child, parent.relname as parent,
       array(select a.attname::text from unnest(c.conkey) with ordinality as k (attnum, o)
             join pg_attribute a on a.attrelid = c.conrelid and a.attnum = k.attnum
             order by k.o) as child_columns,
       array(select a.attname::text from unnest(c.confkey) with ordinality as k (attnum, o)
             join pg_attribute a on a.attrelid = c.confrelid and a.attnum = k.attnum
             order by k.o) as parent_columns,
       pg_get_constraintdef(c.oid) as definition
from pg_constraint c
join pg_class child on child.oid = c.conrelid
join pg_class parent on parent.oid = c.confrelid
join pg_namespace n on n.oid = child.relnamespace
where c.contype = 'f' and n.nspname = 'public'
"""

# What makes a primary key's one column a surrogate: a uuid the database generates, or an
# identity.
_SURROGATE = """
select a.attname = 'id'
       and (a.attidentity <> ''
            or (format_type(a.atttypid, a.atttypmod) = 'uuid'
                and pg_get_expr(d.adbin, d.adrelid) = 'gen_random_uuid()'))
from pg_index ix
join pg_class i on i.oid = ix.indexrelid
join pg_attribute a on a.attrelid = ix.indrelid and a.attnum = ix.indkey[0]
left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
where i.relname = %(index)s and ix.indisprimary and ix.indnkeyatts = 1
"""


@dataclass(frozen=True)
class Breach:
    kind: str
    table: str
    name: str
    definition: str

    def __str__(self) -> str:
        return f"{self.kind} {self.table}.{self.name}: {self.definition}"


def breaches(conn: Connection) -> list[Breach]:
    """The keys that do not hold within one workspace, but for GLOBAL_KEYS, and the tables
    that have no workspace_id and are not in GLOBAL_TABLES."""
    owned = dict(conn.execute(_TABLES).fetchall())
    found = [
        Breach("table without workspace_id", name, name, "not in GLOBAL_TABLES")
        for name, is_owned in owned.items()
        if not is_owned and name not in GLOBAL_TABLES
    ]
    for table, index, _primary, columns, definition in conn.execute(_UNIQUE_INDEXES):
        if owned.get(table) and "workspace_id" not in columns and (table, index) not in GLOBAL_KEYS:
            found.append(Breach("unique key", table, index, definition))
    for name, child, parent, child_columns, parent_columns, definition in conn.execute(
        _FOREIGN_KEYS
    ):
        pairs = dict(zip(child_columns, parent_columns, strict=True))
        if not owned.get(child):
            if owned.get(parent):
                found.append(Breach("foreign key from a global table", child, name, definition))
            continue
        # Both sides name the workspace, paired: the child's workspace_id is the parent's
        # (or, for `workspaces`, its id).
        expected = "id" if parent == "workspaces" else "workspace_id"
        if pairs.get("workspace_id") != expected:
            found.append(Breach("foreign key", child, name, definition))
    return sorted(found, key=str)


def test_every_key_of_a_workspace_table_names_the_workspace(conn):
    # Given the schema every migration made, when its keys are read from the catalog,
    # then each holds within one workspace, but the ones listed as global by design.
    assert [str(b) for b in breaches(conn)] == []


def test_each_global_key_is_a_surrogate_id_the_database_makes(conn):
    # The allow-list covers surrogate ids only, and each still exists: a key renamed or
    # dropped is taken off it, not left to excuse another.
    for table, index in GLOBAL_KEYS:
        row = conn.execute(_SURROGATE, {"index": index}).fetchone()
        assert row is not None, f"{table}.{index} is no longer a one-column primary key"
        assert row[0], f"{table}.{index} is not an id the database generates"


def test_each_global_table_exists_and_has_no_workspace(conn):
    owned = dict(conn.execute(_TABLES).fetchall())
    assert {name: owned.get(name) for name in GLOBAL_TABLES} == dict.fromkeys(GLOBAL_TABLES, False)


def test_a_key_or_a_table_that_breaks_the_rule_is_found(conn):
    # Given a migration that adds a unique key, a foreign key and a table without the
    # workspace (rolled back after), when the catalog is read, then each is named.
    with conn.transaction():
        conn.execute("create unique index ux_bad_dedupe on scheduled_actions (dedupe_key)")
        conn.execute(
            "alter table rule_actions add constraint bad_rule_fk"
            " foreign key (rule_id) references rules (id)"
        )
        conn.execute(
            "create table bad_global (id uuid primary key, rule_id uuid references rules (id))"
        )
        conn.execute(
            "create table bad_owned (workspace_id uuid not null, other uuid not null,"
            " foreign key (other, workspace_id) references scheduled_actions (workspace_id, id),"
            " unique (other) include (workspace_id))"
        )
        found = {(b.kind, b.table, b.name) for b in breaches(conn)}
        raise psycopg.Rollback()
    assert found == {
        ("unique key", "scheduled_actions", "ux_bad_dedupe"),
        ("foreign key", "rule_actions", "bad_rule_fk"),
        ("table without workspace_id", "bad_global", "bad_global"),
        ("foreign key from a global table", "bad_global", "bad_global_rule_id_fkey"),
        # The workspace paired with another column, and a workspace only INCLUDEd.
        ("foreign key", "bad_owned", "bad_owned_other_workspace_id_fkey"),
        ("unique key", "bad_owned", "bad_owned_other_workspace_id_key"),
    }


def _action(conn: Connection, workspace: UUID, **columns: object) -> UUID:
    names = ["workspace_id", "action_type", "target_key", "publish_at", *columns]
    row = conn.execute(
        f"insert into scheduled_actions ({', '.join(names)})"  # the test's own column names
        f" values (%s, 'log', 't', now() + interval '1 day'{', %s' * len(columns)})"
        " returning id",
        (workspace, *columns.values()),
    ).fetchone()
    assert row is not None
    return UUID(str(row[0]))


def _change(conn: Connection, workspace: UUID, action: UUID) -> None:
    conn.execute(
        "insert into action_changes (workspace_id, action_id, kind, actor)"
        " values (%s, %s, 'cancel', 'test')",
        (workspace, action),
    )


def test_a_row_cannot_name_another_workspaces_row(conn):
    # Given two workspaces and a connection and an action of the first,
    first, second = make_workspace(conn, "First"), make_workspace(conn, "Second")
    row = conn.execute(
        "insert into connections (workspace_id, provider, name) values (%s, 'log', 'c')"
        " returning id",
        (first,),
    ).fetchone()
    assert row is not None
    connection = row[0]
    action = _action(conn, first, connection_id=connection)
    # when the second workspace's rows name them, then the database refuses each,
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        _action(conn, second, connection_id=connection)
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        _action(conn, second, rescheduled_from=action)
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        _change(conn, second, action)
    # and the first workspace's own still can, and go with their action.
    _action(conn, first, rescheduled_from=action)
    _change(conn, first, action)
    conn.execute("delete from scheduled_actions where rescheduled_from = %s", (action,))
    conn.execute("delete from scheduled_actions where id = %s", (action,))
    assert conn.execute(
        "select count(*) from action_changes where action_id = %s", (action,)
    ).fetchone() == (0,)


def test_the_migration_keeps_indexes_an_operator_built_ahead(empty_database_url, tmp_path):
    # Given a database before migration 0037 where an operator built its indexes ahead,
    # concurrently (docs/scaling.md),
    folder = tmp_path / "migrations"
    folder.mkdir()
    for path in sorted((REPO_ROOT / "migrations").glob("*.sql")):
        if path.name < "0037":
            shutil.copy(path, folder)
    migrate.migrate(empty_database_url, folder)
    with connect(empty_database_url) as conn:
        conn.execute(
            "create unique index concurrently ux_scheduled_actions_workspace_id"
            " on scheduled_actions (workspace_id, id)"
        )
        conn.execute(
            "create unique index concurrently action_attempts_pkey_ws"
            " on action_attempts (action_id, attempt, workspace_id)"
        )
        built = _index_oids(conn)
    # when the migration runs, then it uses them, and the schema passes the check.
    shutil.copy(REPO_ROOT / "migrations" / "0037_workspace_keys.sql", folder)
    assert migrate.migrate(empty_database_url, folder) == ["0037_workspace_keys"]
    with connect(empty_database_url) as conn:
        after = _index_oids(conn)
        name = "ux_scheduled_actions_workspace_id"
        assert after[name] == built[name]
        assert after["action_attempts_pkey"] == built["action_attempts_pkey_ws"]
    # and the later migrations bring the schema to what the check asks
    for path in sorted((REPO_ROOT / "migrations").glob("*.sql")):
        if path.name > "0037":
            shutil.copy(path, folder)
    migrate.migrate(empty_database_url, folder)
    with connect(empty_database_url) as conn:
        assert [str(b) for b in breaches(conn)] == []


def _index_oids(conn: Connection) -> dict[str, int]:
    rows = conn.execute(
        "select relname, oid from pg_class where relkind = 'i'"
        " and relnamespace = 'public'::regnamespace"
    ).fetchall()
    return dict(rows)


def test_global_tables_are_what_docs_scaling_names(conn):
    # The page that says where each table goes on a distributed Postgres names each global
    # table as such.
    text = Path(REPO_ROOT / "docs" / "scaling.md").read_text(encoding="utf-8")
    missing = [name for name in GLOBAL_TABLES if f"`{name}`" not in text]
    assert missing == []
