"""Database connections: one per thread, opened lazily, reopened when broken.

Lambda runs one invocation at a time per environment, so this is one connection per warm
Lambda (through RDS Proxy in AWS). The local runtime runs several handlers on threads, each
with its own connection, exactly as separate Lambdas would.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import psycopg

from tickwork.config import Settings
from tickwork.errors import ConfigError, InputError

Connection = psycopg.Connection[Any]


def connect(url: str, **kwargs: Any) -> Connection:
    """An autocommit connection: every statement is its own transaction unless a block opens one."""
    return psycopg.connect(url, autocommit=True, **kwargs)


@contextmanager
def storable() -> Iterator[None]:
    """Values Postgres cannot store (NUL characters in text or JSON, out-of-range numbers)
    are the caller's input problem, not ours: say so as an InputError."""
    try:
        yield
    except psycopg.DataError as exc:
        raise InputError(f"a value cannot be stored: {exc}") from exc


def url_from_secret(secret: dict[str, Any], host_override: str | None = None) -> str:
    """A libpq URL from a Secrets Manager secret of the RDS shape (host, port, username, ...)."""
    try:
        user = quote(str(secret["username"]), safe="")
        password = quote(str(secret["password"]), safe="")
        host = host_override or str(secret["host"])
        port = int(secret.get("port", 5432))
        dbname = quote(str(secret.get("dbname") or "postgres"), safe="")
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"database secret lacks a usable field: {exc}") from exc
    return f"postgresql://{user}:{password}@{host}:{port}/{dbname}?sslmode=require"


def resolve_url(settings: Settings) -> str:
    if settings.database_url:
        return settings.database_url
    if settings.database_secret_arn:
        from aws_lambda_powertools.utilities import parameters

        secret = parameters.get_secret(settings.database_secret_arn, transform="json", max_age=300)
        if not isinstance(secret, dict):
            raise ConfigError("database secret is not a JSON object")
        return url_from_secret(secret, settings.database_host)
    raise ConfigError("no database configured: set DATABASE_URL or TICKWORK_DATABASE_SECRET_ARN")


class Database:
    """Per-thread connections to one database."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._local = threading.local()

    def connection(self) -> Connection:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            conn = connect(self.url)
            self._local.conn = conn
        return conn

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        conn = self.connection()
        with conn.transaction():
            yield conn

    def close(self) -> None:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
