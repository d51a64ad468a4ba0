"""The migration runner used everywhere: tests, the local runtime and the deploy-time function.

Files are `migrations/NNNN_name.sql`, applied in order, one transaction each, recorded in
`schema_migrations` with a checksum. A Postgres advisory lock serialises runners, so two
deploys (or two test workers) never interleave; the second finds the work done. An applied
file whose text changed is refused: write a new migration instead.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from tickwork.platform.db import Connection, connect
from tickwork.platform.errors import MigrationChecksumError, MigrationError

# pg_advisory_lock key: the first 8 bytes of sha256("tickwork.migrate"), as a signed bigint.
LOCK_KEY = int.from_bytes(hashlib.sha256(b"tickwork.migrate").digest()[:8], "big", signed=True)
FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: str
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


def default_directory() -> Path:
    """Where migrations live: TICKWORK_MIGRATIONS_DIR, the copy packed into the Lambda layer,
    or the repository's top-level `migrations/`."""
    configured = os.environ.get("TICKWORK_MIGRATIONS_DIR")
    if configured:
        return Path(configured)
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "migrations", here.parents[2] / "migrations"):
        if candidate.is_dir():
            return candidate
    raise MigrationError("no migrations directory found; set TICKWORK_MIGRATIONS_DIR")


def load(directory: Path) -> list[Migration]:
    migrations: list[Migration] = []
    seen: dict[str, str] = {}
    for path in sorted(directory.glob("*.sql")):
        match = FILE_NAME.match(path.name)
        if not match:
            raise MigrationError(f"migration file {path.name!r} is not named NNNN_name.sql")
        version, name = match.groups()
        if version in seen:
            raise MigrationError(f"migrations {seen[version]!r} and {path.name!r} share a number")
        seen[version] = path.name
        migrations.append(Migration(version, name, path.read_text(encoding="utf-8")))
    return migrations


_CREATE_LEDGER = """
create table if not exists schema_migrations (
    version    text primary key,
    name       text not null,
    checksum   text not null,
    applied_at timestamptz not null default now()
)
"""


def apply(conn: Connection, migrations: list[Migration]) -> list[str]:
    """Apply what is pending on `conn` (an autocommit connection). Returns applied file names."""
    applied_now: list[str] = []
    conn.execute("select pg_advisory_lock(%s)", (LOCK_KEY,))
    try:
        conn.execute(_CREATE_LEDGER)
        rows = conn.execute("select version, name, checksum from schema_migrations").fetchall()
        ledger = {version: (name, checksum) for version, name, checksum in rows}
        for migration in migrations:
            recorded = ledger.get(migration.version)
            if recorded is not None:
                if recorded[1] != migration.checksum:
                    raise MigrationChecksumError(
                        f"migration {migration.version}_{migration.name} was edited after it was"
                        " applied; put the change in a new migration file instead",
                        details={"version": migration.version},
                    )
                continue
            with conn.transaction():
                # Migration files are ours, shipped with the code: trusted like a literal.
                conn.execute(migration.sql)
                conn.execute(
                    "insert into schema_migrations (version, name, checksum) values (%s, %s, %s)",
                    (migration.version, migration.name, migration.checksum),
                )
            applied_now.append(f"{migration.version}_{migration.name}")
    finally:
        if not conn.broken:
            conn.execute("select pg_advisory_unlock(%s)", (LOCK_KEY,))
    return applied_now


def migrate(url: str, directory: Path | None = None) -> list[str]:
    """Connect to `url` and apply pending migrations from `directory` (default location)."""
    migrations = load(directory or default_directory())
    with connect(url) as conn:
        return apply(conn, migrations)
