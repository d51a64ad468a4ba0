"""Database connections: one per thread, opened lazily, reopened when broken.

Lambda runs one invocation at a time per environment, so this is one connection per warm
Lambda (through RDS Proxy in AWS). The local runtime runs several handlers on threads, each
with its own connection, exactly as separate Lambdas would.

Behind RDS Proxy a connection must never pin (the proxy would then hold one database
connection per client): no server-side prepared statements (`prepare_threshold=None`) and no
session-level state (SET, advisory locks, temporary tables); per-transaction settings
(`set_config(..., true)`) are fine. The migration runner's session advisory lock goes to the
instance directly, not through the proxy.

Engine connections (`Database`) bound every transaction they open: a process that hangs or
dies inside one (a Lambda frozen at its timeout, the tick stuck sending while it holds its
row locks) is ended by the server, its locks released, after
`TICKWORK_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS` idle, and no statement in it runs past
`TICKWORK_DB_STATEMENT_TIMEOUT_SECONDS`. They are set per transaction (`set_config(...,
true)`): RDS Proxy refuses startup options ("doesn't support command-line options") and a
session SET would pin. Migrations connect on their own (`connect`), without these limits.

The API logs in as `tickwork_api_login`, a role with no privileges of its own that can only
become `tickwork_api` (row-level security): `RESET ROLE` leaves it with nothing, and it
cannot `SET ROLE` to the owner. Its password is in its own secret in AWS; locally it is
derived from the owner's URL (`api_login_url`) and set by `provision_api_login`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.types.json import set_json_loads

from tickwork.platform.config import Settings
from tickwork.platform.errors import ConfigError, InputError

Connection = psycopg.Connection[Any]

API_LOGIN_ROLE = "tickwork_api_login"


_decode_json = json.JSONDecoder().decode


def load_json(data: bytes | str) -> Any:
    """json and jsonb values as json.loads gives them, without its guess of the text's
    encoding: Postgres sends text in the connection's encoding, UTF-8. A microsecond less per
    payload, on every row a dispatcher claims."""
    return _decode_json(data if isinstance(data, str) else data.decode())


def connect(url: str, **kwargs: Any) -> Connection:
    """An autocommit connection: every statement is its own transaction unless a block opens one.
    Statements are never prepared server-side, so RDS Proxy never pins the connection."""
    kwargs.setdefault("prepare_threshold", None)
    conn = psycopg.connect(url, autocommit=True, **kwargs)
    set_json_loads(load_json, conn)
    return conn


@dataclass(frozen=True)
class SessionLimits:
    """How long a transaction may sit idle, and a statement run, before the server ends it
    (seconds; 0: no limit)."""

    idle_in_transaction_seconds: float = 60.0
    statement_seconds: float = 300.0

    @classmethod
    def of(cls, settings: Settings) -> SessionLimits:
        return cls(
            settings.db_idle_in_transaction_timeout_seconds, settings.db_statement_timeout_seconds
        )


_SET_LIMITS = (
    "select set_config('idle_in_transaction_session_timeout', %(idle)s, true),"
    " set_config('statement_timeout', %(statement)s, true)"
)


class LimitedConnection(psycopg.Connection[Any]):
    """A connection whose every outermost transaction starts by setting its limits, local to
    that transaction (one more statement per transaction, no session state)."""

    limits = SessionLimits()

    @contextmanager
    def transaction(
        self, savepoint_name: str | None = None, force_rollback: bool = False
    ) -> Iterator[psycopg.Transaction]:
        outermost = self.info.transaction_status == TransactionStatus.IDLE
        with super().transaction(savepoint_name, force_rollback) as tx:
            if outermost:
                self.execute(_SET_LIMITS, {
                    "idle": f"{int(self.limits.idle_in_transaction_seconds * 1000)}ms",
                    "statement": f"{int(self.limits.statement_seconds * 1000)}ms",
                })  # fmt: skip
            yield tx


def connect_limited(url: str, limits: SessionLimits) -> Connection:
    conn = LimitedConnection.connect(url, autocommit=True, prepare_threshold=None)
    conn.limits = limits
    set_json_loads(load_json, conn)
    return conn


def api_login_url(owner_url: str) -> str:
    """The API's URL beside the owner's (local runtime, tests): same server and database,
    logged in as the API login role, with a password derived from the owner's URL (whoever
    knows the owner's URL may act as the API anyway)."""
    parts = urlsplit(owner_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    password = local_api_password(owner_url)
    netloc = f"{API_LOGIN_ROLE}:{password}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def local_api_password(owner_url: str) -> str:
    # From the server and the owner's credentials only: every database on one server shares
    # the (per-cluster) role, so they must agree on its password.
    parts = urlsplit(owner_url)
    return hashlib.sha256(f"tickwork api login\n{parts.netloc}".encode()).hexdigest()


def local_api_login(owner_url: str) -> str:
    """Make the API login usable beside `owner_url` (migrated) and return its URL."""
    url = api_login_url(owner_url)
    try:
        with connect(url, connect_timeout=5):
            return url  # already usable (same password, or a server that trusts local users)
    except psycopg.OperationalError:
        pass
    with connect(owner_url) as conn:
        provision_api_login(conn, local_api_password(owner_url))
    return url


def provision_api_login(conn: Connection, password: str) -> None:
    """Give the API login role `password` (run as the owner after migrating). Only a SCRAM
    verifier computed here reaches the server, so no statement log holds the password."""
    verifier = conn.pgconn.encrypt_password(
        password.encode(), API_LOGIN_ROLE.encode(), b"scram-sha-256"
    ).decode()
    conn.execute(
        sql.SQL("alter role {} with password {}").format(
            sql.Identifier(API_LOGIN_ROLE), sql.Literal(verifier)
        )
    )


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


def read_secret(arn: str) -> dict[str, Any]:
    from aws_lambda_powertools.utilities import parameters  # noqa: PLC0415 - lazy: Parameters builds boto3 clients (cold start)

    secret = parameters.get_secret(arn, transform="json", max_age=300)
    if not isinstance(secret, dict):
        raise ConfigError("database secret is not a JSON object")
    return secret


def resolve_url(settings: Settings) -> str:
    if settings.database_url:
        return settings.database_url
    if settings.database_secret_arn:
        return url_from_secret(read_secret(settings.database_secret_arn), settings.database_host)
    raise ConfigError("no database configured: set DATABASE_URL or TICKWORK_DATABASE_SECRET_ARN")


class Database:
    """Per-thread connections to one database, each bounded by `limits`."""

    def __init__(self, url: str, limits: SessionLimits | None = None) -> None:
        self.url = url
        self.limits = limits or SessionLimits()
        self._local = threading.local()

    def connection(self) -> Connection:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            conn = connect_limited(self.url, self.limits)
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
