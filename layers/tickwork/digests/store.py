"""Digests in Postgres: adding an item, reading, flushing and cancelling.

`add_item` is the one way in (rules call it; a per-key rate limit that merges its excess
into a digest calls it too). Under the group's open digest's row lock it adds the item
(unique per group, so a duplicate delivery adds nothing, whichever digest has it) and
either makes the digest's action (the first item) or re-renders the action's payload by a
conditional update that only succeeds while the action is still `queued`. When a
dispatcher took the action first, the digest is closed and the item opens the next one:
no item is lost or counted twice.

Another producer collects the same way: a `Collect` naming itself (`source`, its id), the
group and the window, an `Item` (its key makes a repeat a duplicate) and a `compose` that
renders the action from what the template sees; for instance a per-key limit merging its
excess: `add_item(conn, Collect(ws, "limit", limit_id, window, target, key, recipient),
Item(row_key, data, at), compose, settings, now)`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from tickwork.actions import scheduling
from tickwork.actions import store as actions_store
from tickwork.actions.model import PAYLOAD_MAX_BYTES, NewAction, payload_size
from tickwork.digests.model import (
    MAX_ITEM_BYTES,
    MAX_ITEMS,
    SHARED_SOURCE,
    Digest,
    DigestNotOpenError,
    Item,
    Window,
    digest_from_row,
    group_key,
    parse_window,
    template_view,
)
from tickwork.platform.config import Settings
from tickwork.platform.db import Connection
from tickwork.platform.errors import NotFoundError, PayloadTooLargeError
from tickwork.platform.sql import query
from tickwork.recipients.policy import placed, require_recipient

_LOCK_OPEN = query("lock_open_digest")
_OPEN = query("open_digest")
_ADD_ITEM = query("add_digest_item")
_ITEMS = query("digest_items")
_ITEM_DATA = query("digest_item_data")
_COUNT = query("count_digest_item")
_ATTACH = query("attach_digest_action")
_CLOSE = query("close_digest")
_REFILL = query("refill_digest_action")
_FLUSH = query("flush_digest_action")
_LOG = query("log_digest_change")
_GET = query("get_digest")
_LOCK = query("lock_digest")
_OF_ACTION = query("digest_of_action")
_LIST = query("list_digests")
_OF_ITEM = query("digest_of_item")

# The action a digest sends, made from what its template sees (`items`, `count`, `first`,
# `last`, `digest`): the producer renders it. Its publish_at and dedupe key are the
# digest's.
Compose = Callable[[dict[str, Any]], NewAction]


@dataclass(frozen=True)
class Collect:
    """Where an item goes: the producer (`source`, `source_id`), the group within it
    (recipient, rendered target, rendered key) and the window. `timezone`: where an
    `until` window's wall time is read (the recipient's, else the workspace's)."""

    workspace_id: UUID
    source: str
    source_id: UUID
    window: Window
    target_key: str
    key: str = ""
    recipient_id: str | None = None
    timezone: str = "UTC"
    transactional: bool = False
    # What else keeps groups apart (a shared digest's action type and window).
    among: tuple[str, ...] = ()

    @property
    def group(self) -> str:
        return group_key(self.recipient_id, self.target_key, self.key, *self.among)


def shared(
    workspace_id: UUID, action_type: str, window: Window, target_key: str, key: str,
    recipient_id: str | None, timezone: str, transactional: bool = False,
) -> Collect:  # fmt: skip
    """The recipient's shared digest for a key: one per (recipient, target, action type,
    key, window) in the workspace, which every rule and drip step naming them joins."""
    window_words = json.dumps(window.as_json(), sort_keys=True)
    return Collect(workspace_id, SHARED_SOURCE, workspace_id, window, target_key, key[:200],
                   recipient_id, timezone, transactional, (action_type, window_words))  # fmt: skip


@dataclass(frozen=True)
class Added:
    """What adding an item did: `opened` a digest (and made its action), `appended` to the
    open one, or nothing (`duplicate`: the group already has this item)."""

    outcome: Literal["opened", "appended", "duplicate"]
    digest_id: UUID
    action_id: UUID | None
    count: int
    publish_at: datetime | None


class _Taken(Exception):
    """The open digest's action is no longer queued: a dispatcher has it."""


class _Duplicate(Exception):
    """The first item of a new digest was collected before: the digest is rolled back."""


