"""The queue port. A message is a doorbell: it carries row ids and their due time, never the
actions themselves (Postgres is the source of truth)."""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple, Protocol
from uuid import UUID

import psycopg
from psycopg.pq import Format

MAX_DELAY_SECONDS = 900  # SQS DelaySeconds upper bound


class OutgoingMessage(NamedTuple):
    """A doorbell as handed to its queue at `sent_at`: the rows of one action type and one
    workspace due at one instant (one, or up to the type's `rows_per_message` when many fall
    due together, as a burst at a round hour does). `group` names the workspace: the queue
    shares its consumers fairly between groups (SQS fair queues: the MessageGroupId), so a
    workspace's backlog does not hold back another's rows. A tuple, not a dataclass: a tick
    builds many."""

    action_ids: tuple[UUID, ...]
    action_type: str
    due_at: datetime
    sent_at: datetime
    group: str = ""

    @property
    def delay_seconds(self) -> int:
        # Whole seconds not yet passed: the message never arrives after its due second, and
        # the dispatcher waits out the sub-second remainder.
        remaining = (self.due_at - self.sent_at).total_seconds()
        return min(MAX_DELAY_SECONDS, max(0, math.floor(remaining)))

    def body(self) -> str:
        # What json.dumps gives, written directly: a tick sends a burst's every message.
        # An id and an ISO time need no escaping; a type name needs none when plain.
        # One row keeps the single "id" of earlier versions, which their dispatchers read.
        due_at = self.due_at.isoformat()
        if not (self.action_type.isidentifier() and self.action_type.isascii()):
            fields: dict[str, object] = {"type": self.action_type, "due_at": due_at}
            if len(self.action_ids) == 1:
                return json.dumps({"id": str(self.action_ids[0])} | fields)
            return json.dumps({"ids": [str(i) for i in self.action_ids]} | fields)
        if len(self.action_ids) == 1:
            ids = f'"id": "{self.action_ids[0]}"'
        else:
            ids = '"ids": ["' + '", "'.join([str(i) for i in self.action_ids]) + '"]'
        return f'{{{ids}, "type": "{self.action_type}", "due_at": "{due_at}"}}'


def doorbells(
    rows: Iterable[tuple[UUID, str, datetime, UUID]],
    sent_at: datetime,
    rows_per_message: Callable[[str], int],
) -> list[OutgoingMessage]:
    """Messages for (id, action type, due time, workspace) rows: the rows of one type and
    one workspace due at the same instant share messages of up to `rows_per_message(type)`
    ids; any other row has its own. A message's rows all have its due time, which the
    dispatcher hands back with them. Within each due instant the workspaces take turns
    (one message each, round robin), so a small workspace's row is never sent behind a big
    one's whole burst."""
    groups: dict[tuple[str, datetime], dict[UUID, list[UUID]]] = {}
    for action_id, action_type, due_at, workspace_id in rows:
        instant = groups.setdefault((action_type, due_at), {})
        instant.setdefault(workspace_id, []).append(action_id)
    messages = []
    for (action_type, due_at), by_workspace in groups.items():
        size = rows_per_message(action_type)
        lines = [
            [
                OutgoingMessage(tuple(ids[i : i + size]), action_type, due_at, sent_at, str(ws))
                for i in range(0, len(ids), size)
            ]
            for ws, ids in by_workspace.items()
        ]
        if len(lines) == 1:
            messages.extend(lines[0])
            continue
        for turn in itertools.zip_longest(*lines):
            messages.extend(message for message in turn if message is not None)
    return messages


class MessageRow(NamedTuple):
    """A row a received message rings for, with the due time the message carried. A tuple,
    not a dataclass: a dispatcher decodes one per row of a burst."""

    action_id: UUID
    action_type: str
    due_at: datetime


# The body `OutgoingMessage.body` writes for one row of a plain type name: read without a
# JSON parse. Its strings hold no quote or backslash, so they are what json.loads would give.
_PLAIN_BODY = re.compile(
    r'\{"id": "([0-9a-f-]{36})", "type": "([A-Za-z_][A-Za-z0-9_]*)", "due_at": "([^"\\]*)"\}'
)
# An id as str(UUID) writes it, which the parser below reads as uuid.UUID(str) would.
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


# The parser of uuid text psycopg loads query results with (C, with psycopg[binary]): about
# a tenth of uuid.UUID(str)'s time, and for the plain body's 36 characters it refuses the
# strings UUID refuses. A dispatcher decodes one id per row of a burst.
_UUID_OID = psycopg.adapters.types["uuid"].oid
_uuid_loader = psycopg.adapters.get_loader(_UUID_OID, Format.TEXT)
assert _uuid_loader is not None
_parse_uuid: Callable[[bytes], UUID] = _uuid_loader(_UUID_OID).load


def _uuid_of(text: object) -> UUID:
    if not isinstance(text, str):
        raise TypeError("an id is not a string")
    if _CANONICAL_UUID.fullmatch(text):
        return _parse_uuid(text.encode())
    return UUID(text)


def decode_body(body: str) -> list[MessageRow] | None:
    """The rows a message body rings for, or None when it is not one of ours."""
    try:
        plain = _PLAIN_BODY.fullmatch(body)
        if plain is not None:
            text_id, action_type, due = plain.groups()
            ids = [_parse_uuid(text_id.encode())]
        else:
            data = json.loads(body)
            action_type, due = data["type"], data["due_at"]
            if "ids" in data:
                texts = data["ids"]
                if "id" in data or not isinstance(texts, list) or not texts:
                    return None
                ids = [_uuid_of(text) for text in texts]
            else:
                ids = [_uuid_of(data["id"])]
        due_at = datetime.fromisoformat(due)
        if due_at.tzinfo is None or not isinstance(action_type, str):
            return None
        return [MessageRow(action_id, action_type, due_at) for action_id in ids]
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
        """Send to the queue of `action_type`; returns the action ids that were NOT sent
        (every id of a message that failed)."""
        ...

    def change_visibility(self, action_type: str, changes: Sequence[VisibilityChange]) -> int:
        """Shorten (or lengthen) the visibility of received messages of `action_type`'s
        queue; returns how many changes the queue accepted."""
        ...
