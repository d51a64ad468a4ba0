"""Provider failover in Postgres: the ledger history a route reads, the fallback connections,
and the circuits (`provider_circuits`, migration 0032), read once per wave and written back
conditionally on the version read, so dispatchers sharing a circuit never overwrite each
other's answers: a write that lost is read again and applied again."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any
from uuid import UUID

from tickwork.engine.failover import Circuit, PastAttempt
from tickwork.platform.db import Connection
from tickwork.platform.sql import query

_HISTORY = query("failover_history")
_CONNECTIONS = query("failover_connections")
_READ = query("read_circuits")
_WRITE = query("write_circuit")
_STATUS = query("circuits_status")
_RECORD = query("record_routes")

# The circuit of a provider's stack-wide options (rows naming no connection).
STACK = UUID(int=0)
# How often a circuit's write is retried after another dispatcher changed it first.
WRITE_TRIES = 5

CircuitKey = tuple[str, UUID]  # (provider, connection id or STACK)


def history(conn: Connection, ids: Sequence[UUID]) -> dict[UUID, list[PastAttempt]]:
    """Each row's earlier attempts, oldest first; a row without any is absent."""
    found: dict[UUID, list[PastAttempt]] = {}
    if not ids:
        return found
    for action_id, provider, outcome, settled in conn.execute(_HISTORY, {"ids": list(ids)}):
        found.setdefault(action_id, []).append(PastAttempt(provider, outcome, bool(settled)))
    return found


def record_routes(
    conn: Connection, routes: Sequence[tuple[UUID, int, str, UUID | None]]
) -> set[UUID]:
    """Record, before any call, where each row's attempt goes: (row, attempt, provider,
    connection or None for the stack's options), one statement for the wave. Returns the
    rows recorded (the others are no longer this claim's: they are not called)."""
    if not routes:
        return set()
    params = {
        "ids": [r[0] for r in routes],
        "attempts": [r[1] for r in routes],
        "providers": [r[2] for r in routes],
        "connection_ids": [r[3] for r in routes],
    }
    return {row[0] for row in conn.execute(_RECORD, params)}


def fallback_connections(
    conn: Connection, wanted: Iterable[tuple[UUID, str]]
) -> dict[tuple[UUID, str], UUID]:
    """For each (workspace, provider): its oldest active connection of that provider."""
    pairs = sorted(set(wanted))
    if not pairs:
        return {}
    rows = conn.execute(
        _CONNECTIONS,
        {"workspace_ids": [w for w, _ in pairs], "providers": [p for _, p in pairs]},
    )
    return {(workspace, provider): connection_id for workspace, provider, connection_id in rows}


def read(conn: Connection, keys: Iterable[CircuitKey]) -> dict[CircuitKey, tuple[Circuit, int]]:
    """The circuits of `keys` with the version read; a key never written is closed, 0."""
    wanted = sorted(set(keys))
    found: dict[CircuitKey, tuple[Circuit, int]] = dict.fromkeys(wanted, (Circuit(), 0))
    if not wanted:
        return found
    params = {"providers": [p for p, _ in wanted], "connection_ids": [c for _, c in wanted]}
    for row in conn.execute(_READ, params):
        provider, connection_id, state, failures, started, opened, probe_taken_at, version = row
        found[(provider, connection_id)] = (
            Circuit(state, failures, started, opened, probe_taken_at),
            version,
        )
    return found


def write(conn: Connection, key: CircuitKey, circuit: Circuit, version: int) -> int | None:
    """Store `circuit` if the stored one is still `version`; its new version, else None."""
    params: dict[str, Any] = {
        "provider": key[0],
        "connection_id": key[1],
        "state": circuit.state,
        "failures": circuit.failures,
        "window_started": circuit.window_started,
        "opened_at": circuit.opened_at,
        "probe_taken_at": circuit.probe_taken_at,
        "version": version,
    }
    row = conn.execute(_WRITE, params).fetchone()
    return None if row is None else int(row[0])


def update(
    conn: Connection,
    key: CircuitKey,
    change: Callable[[Circuit], Circuit],
    known: tuple[Circuit, int] | None = None,
) -> Circuit:
    """Apply `change` to the stored circuit, conditionally, reading it again when another
    dispatcher wrote it first; nothing is written when it changes nothing."""
    current = known
    for _ in range(WRITE_TRIES):
        if current is None:
            current = read(conn, [key])[key]
        circuit, version = current
        changed = change(circuit)
        if changed == circuit:
            return circuit
        if write(conn, key, changed, version) is not None:
            return changed
        current = None
    raise RuntimeError(f"the circuit of {key[0]} kept changing under this dispatcher")


def status(conn: Connection) -> list[dict[str, Any]]:
    """Circuits not closed: provider, connection (None: the stack's), state, since when, and
    when a half-open one's probe was taken (None: none is out)."""
    rows = conn.execute(_STATUS).fetchall()
    return [
        {
            "provider": provider,
            "connection_id": None if connection_id == STACK else connection_id,
            "state": state,
            "failures": failures,
            "opened_at": opened_at,
            "probe_taken_at": probe_taken_at,
        }
        for provider, connection_id, state, failures, opened_at, probe_taken_at in rows
    ]