@dataclass(frozen=True, slots=True)
class DigestView:
    """A digest with its state as the API shows it: `open` only while its action is still
    queued (one a dispatcher took reads `closed`, one cancelled elsewhere `cancelled`)."""

    digest: Digest
    state: str
    action_status: str | None


def _view(row: Mapping[str, Any]) -> DigestView:
    return DigestView(digest_from_row(row), row["state"], row["action_status"])


def _one(conn: Connection, sql: Any, params: Mapping[str, Any]) -> dict[str, Any] | None:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(sql, params).fetchone()


def _log(conn: Connection, digest: Digest, kind: str, reason: str,
         old_at: datetime | None = None, new_at: datetime | None = None) -> None:  # fmt: skip
    if digest.action_id is None:
        return
    conn.execute(_LOG, {"workspace_id": digest.workspace_id, "action_id": digest.action_id,
                        "kind": kind, "source": digest.source, "reason": reason,
                        "old_at": old_at, "new_at": new_at})  # fmt: skip


def add_item(
    conn: Connection,
    collect: Collect,
    item: Item,
    compose: Compose,
    settings: Settings,
    now: datetime,
) -> Added:
    """Add one item to its group's open digest, opening one if there is none, the open
    one's action was taken, or it is full. Raises what scheduling the action raises (an
    InputError: the producer's problem with this item), having written nothing."""
    with conn.transaction():
        for _ in range(4):
            found = _one(conn, _LOCK_OPEN, {"workspace_id": collect.workspace_id,
                                            "source": collect.source,
                                            "source_id": collect.source_id,
                                            "group_key": collect.group})  # fmt: skip
            if found is None:
                try:
                    with conn.transaction():
                        opened = _open(conn, collect, now)
                        if opened is None:
                            continue  # a concurrent first item opened it: lock theirs
                        return _first(conn, opened, collect, item, compose, settings, now)
                except _Duplicate:
                    # Already collected by a digest that is closed: the new digest would
                    # be empty, so it is not kept.
                    return _duplicate_of(conn, collect, item)
            digest = digest_from_row(found)
            if _room_for(digest, item):
                try:
                    return _append(conn, digest, collect, item, compose, settings, now)
                except _Taken:
                    pass
            conn.execute(_CLOSE, {"id": digest.id, "workspace_id": digest.workspace_id,
                                  "status": "closed"})  # fmt: skip
    raise AssertionError("the open digest kept changing under its row lock")  # pragma: no cover


def _room_for(digest: Digest, item: Item) -> bool:
    """Whether the open digest takes one more item (else the item opens the next one)."""
    return digest.item_count < MAX_ITEMS and digest.item_bytes + item.size <= MAX_ITEM_BYTES


def _duplicate_of(conn: Connection, collect: Collect, item: Item) -> Added:
    found = collected(conn, collect, item.key)
    assert found is not None, "a duplicate item is stored"
    return found


def collected(conn: Connection, collect: Collect, item_key: str) -> Added | None:
    """The digest of the group that already holds this item (outcome `duplicate`), if
    any: for a producer that sends an item either alone or in a digest, so that a repeat
    of one already collected is not sent alone later."""
    row = _one(conn, _OF_ITEM, {"workspace_id": collect.workspace_id, "source": collect.source,
                                "source_id": collect.source_id, "group_key": collect.group,
                                "item_key": item_key})  # fmt: skip
    if row is None:
        return None
    return Added("duplicate", row["digest_id"], row["action_id"], row["item_count"], None)


def _open(conn: Connection, collect: Collect, now: datetime) -> Digest | None:
    row = _one(conn, _OPEN, {
        "workspace_id": collect.workspace_id, "source": collect.source,
        "source_id": collect.source_id, "recipient_id": collect.recipient_id,
        "target_key": collect.target_key, "digest_key": collect.key,
        "group_key": collect.group, "time_window": Jsonb(collect.window.as_json()),
        "opened_at": now, "closes_at": collect.window.closes_at(now, collect.timezone),
    })  # fmt: skip
    return digest_from_row(row) if row else None


def _insert_item(conn: Connection, digest: Digest, item: Item, position: int) -> bool:
    row = conn.execute(_ADD_ITEM, {
        "digest_id": digest.id, "workspace_id": digest.workspace_id, "source": digest.source,
        "source_id": digest.source_id, "group_key": digest.group_key, "item_key": item.key,
        "position": position, "data": Jsonb(item.data), "occurred_at": item.occurred_at,
    }).fetchone()  # fmt: skip
    return row is not None


