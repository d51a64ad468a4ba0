"""Quiet hours where a message's time is decided: when its row is created, a time inside
the recipient's quiet hours moves to the end of the window, and the time asked for is kept
in `original_publish_at` (the change log records the move). One-offs, rules and intents
go through `at_creation`; producers that insert many rows at once (a recurring schedule's
occurrences) look the recipient up once with `require_recipient` and place each row with
`placed`: the same rule either way."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Literal
from uuid import UUID

from tickwork.actions.model import NewAction
from tickwork.platform.db import Connection
from tickwork.platform.wallclock import require_aware
from tickwork.recipients.model import (
    Recipient,
    UnknownRecipientError,
    allowed_at,
    check_recipient_id,
)
from tickwork.recipients.store import find_recipient

# Where the zone of a wall time came from (answers say it as `timezone_from`).
TimezoneFrom = Literal["given", "recipient", "workspace"]


def require_recipient(conn: Connection, workspace_id: UUID, recipient_id: str | None) -> Recipient:
    """The workspace's recipient, or `unknown_recipient` (another workspace's is unknown
    here): register it with PUT /v1/recipients/{id} first."""
    checked = check_recipient_id(recipient_id)
    recipient = find_recipient(conn, workspace_id, checked)
    if recipient is None:
        raise UnknownRecipientError(
            f"no recipient {checked!r} in this workspace; register it with"
            " PUT /v1/recipients/{id} first",
            field="recipient_id",
        )
    return recipient


def placed(
    asked: datetime, recipient: Recipient, *, transactional: bool
) -> tuple[datetime, datetime | None]:
    """(publish_at, original_publish_at): `asked` moved out of the recipient's quiet hours,
    with the time asked for when it moved (None when it did not; transactional never does)."""
    asked = require_aware(asked)
    if transactional:
        return asked, None
    moved = allowed_at(asked, recipient)
    return (moved, asked) if moved != asked else (asked, None)


def at_creation(conn: Connection, workspace_id: UUID, new: NewAction) -> NewAction:
    """`new` moved out of its recipient's quiet hours (unless transactional). An unknown
    recipient is refused."""
    recipient = require_recipient(conn, workspace_id, new.recipient_id)
    publish_at, original = placed(new.publish_at, recipient, transactional=new.transactional)
    if original is None:
        return new
    return replace(new, publish_at=publish_at, original_publish_at=original)


def zone_for(
    conn: Connection,
    workspace_id: UUID,
    *,
    given: str | None,
    recipient_id: str | None,
    workspace_zone: str,
) -> tuple[str, TimezoneFrom]:
    """The zone a wall time with no offset is read in, and where it came from: the one
    given; else the recipient's, when there is a recipient (unknown: `unknown_recipient`);
    else the workspace's. One-offs, recurring schedules and intents all read it here."""
    if given is not None:
        return given, "given"
    if recipient_id is not None:
        return require_recipient(conn, workspace_id, recipient_id).timezone, "recipient"
    return workspace_zone, "workspace"
