"""The queue port. A message is a doorbell: it carries row ids and their due time, never the
actions themselves (Postgres is the source of truth)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import itemgetter
from typing import NamedTuple, Protocol
from uuid import UUID

import psycopg
from psycopg.pq import Format

MAX_DELAY_SECONDS = 900  # SQS DelaySeconds upper bound


# Rows of one type and one workspace due within this much of the first share a message.
# Under sustained load (thousands of rows a second, each at its own instant) a message then
# carries rows_per_message rows, not one, and a dispatcher claims and finalizes them in one
# statement each; the dispatcher waits out each row's own due time, so no row fires early.
# Tens of milliseconds: a dispatcher holds a message no longer than this beyond its first
# row, so other messages are not kept waiting for a free dispatcher.
MESSAGE_WINDOW = timedelta(milliseconds=50)
_MICROSECOND = timedelta(microseconds=1)


class OutgoingMessage(NamedTuple):
    """A doorbell as handed to its queue at `sent_at`: rows of one action type and one
    workspace, the first due at `due_at` and each of the others `offsets_us` microseconds
    after it (empty when all are due at `due_at`), at most the type's `rows_per_message`
    and within MESSAGE_WINDOW of the first. `group` names the workspace: the queue shares
    its consumers fairly between groups (SQS fair queues: the MessageGroupId), so a
    workspace's backlog does not hold back another's rows. A tuple, not a dataclass: a tick
    builds many."""

    action_ids: tuple[UUID, ...]
    action_type: str
    due_at: datetime
    sent_at: datetime
    group: str = ""
    offsets_us: tuple[int, ...] = ()

    @property
    def delay_seconds(self) -> int:
        # Whole seconds not yet passed: the message never arrives after its first row's due
        # second, and the dispatcher waits out each row's remainder.
        remaining = (self.due_at - self.sent_at).total_seconds()
        return min(MAX_DELAY_SECONDS, max(0, math.floor(remaining)))

    def body(self) -> str:
        # What json.dumps gives, written directly: a tick sends a burst's every message.
        # An id and an ISO time need no escaping; a type name needs none when plain.
        # One row keeps the single "id" of earlier versions, which their dispatchers read.
        # Rows due at different instants add "offsets_us" (microseconds after "due_at", one
        # per id): a dispatcher of an earlier version reads the ids and the first due time
        # and claims them all then, at most MESSAGE_WINDOW early, within its clock-skew
        # tolerance; nothing is lost or sent twice.
        due_at = self.due_at.isoformat()
        if not (self.action_type.isidentifier() and self.action_type.isascii()):
            fields: dict[str, object] = {"type": self.action_type, "due_at": due_at}
            if self.offsets_us:
                fields["offsets_us"] = list(self.offsets_us)
            if len(self.action_ids) == 1:
                return json.dumps({"id": str(self.action_ids[0])} | fields)
            return json.dumps({"ids": [str(i) for i in self.action_ids]} | fields)
        if len(self.action_ids) == 1:
            ids = f'"id": "{self.action_ids[0]}"'
        else:
            ids = '"ids": ["' + '", "'.join([str(i) for i in self.action_ids]) + '"]'
        body = f'{{{ids}, "type": "{self.action_type}", "due_at": "{due_at}"'
        if self.offsets_us:
            body += ', "offsets_us": [' + ", ".join(map(str, self.offsets_us)) + "]"
        return body + "}"


def doorbells(
    rows: Iterable[tuple[UUID, str, datetime, UUID]],
    sent_at: datetime,
    rows_per_message: Callable[[str], int],
    window: timedelta = MESSAGE_WINDOW,
) -> list[OutgoingMessage]:
    """Messages for (id, action type, due time, workspace) rows, in any order: the rows of
    one type and one workspace, in due order, share messages of up to
    `rows_per_message(type)` ids due within `window` of the message's first. Messages come
    in the order of their first due time; at one instant the workspaces take turns (one
    message each, round robin), so a small workspace's row is never sent behind a big one's
    whole burst."""
    lines: dict[tuple[str, UUID], list[tuple[datetime, UUID]]] = {}
    for action_id, action_type, due_at, workspace_id in rows:
        lines.setdefault((action_type, workspace_id), []).append((due_at, action_id))
    messages: list[tuple[datetime, int, OutgoingMessage]] = []
    for (action_type, workspace_id), line in lines.items():
        line.sort(key=itemgetter(0))  # stable: rows due together keep their order
        size, group = rows_per_message(action_type), str(workspace_id)
        turns: dict[datetime, int] = {}
        start = 0
        while start < len(line):
            first = line[start][0]
            end = start + 1
            limit = min(len(line), start + size)
            while end < limit and line[end][0] - first <= window:
                end += 1
            chunk = line[start:end]
            offsets = tuple((due - first) // _MICROSECOND for due, _ in chunk)
            turn = turns[first] = turns.get(first, -1) + 1
            message = OutgoingMessage(
                tuple(action_id for _, action_id in chunk), action_type, first, sent_at, group,
                offsets if offsets[-1] else (),
            )  # fmt: skip
            messages.append((first, turn, message))
            start = end
    # Stable: at one instant and one turn, the workspaces in the order their rows came.
    messages.sort(key=itemgetter(0, 1))
    return [message for _, _, message in messages]


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


def _are_offsets(offsets: object, count: int) -> bool:
    """One whole number of microseconds per id, bounded (a message from elsewhere could
    otherwise name a time no datetime holds)."""
    limit = MAX_DELAY_SECONDS * 1_000_000
    return (
        isinstance(offsets, list)
        and len(offsets) == count
        and all(type(o) is int and 0 <= o <= limit for o in offsets)
    )


def decode_body(body: str) -> list[MessageRow] | None:
    """The rows a message body rings for, or None when it is not one of ours."""
    try:
        plain = _PLAIN_BODY.fullmatch(body)
        if plain is not None:
            text_id, action_type, due = plain.groups()
            ids = [_parse_uuid(text_id.encode())]
            offsets = None
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
            offsets = data.get("offsets_us")
        due_at = datetime.fromisoformat(due)
        if due_at.tzinfo is None or not isinstance(action_type, str):
            return None
        if offsets is None:
            return [MessageRow(action_id, action_type, due_at) for action_id in ids]
        if not _are_offsets(offsets, len(ids)):
            return None
        return [
            MessageRow(action_id, action_type, due_at + offset * _MICROSECOND)
            for action_id, offset in zip(ids, offsets, strict=True)
        ]
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