def _count(conn: Connection, digest: Digest, item: Item, position: int, at: datetime,
           closes_at: datetime) -> Digest:  # fmt: skip
    row = _one(conn, _COUNT, {"id": digest.id, "position": position, "bytes": item.size,
                              "at": at, "closes_at": closes_at})  # fmt: skip
    assert row is not None, "the open digest is locked by this transaction"
    return digest_from_row(row)


def _first(
    conn: Connection,
    digest: Digest,
    collect: Collect,
    item: Item,
    compose: Compose,
    settings: Settings,
    now: datetime,
) -> Added:
    """The first item of a new digest: the item, then the action due at the window's end
    (moved out of the recipient's quiet hours like any message), then the link."""
    if not _insert_item(conn, digest, item, 1):
        raise _Duplicate
    digest = _count(conn, digest, item, 1, now, digest.closes_at)
    new = compose(template_view(digest, [item.data]))
    new = replace(new, publish_at=digest.closes_at, dedupe_key=f"digest:{digest.id}")
    scheduled = scheduling.schedule(conn, collect.workspace_id, new, settings, now)
    row = _one(conn, _ATTACH, {"id": digest.id, "action_id": scheduled.action.id})
    assert row is not None
    digest = digest_from_row(row)
    _log(conn, digest, "digest", _describe(digest))
    return Added("opened", digest.id, scheduled.action.id, 1, scheduled.action.publish_at)


def _describe(digest: Digest) -> str:
    window = digest.time_window
    if "quiet_seconds" in window:
        how = (f"until no event came for {window['quiet_seconds']} s (at most"
               f" {window['max_seconds']} s after the first)")  # fmt: skip
    elif "until" in window:
        how = f"until {window['until']} local time"
    else:
        how = f"for {window['seconds']} s after the first event"
    return f"a digest ({digest.id}): collects events {how}"


def _append(
    conn: Connection,
    digest: Digest,
    collect: Collect,
    item: Item,
    compose: Compose,
    settings: Settings,
    now: datetime,
) -> Added:
    """A later item: added and the action re-rendered, in one savepoint that is rolled
    back (raising _Taken) when the action is no longer queued."""
    with conn.transaction():
        position = digest.item_count + 1
        if not _insert_item(conn, digest, item, position):
            return Added("duplicate", digest.id, digest.action_id, digest.item_count, None)
        # The digest keeps the window it opened with, whatever its rule says since.
        window = parse_window(digest.time_window, "digest.window")
        closes_at = window.moved(digest.opened_at, now) if window.sliding else digest.closes_at
        counted = _count(conn, digest, item, position, now, closes_at)
        data = [r[0] for r in conn.execute(
            _ITEM_DATA, {"digest_id": digest.id, "workspace_id": digest.workspace_id}
        ).fetchall()]  # fmt: skip
        new = compose(template_view(counted, data))
        size = payload_size(new.payload)
        if size > PAYLOAD_MAX_BYTES:
            raise PayloadTooLargeError(
                f"the digest's payload would be {size} bytes with this item; the limit is"
                f" {PAYLOAD_MAX_BYTES}",
                field="action.payload",
            )
        publish_at, original = _placed(conn, collect, closes_at) if window.sliding else (None, None)
        moved = _one(conn, _REFILL, {
            "id": digest.action_id, "workspace_id": digest.workspace_id,
            "payload": Jsonb(new.payload), "publish_at": publish_at,
            "original_publish_at": original,
        })  # fmt: skip
        if moved is None:
            raise _Taken
        if moved["publish_at"] != moved["old_publish_at"]:
            _log(conn, counted, "digest", "a new event moved the debounced digest",
                 moved["old_publish_at"], moved["publish_at"])  # fmt: skip
    return Added("appended", digest.id, digest.action_id, position, moved["publish_at"])


def _placed(
    conn: Connection, collect: Collect, asked: datetime
) -> tuple[datetime, datetime | None]:
    """A debounce's new time, moved out of the recipient's quiet hours as at creation."""
    if collect.recipient_id is None or collect.transactional:
        return asked, None
    recipient = require_recipient(conn, collect.workspace_id, collect.recipient_id)
    return placed(asked, recipient, transactional=False)


# --------------------------------------------------------------------------------- reading


