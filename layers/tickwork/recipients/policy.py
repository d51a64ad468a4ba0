"""Quiet hours where a message's time is decided: when its row is created, a time inside
the recipient's quiet hours moves to the end of the window, and the time asked for is kept
in `original_publish_at` (the change log records the move)."""

from __future__ import annotations

from dataclasses import replace
from uuid import UUID

from tickwork.actions.model import NewAction
from tickwork.platform.db import Connection
from tickwork.platform.wallclock import require_aware
from tickwork.recipients.model import UnknownRecipientError, allowed_at, check_recipient_id
from tickwork.recipients.store import find_recipient


def at_creation(conn: Connection, workspace_id: UUID, new: NewAction) -> NewAction:
    """`new` moved out of its recipient's quiet hours (unless transactional). An unknown
    recipient is refused: register it with PUT /v1/recipients/{id} first."""
    recipient_id = check_recipient_id(new.recipient_id)
    recipient = find_recipient(conn, workspace_id, recipient_id)
    if recipient is None:
        raise UnknownRecipientError(
            f"no recipient {recipient_id!r} in this workspace; register it with"
            " PUT /v1/recipients/{id} first",
            field="recipient_id",
        )
    if new.transactional:
        return new
    asked = require_aware(new.publish_at)
    moved = allowed_at(asked, recipient)
    if moved == asked:
        return new
    return replace(new, publish_at=moved, original_publish_at=asked)
