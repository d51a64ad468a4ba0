"""Scheduled actions in Postgres: insert, read, and every state transition as one conditional
UPDATE naming the status it expects; claims and finalizations a batch at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from operator import itemgetter
from typing import Any, TypeVar, cast
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from tickwork.actions.model import (
    Action,
    Claimed,
    Finalization,
    NewAction,
    Scheduled,
    Transition,
    action_from_row,
    claimed_of,
    fields_of,
)
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection, storable
from tickwork.platform.errors import (
    ConflictError,
    InputError,
    NotFoundError,
)
from tickwork.platform.sql import query

_INSERT = query("insert_action")
_GET = query("get_action")
_GET_BY_DEDUPE_KEY = query("get_action_by_dedupe_key")
_CANCEL = query("cancel_action")
_RETRY = query("retry_action")
_CLAIM = query("claim_actions")
_CLAIM_ADDRESSED = query("claim_addressed_actions")
_FINALIZE = query("finalize_actions")
_FINALIZE_PUBLISHED = query("finalize_published")


RowT = TypeVar("RowT", bound=Claimed)


# ----------------------------------------------------------------------- database errors

_CONFLICT_MESSAGES = {
    "ux_scheduled_actions_active_thing_target": (
        "an active action already exists for this thing_id and target_key; cancel or"
        " reschedule it instead"
    ),
    "scheduled_actions_publish_guard": (
        "this thing_id and target_key were already published; it will not be sent again"
    ),
    "ux_scheduled_actions_dedupe": "an action with this idempotency key already exists",
}


@contextmanager
def integrity_errors() -> Iterator[None]:
    """Turn constraint violations into domain errors the API can explain."""
    try:
        with storable():
            yield
    except psycopg.errors.UniqueViolation as exc:
        constraint = exc.diag.constraint_name or ""
        message = _CONFLICT_MESSAGES.get(constraint, "the action conflicts with an existing one")
        raise ConflictError(message, details={"constraint": constraint}) from exc
    except psycopg.errors.ForeignKeyViolation as exc:
        raise NotFoundError("the workspace or referenced action does not exist") from exc
    except psycopg.errors.CheckViolation as exc:
        raise InputError(
            f"the action breaks a rule: {exc.diag.constraint_name or exc.diag.message_primary}"
        ) from exc


# ------------------------------------------------------------------------- transitions


def insert(conn: Connection, workspace_id: UUID, new: NewAction) -> Scheduled:
    params = fields_of(new) | {
        "workspace_id": workspace_id, "payload": Jsonb(new.payload), "tags": list(new.tags)
    }  # fmt: skip
    with integrity_errors(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_INSERT, params).fetchone()
        if row is not None:
            return Scheduled(action_from_row(row), created=True)
        # The dedupe key was taken: the first request's row is the answer.
        row = cur.execute(
            _GET_BY_DEDUPE_KEY, {"workspace_id": workspace_id, "dedupe_key": new.dedupe_key}
        ).fetchone()
    if row is None:  # pragma: no cover - the conflicting row was deleted in between
        raise ConflictError("the idempotency key was taken by a row that no longer exists")
    return Scheduled(action_from_row(row), created=False)


def by_dedupe_key(conn: Connection, workspace_id: UUID, key: str | None) -> Action | None:
    if key is None:
        return None
    with storable(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            _GET_BY_DEDUPE_KEY, {"workspace_id": workspace_id, "dedupe_key": key}
        ).fetchone()
    return action_from_row(row) if row else None


def get(conn: Connection, workspace_id: UUID, action_id: UUID) -> Action | None:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_GET, {"id": action_id, "workspace_id": workspace_id}).fetchone()
    return action_from_row(row) if row else None


def _transition(conn: Connection, sql: Any, params: dict[str, Any]) -> Transition:
    with integrity_errors(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(sql, params).fetchone()
    if row is None:
        return Transition(changed=False, action=None)
    return Transition(changed=bool(row["changed"]), action=action_from_row(row))


def cancel(
    conn: Connection,
    workspace_id: UUID,
    action_id: UUID,
    *,
    reason: str | None = None,
    message: str | None = None,
) -> Transition:
    """queued → cancelled. Unchanged (with the row) when it is past queued. A producer
    cancelling a row it made names why (`reason` becomes the row's error_code)."""
    params = {"id": action_id, "workspace_id": workspace_id, "reason": reason, "message": message}
    return _transition(conn, _CANCEL, params)


def retry(conn: Connection, workspace_id: UUID, action_id: UUID, settings: Settings) -> Transition:
    """failed → queued on the same row, at most `max_manual_retries` times; due at once."""
    return _transition(
        conn,
        _RETRY,
        {
            "id": action_id,
            "workspace_id": workspace_id,
            "max_manual_retries": settings.max_manual_retries,
        },
    )


def claim(
    conn: Connection,
    action_type: str,
    ids: Sequence[UUID],
    *,
    early_tolerance: float = 0.0,
    max_lateness: float | None = None,
    reclaim_after: float | None = None,
    channel: str | None = None,
    route_provider: str | None = None,
) -> list[Claimed]:
    """queued → submitted for every id that is queued, due (allowing `early_tolerance` seconds
    of clock skew) and not later than `max_lateness`; one statement for the batch. With
    `reclaim_after`, also a row left `submitted` longer than that by a claimer that died
    (only for providers that deduplicate: the call may be made a second time). With a
    `channel` (the provider sends email or SMS), a queued row addressed to a suppressed
    address is cancelled (`suppressed`) in the same statement and not returned. With a
    `route_provider` (the first provider of a type with fallbacks), each claimed attempt's
    route is recorded as that provider through the row's own connection."""
    if not ids:
        return []
    params = {
        "ids": uuid_array(ids),
        "action_type": action_type,
        "early_tolerance": early_tolerance,
        "max_lateness": max_lateness,
        "reclaim_after": reclaim_after,
        "route_provider": route_provider,
    }
    if channel is not None:
        params["channel"] = channel
    # Binary results: a claimed wave's timestamps and ids load in a third less time.
    with conn.cursor(binary=True) as cur:
        rows = cur.execute(_CLAIM if channel is None else _CLAIM_ADDRESSED, params).fetchall()
        claimed = rows_as(Claimed, cur, rows)
    if channel is None:
        return claimed
    # Rows the claim cancelled (suppressed) are not the dispatcher's to send.
    return [action for action in claimed if action.status == "submitted"]


def rows_as(kind: type[RowT], cur: psycopg.Cursor[Any], rows: list[Any]) -> list[RowT]:
    """Rows fetched as tuples, as Actions or Claimed: a claimed wave is the hot path, where
    building each row through a dict (class_row) costs more than the statement."""
    if not rows:
        return []
    assert cur.description is not None
    names = [column.name for column in cur.description]
    pick = itemgetter(*(names.index(name) for name in kind.__dataclass_fields__))
    if kind is Claimed:
        return cast(list[RowT], [claimed_of(pick(row)) for row in rows])
    return [kind(*pick(row)) for row in rows]


# Arrays sent as one Postgres array literal: psycopg dumps a list element by element in
# Python, which costs more than the finalize statement itself for a wave of a thousand.
def uuid_array(values: Iterable[UUID | str]) -> str:
    """Ids as the text of a uuid[]; an id given as text is parsed first, so nothing but a
    uuid can reach the literal."""
    return (
        "{" + ",".join([v.hex if isinstance(v, UUID) else UUID(str(v)).hex for v in values]) + "}"
    )


def text_array(values: Iterable[str | None]) -> str:
    return (
        "{"
        + ",".join(
            [
                "NULL"
                if value is None
                else '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
                for value in values
            ]
        )
        + "}"
    )


# Text a provider put in an outcome is stored bounded, and without the NUL characters
# Postgres refuses, so one receiver's odd answer cannot make the batch's finalize fail.
MAX_OUTCOME_TEXT = 2000


def _outcome_text(value: str | None) -> str | None:
    if value is None:
        return None
    return value.replace("\x00", "")[:MAX_OUTCOME_TEXT]


def finalize(
    conn: Connection, outcomes: Sequence[Finalization], *, ledger: bool = True
) -> dict[UUID, str]:
    """Apply outcomes to submitted rows in one statement; returns id → new status for the rows
    that were still submitted (a row recovered as stuck meanwhile is left as it is). The
    calls go to the ledger (`ledger`: also a delivery written late)."""
    if not outcomes:
        return {}
    if all(_published_alone(o) for o in outcomes):
        return _finalize_published(conn, outcomes, ledger)
    return _finalize_any(conn, outcomes, ledger)


def _finalize_any(
    conn: Connection, outcomes: Sequence[Finalization], ledger: bool
) -> dict[UUID, str]:
    columns = {
        "ids": uuid_array(o.action_id for o in outcomes),
        "statuses": text_array(o.status for o in outcomes),
        "provider_ids": text_array(_outcome_text(o.provider_id) for o in outcomes),
        "error_codes": text_array(o.error_code for o in outcomes),
        "last_errors": text_array(_outcome_text(o.last_error) for o in outcomes),
        "next_attempt_ats": [o.next_attempt_at for o in outcomes],
        "attempt_deltas": "{" + ",".join([str(o.attempt_delta) for o in outcomes]) + "}",
    }
    columns |= attempt_columns(outcomes, ledger)
    rows = conn.execute(_FINALIZE, columns).fetchall()
    return {row[0]: row[1] for row in rows}


def _published_alone(outcome: Finalization) -> bool:
    """A publication its row records by itself: no ledger entry, nothing else to write."""
    return (
        outcome.status == "published"
        and outcome.attempt is None
        and outcome.attempt_delta == 0
        and outcome.error_code is None
        and outcome.last_error is None
        and outcome.next_attempt_at is None
    )


def _finalize_published(
    conn: Connection, outcomes: Sequence[Finalization], ledger: bool
) -> dict[UUID, str]:
    """A wave of publications alone (finalize_published); the rows that moved on meanwhile
    (none, nearly always) through the full statement, which records their late delivery."""
    keys = [str(o.action_id) for o in outcomes]  # an id's text: the array's and the key
    rows = conn.execute(
        _FINALIZE_PUBLISHED,
        {"ids": "{" + ",".join(keys) + "}",
         "provider_ids": json.dumps(
             dict(zip(keys, [_outcome_text(o.provider_id) for o in outcomes], strict=True))
         )},
    ).fetchall()  # fmt: skip
    done = {row[0]: row[1] for row in rows}
    if len(done) < len(outcomes):
        done |= _finalize_any(conn, [o for o in outcomes if o.action_id not in done], ledger)
    return done


# The ledger's excerpt is bounded as its CHECK says.
MAX_EXCERPT = 300


def attempt_columns(outcomes: Sequence[Finalization], ledger: bool = True) -> dict[str, Any]:
    """The finalize's ledger parameters (text literals, as the other columns): the calls
    that did not deliver; none for a wave that delivered (its rows record their calls)."""
    calls = [(o.action_id, o.attempt) for o in outcomes if o.attempt is not None]
    return {
        "ledger": ledger,
        "attempt_ids": uuid_array(i for i, _ in calls),
        "attempt_numbers": "{" + ",".join([str(a.number) for _, a in calls]) + "}",
        "attempt_outcomes": text_array(a.outcome for _, a in calls),
        "attempt_started": "{" + ",".join([repr(a.started) for _, a in calls]) + "}",
        "attempt_latencies": "{"
        + ",".join([str(round((a.finished - a.started) * 1000)) for _, a in calls])
        + "}",
        "attempt_codes": text_array(_bounded(a.code, 100) for _, a in calls),
        "attempt_excerpts": text_array(_bounded(a.excerpt, MAX_EXCERPT) for _, a in calls),
        "attempt_providers": text_array(a.provider for _, a in calls),
        "attempt_reasons": text_array(a.failover_reason for _, a in calls),
    }


def _bounded(value: str | None, limit: int) -> str | None:
    if value is None:
        return None
    return value.replace("\x00", "")[:limit]
