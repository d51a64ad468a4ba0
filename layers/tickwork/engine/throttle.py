"""Rate limits at dispatch: at most N sends a second, minute or hour per action type and per
connection, counted across every dispatcher.

Each limited scope (`type:<action type>:<per>`, `connection:<id>:<per>`) has one counter row
in Postgres (`rate_windows`, migration 0030): its current window, aligned to the epoch, and
the sends the window admitted. A claimed wave takes its slots in one statement, which locks
the wave's scopes in a fixed order, so two dispatchers cannot both take the last slot; its
rows go in groups of consecutive rows sharing their scopes and windows (a wave due at once
is one group), each group taking its slots in one step, so the statement's cost follows the
groups, not the rows. A
row whose scopes all have room is sent; a row over a limit is handed back before any
provider sees it (submitted → queued, the attempt not counted) with `next_attempt_at` at
the window where its place in line falls, and its change log says which limit and until
when (`throttled`). Nothing is failed for a limit.

A type without limits, sending through connections without limits, pays nothing: no
statement is made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

from tickwork.actions import model, store
from tickwork.actions.model import Claimed
from tickwork.platform.config import RateLimit
from tickwork.platform.db import Connection
from tickwork.platform.sql import query

_TAKE = query("take_rate_slots")
_LOG = query("log_throttled")


@dataclass(frozen=True)
class Scope:
    name: str
    limit: RateLimit
    words: str  # what it limits, for the change log: "sms", "connection <id>"


@dataclass(frozen=True)
class Held:
    """A row a limit held back, and until when."""

    action: Claimed
    until: datetime
    reason: str


def type_scopes(action_type: str, limits: Sequence[RateLimit]) -> list[Scope]:
    return [
        Scope(f"type:{action_type}:{limit.per}", limit, f"the {action_type} limit")
        for limit in limits
    ]


def connection_scopes(connection_id: UUID, limits: Sequence[RateLimit]) -> list[Scope]:
    return [
        Scope(f"connection:{connection_id}:{limit.per}", limit,
              f"connection {connection_id}'s limit")
        for limit in limits
    ]  # fmt: skip


def throttle(
    conn: Connection,
    claimed: Sequence[Claimed],
    scopes_of: Mapping[UUID, Sequence[Scope]],
    now: datetime,
) -> tuple[list[Claimed], list[Held]]:
    """The claimed rows that may be sent now, and those handed back to a later window (in
    the change log). `scopes_of` names each limited row's scopes; the others pass. One
    statement when no row is held back, whose size grows with the wave's groups (consecutive
    rows sharing their scopes and windows), not with its rows."""
    limited = [(a, scopes) for a in claimed if (scopes := scopes_of.get(a.id))]
    if not limited:
        return list(claimed), []
    # Sent in due order: the window of each is the later of now and its due time.
    limited.sort(key=lambda pair: pair[0].due_at)
    groups = _groups(limited, now)
    by_name = {s.name: s for group in groups for s in group.scopes}
    names = sorted(by_name)
    index = {name: i + 1 for i, name in enumerate(names)}
    entry_groups: list[int] = []
    entry_scopes: list[int] = []
    entry_windows: list[datetime] = []
    for number, group in enumerate(groups, start=1):
        for scope, window in zip(group.scopes, group.windows, strict=True):
            entry_groups.append(number)
            entry_scopes.append(index[scope.name])
            entry_windows.append(datetime.fromtimestamp(window * scope.limit.seconds, UTC))
    params = {
        "scopes": names,
        "limits": [by_name[n].limit.limit for n in names],
        "periods": [by_name[n].limit.seconds for n in names],
        "group_sizes": [len(group.rows) for group in groups],
        "entry_groups": entry_groups,
        "entry_scopes": entry_scopes,
        "entry_windows": entry_windows,
    }
    answers = conn.execute(_TAKE, params).fetchall()
    held: list[Held] = []
    for group, (admitted, retry_ats, held_by) in zip(groups, answers, strict=True):
        for action, until, number in zip(group.rows[admitted:], retry_ats, held_by, strict=True):
            scope = by_name[names[number - 1]]
            held.append(Held(action, until, f"{scope.words} of {scope.limit.words()} is reached"))
    if not held:
        return list(claimed), []
    _hand_back(conn, held)
    refused = {h.action.id for h in held}
    return [a for a in claimed if a.id not in refused], held


@dataclass
class _Group:
    """Consecutive rows of a wave that share their scopes and their window in each: they
    take their slots at once."""

    scopes: Sequence[Scope]
    names: tuple[str, ...]
    windows: tuple[int, ...]  # each scope's window, its number since the epoch
    ends: float  # when the first of those windows ends (epoch seconds)
    rows: list[Claimed]


def _groups(limited: Sequence[tuple[Claimed, Sequence[Scope]]], now: datetime) -> list[_Group]:
    """The rows (in due order, with their scopes) in groups of consecutive rows sharing
    their scopes and their window in each, for the later of now and the row's due time.
    Only consecutive rows join, so the order in which rows take slots is kept; that time
    only grows down the wave, so a row shares its group's windows if it comes before the
    first of them ends."""
    groups: list[_Group] = []
    group: _Group | None = None
    for action, scopes in limited:
        due = action.due_at
        at = (due if due > now else now).timestamp()
        if (
            group is not None
            and at < group.ends
            and (scopes is group.scopes or tuple(s.name for s in scopes) == group.names)
        ):
            group.rows.append(action)
            continue
        windows = tuple(int(at // s.limit.seconds) for s in scopes)
        ends = min((w + 1) * s.limit.seconds for w, s in zip(windows, scopes, strict=True))
        group = _Group(scopes, tuple(s.name for s in scopes), windows, ends, [action])
        groups.append(group)
    return groups


def _hand_back(conn: Connection, held: Sequence[Held]) -> None:
    """Held rows back to queued at their window (never sent: the attempt is not counted),
    and in their change log, together."""
    with conn.transaction():
        store.finalize(
            conn, [model.reverted(h.action.id, h.until, f"throttled: {h.reason}") for h in held]
        )
        conn.execute(
            _LOG,
            {"ids": [h.action.id for h in held], "reasons": [h.reason for h in held],
             "old_ats": [h.action.due_at for h in held], "new_ats": [h.until for h in held]},
        )  # fmt: skip
