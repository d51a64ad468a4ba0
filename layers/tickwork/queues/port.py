"""The queue port. A message is a doorbell: it carries a row id and the row's due time,
never the action itself (Postgres is the source of truth)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple, Protocol
from uuid import UUID

import psycopg
from psycopg.pq import Format

MAX_DELAY_SECONDS = 900  # SQS DelaySeconds upper bound


class OutgoingMessage(NamedTuple):
    """A row's doorbell as handed to its queue at `sent_at`. A tuple, not a dataclass: a
    tick builds one per row of a burst."""

    action_id: UUID
    action_type: str
    due_at: datetime
    sent_at: datetime

    @property
    def delay_seconds(self) -> int:
        # Whole seconds not yet passed: the message never arrives after its due second, and
        # the dispatcher waits out the sub-second remainder.
        remaining = (self.due_at - self.sent_at).total_seconds()
        return min(MAX_DELAY_SECONDS, max(0, math.floor(remaining)))

    def body(self) -> str:
        # What json.dumps gives, written directly: a tick sends a burst's every message.
        # An id and an ISO time need no escaping; a type name needs none when plain.
        if self.action_type.isidentifier() and self.action_type.isascii():
            return (
                f'{{"id": "{self.action_id}", "type": "{self.action_type}",'
                f' "due_at": "{self.due_at.isoformat()}"}}'
            )
        return json.dumps(
            {"id": str(self.action_id), "type": self.action_type, "due_at": self.due_at.isoformat()}
        )


class DecodedBody(NamedTuple):
    """A received message's fields. A tuple, not a dataclass: a dispatcher decodes one per
    message of a burst."""

    action_id: UUID
    action_type: str
    due_at: datetime


# The body `OutgoingMessage.body` writes for a plain type name: read without a JSON parse.
# Its strings hold no quote or backslash, so they are what json.loads would give.
_PLAIN_BODY = re.compile(
    r'\{"id": "([0-9a-f-]{36})", "type": "([A-Za-z_][A-Za-z0-9_]*)", "due_at": "([^"\\]*)"\}'
)


# The parser of uuid text psycopg loads query results with (C, with psycopg[binary]): about
# a tenth of uuid.UUID(str)'s time, and for the plain body's 36 characters it refuses the
# strings UUID refuses. A dispatcher decodes one id per message of a burst.
_UUID_OID = psycopg.adapters.types["uuid"].oid
_uuid_loader = psycopg.adapters.get_loader(_UUID_OID, Format.TEXT)
assert _uuid_loader is not None
_parse_uuid: Callable[[bytes], UUID] = _uuid_loader(_UUID_OID).load


def decode_body(body: str) -> DecodedBody | None:
    """The message body, or None when it is not one of ours."""
    try:
        plain = _PLAIN_BODY.fullmatch(body)
        if plain is not None:
            text_id, action_type, due = plain.groups()
            action_id = _parse_uuid(text_id.encode())
        else:
            data = json.loads(body)
            action_id, action_type, due = UUID(data["id"]), data["type"], data["due_at"]
        due_at = datetime.fromisoformat(due)
        if due_at.tzinfo is None or not isinstance(action_type, str):
            return None
        return DecodedBody(action_id, action_type, due_at)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


@dataclass(frozen=True, slots=True)
class VisibilityChange:
    """Make a received message visible again after `seconds` (SQS ChangeMessageVisibility)."""

    receipt_handle: str
    seconds: int


def retry_visibility(receive_count: int, base: float, cap: float) -> int:
    """How long a message that failed on infrastructure stays hidden before its next try:
    base, doubled per receive, at most `cap` (the queue's own visibility timeout)."""
    exponent = min(max(0, receive_count - 1), 20)
    return int(min(cap, base * 2.0**exponent))


class QueuePort(Protocol):
    def send(self, action_type: str, messages: Sequence[OutgoingMessage]) -> list[UUID]:
        """Send to the queue of `action_type`; returns the action ids that were NOT sent."""
        ...

    def change_visibility(self, action_type: str, changes: Sequence[VisibilityChange]) -> int:
        """Shorten (or lengthen) the visibility of received messages of `action_type`'s
        queue; returns how many changes the queue accepted."""
        ...
