"""Claim-time admission: the policies that must be decided when a row fires, for the rows
that have any (drip steps, messages to recipients), right after the claim and before any
provider call. Rows without them are never looked at: the claim stays one statement, so
the dispatcher's hot path keeps its statement count.

A claimed row is admitted (sent), or handed back before any provider sees it (submitted →
queued, the claim's attempt not counted) and then:

- **skipped** (cancelled, `skipped`): a drip step whose conditions do not hold on the
  enrollment's current data, or whose enrollment has exited meanwhile (`exited`);
- **deferred** (`next_attempt_at` later, `publish_at` kept): inside the recipient's quiet
  hours (re-checked here: they may have changed since the row was made), or over a cap
  with the `defer` policy: to the next allowed slot;
- **dropped** (cancelled, `capped`): over a cap with the `drop` policy.

Caps are taken race-free: a per-(recipient, channel, local day) counter row updated
conditionally (`sent < cap`, under its row lock) in admission's transaction, so two
dispatchers cannot both take the last slot; the loser's row is deferred or dropped. The
claimed rows are this dispatcher's alone (`submitted`), so every hand-back is a
conditional update of its own rows. A dispatcher that dies between the claim and the
admission leaves its rows `submitted`, as one dying before its provider calls does: the
tick fails them as `stuck`, never sends them twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from tickwork import events
from tickwork.actions import model, store
from tickwork.actions.model import Claimed
from tickwork.platform.db import Connection
from tickwork.platform.observability import logger
from tickwork.platform.sql import query
from tickwork.platform.wallclock import utcnow
from tickwork.recipients.model import (
    Recipient,
    allowed_at,
    local_day,
    next_day_slot,
    quiet_end,
    recipient_from_row,
)
from tickwork.sequences.fire import check_steps

_RECIPIENTS = query("recipients_of_actions")
_TAKE_SLOTS = query("take_cap_slots")
_CANCEL_REVERTED = query("cancel_reverted")
_LOG_DEFERS = query("log_defers")
INFRASTRUCTURE_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)
# An outcome event waiting for an earlier event of its action is tried again this soon: the
# earlier one is being sent or retried, and its own backoff decides when it is done.
EVENT_ORDER_WAIT = timedelta(seconds=2)


def _concerned(action: Claimed) -> bool:
    """Rows with claim-time policies: drip steps, messages to recipients, outcome events
    (which keep their action's order)."""
    return action.recipient_id is not None or action.source in ("sequence", "event")


@dataclass(frozen=True)
class _Defer:
    until: datetime
    reason: str


@dataclass(frozen=True)
class _Cancel:
    code: str  # skipped, exited, capped
    message: str


def claim_admitted(
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
    """The dispatcher's claim (`actions.store.claim`, which also cancels the rows addressed
    to a suppressed address of `channel`), then admission: drip steps and messages to
    recipients pass their policies (fire-time conditions, exits, quiet hours, caps) before
    any provider sees them; other rows pay nothing."""
    claimed = store.claim(
        conn, action_type, ids, early_tolerance=early_tolerance, max_lateness=max_lateness,
        reclaim_after=reclaim_after, channel=channel, route_provider=route_provider,
    )  # fmt: skip
    if any(_concerned(a) for a in claimed):
        return admit(conn, claimed)
    return claimed


def admit(
    conn: Connection, claimed: Sequence[Claimed], now: datetime | None = None
) -> list[Claimed]:
    """The claimed rows that may be sent now; the others are handed back, deferred or
    cancelled, with the change log saying why, in one transaction. If admission itself
    fails, the rows it concerns are handed back unsent (to be claimed again) and the rest
    of the batch goes on."""
    try:
        with conn.transaction():
            return _admit(conn, claimed, now or utcnow())
    except INFRASTRUCTURE_ERRORS:
        raise
    except Exception:
        concerned = [a for a in claimed if _concerned(a)]
        logger.exception(
            "admission failed; its rows go back to the queue",
            extra={"action_ids": [str(a.id) for a in concerned]},
        )
        store.finalize(
            conn, [model.reverted(a.id, None, "admission failed; retrying") for a in concerned]
        )
        handed_back = {a.id for a in concerned}
        return [a for a in claimed if a.id not in handed_back]


def _admit(conn: Connection, claimed: Sequence[Claimed], now: datetime) -> list[Claimed]:
    refused: dict[UUID, _Defer | _Cancel] = {}
    policies: dict[UUID, str] = {}
    behind = events.waiting_behind(conn, [a.id for a in claimed if a.source == "event"])
    if behind:
        # Not a defer of the change log: the event goes once the one before it has.
        store.finalize(conn, [
            model.reverted(i, now + EVENT_ORDER_WAIT, "waiting for an earlier event")
            for i in behind
        ])  # fmt: skip
        claimed = [a for a in claimed if a.id not in behind]
    steps = [a for a in claimed if a.source == "sequence"]
    if steps:
        for action_id, verdict in check_steps(conn, steps).items():
            if verdict.skip is not None:
                refused[action_id] = _Cancel(*verdict.skip)
            if verdict.cap_policy is not None:
                policies[action_id] = verdict.cap_policy
    addressed = [
        a for a in claimed
        if a.recipient_id is not None and not a.transactional and a.id not in refused
    ]  # fmt: skip
    if addressed:
        _apply_recipient_policies(conn, addressed, policies, refused, now)
    if refused:
        _hand_back(conn, claimed, refused)
    return [a for a in claimed if a.id not in refused]


def _apply_recipient_policies(
    conn: Connection,
    addressed: Sequence[Claimed],
    policies: dict[UUID, str],
    refused: dict[UUID, _Defer | _Cancel],
    now: datetime,
) -> None:
    keys = sorted({(a.workspace_id, str(a.recipient_id)) for a in addressed})
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            _RECIPIENTS,
            {"workspace_ids": [k[0] for k in keys], "recipient_ids": [k[1] for k in keys]},
        ).fetchall()
    recipients: dict[tuple[UUID, str], Recipient] = {
        (r["workspace_id"], r["recipient_id"]): recipient_from_row(r) for r in rows
    }
    capped: list[tuple[Claimed, Recipient, int]] = []
    for action in addressed:
        recipient = recipients.get((action.workspace_id, str(action.recipient_id)))
        if recipient is None:
            continue  # deleted since the row was made: nothing left to apply
        if quiet_end(now, recipient) is not None:
            refused[action.id] = _Defer(
                allowed_at(now, recipient), "in the recipient's quiet hours"
            )
            continue
        cap = recipient.caps.get(action.action_type)
        if cap is not None:
            capped.append((action, recipient, cap))
    if not capped:
        return
    params = {
        "workspace_ids": [a.workspace_id for a, _, _ in capped],
        "action_ids": [a.id for a, _, _ in capped],
        "recipients": [r.recipient_id for _, r, _ in capped],
        "channels": [a.action_type for a, _, _ in capped],
        "days": [local_day(now, r) for _, r, _ in capped],
        "caps": [cap for _, _, cap in capped],
    }
    admitted = dict(conn.execute(_TAKE_SLOTS, params).fetchall())
    for action, recipient, cap in capped:
        if admitted.get(action.id):
            continue
        why = f"the recipient's cap of {cap} {action.action_type} a day is reached"
        policy = policies.get(action.id, recipient.cap_policy)
        if policy == "drop":
            refused[action.id] = _Cancel("capped", f"dropped: {why}")
        else:
            refused[action.id] = _Defer(next_day_slot(now, recipient), why)


def _hand_back(
    conn: Connection, claimed: Sequence[Claimed], refused: dict[UUID, _Defer | _Cancel]
) -> None:
    """Refused rows back to queued (never sent: the attempt is not counted), then the
    cancellations, then the defers in the change log (cancels log themselves)."""
    by_id = {a.id: a for a in claimed}
    reverts = []
    for action_id, verdict in refused.items():
        if isinstance(verdict, _Defer):
            reverts.append(model.reverted(action_id, verdict.until, f"deferred: {verdict.reason}"))
        else:
            reverts.append(model.reverted(action_id, None, verdict.message))
    store.finalize(conn, reverts)
    cancels = [(i, v) for i, v in refused.items() if isinstance(v, _Cancel)]
    if cancels:
        conn.execute(
            _CANCEL_REVERTED,
            {"ids": [i for i, _ in cancels], "codes": [v.code for _, v in cancels],
             "messages": [v.message for _, v in cancels]},
        )  # fmt: skip
    defers = [(i, v) for i, v in refused.items() if isinstance(v, _Defer)]
    if defers:
        conn.execute(
            _LOG_DEFERS,
            {"ids": [i for i, _ in defers], "reasons": [v.reason for _, v in defers],
             "old_ats": [by_id[i].due_at for i, _ in defers],
             "new_ats": [v.until for _, v in defers]},
        )  # fmt: skip