def get_digest(conn: Connection, workspace_id: UUID, digest_id: UUID) -> DigestView:
    row = _one(conn, _GET, {"id": digest_id, "workspace_id": workspace_id})
    if row is None:
        raise NotFoundError(f"no digest {digest_id} in this workspace")
    return _view(row)


def digest_of_action(conn: Connection, workspace_id: UUID, action_id: UUID) -> DigestView | None:
    row = _one(conn, _OF_ACTION, {"action_id": action_id, "workspace_id": workspace_id})
    return _view(row) if row else None


@dataclass(frozen=True, slots=True)
class StoredItem:
    position: int
    item_key: str
    data: dict[str, Any]
    occurred_at: datetime
    added_at: datetime


def items_of(conn: Connection, workspace_id: UUID, digest_id: UUID) -> list[StoredItem]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_ITEMS, {"digest_id": digest_id, "workspace_id": workspace_id})
        return [StoredItem(r["position"], r["item_key"], r["data"], r["occurred_at"],
                           r["added_at"]) for r in rows.fetchall()]  # fmt: skip


def list_digests(
    conn: Connection,
    workspace_id: UUID,
    *,
    limit: int,
    source_id: UUID | None = None,
    recipient_id: str | None = None,
    state: str | None = None,
    after: tuple[datetime, UUID] | None = None,
) -> list[DigestView]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_LIST, {
            "workspace_id": workspace_id, "limit": limit, "source_id": source_id,
            "recipient_id": recipient_id, "state": state,
            "after_created_at": after[0] if after else None,
            "after_id": after[1] if after else None,
        }).fetchall()  # fmt: skip
    return [_view(r) for r in rows]


# ------------------------------------------------------------------------ flush and cancel


def _lock_open(conn: Connection, workspace_id: UUID, digest_id: UUID, verb: str) -> Digest:
    row = _one(conn, _LOCK, {"id": digest_id, "workspace_id": workspace_id})
    if row is None:
        raise NotFoundError(f"no digest {digest_id} in this workspace")
    digest = digest_from_row(row)
    if digest.status != "open" or digest.action_id is None:
        raise DigestNotOpenError(
            f"digest {digest_id} is {digest.status}: only an open digest can be {verb}",
            details={"status": digest.status},
        )
    return digest


def _not_waiting(digest: Digest, verb: str, status: str) -> DigestNotOpenError:
    return DigestNotOpenError(
        f"digest {digest.id} can no longer be {verb}: its action is {status}",
        details={"status": "closed", "action_status": status},
    )


def flush(conn: Connection, workspace_id: UUID, digest_id: UUID, now: datetime) -> DigestView:
    """Send an open digest now: its action due at once, the digest `flushed` (later items
    open the next one). Refused (`digest_not_open`) once its action is taken."""
    with conn.transaction():
        digest = _lock_open(conn, workspace_id, digest_id, "flushed")
        assert digest.action_id is not None
        action = actions_store.get(conn, workspace_id, digest.action_id)
        moved = _one(conn, _FLUSH, {"id": digest.action_id, "workspace_id": workspace_id,
                                    "now": now})  # fmt: skip
        if moved is None or action is None:
            raise _not_waiting(digest, "flushed", action.status if action else "gone")
        conn.execute(_CLOSE, {"id": digest.id, "workspace_id": workspace_id,
                              "status": "flushed"})  # fmt: skip
        _log(conn, digest, "flush", "the digest was sent early on request",
             action.publish_at, moved["publish_at"])  # fmt: skip
    return get_digest(conn, workspace_id, digest_id)


def cancel(conn: Connection, workspace_id: UUID, digest_id: UUID) -> DigestView:
    """Cancel an open digest and its action (the change log records the cancel). Refused
    (`digest_not_open`) once its action is taken."""
    with conn.transaction():
        digest = _lock_open(conn, workspace_id, digest_id, "cancelled")
        assert digest.action_id is not None
        done = actions_store.cancel(
            conn, workspace_id, digest.action_id, message="the digest was cancelled"
        )
        if not done.changed:
            status = done.action.status if done.action else "gone"
            raise _not_waiting(digest, "cancelled", status)
        conn.execute(_CLOSE, {"id": digest.id, "workspace_id": workspace_id,
                              "status": "cancelled"})  # fmt: skip
    return get_digest(conn, workspace_id, digest_id)
