"""Answers of /v1/digests (pydantic; they make the OpenAPI document)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, Field

from tickwork.digests.model import SHARED_SOURCE
from tickwork.digests.store import DigestView, StoredItem


class DigestOut(BaseModel):
    id: UUID
    rule_id: UUID | None = Field(
        description="the rule that collects (null for a shared digest: no one rule's)"
    )
    source: str = Field(
        description="what collects: `rule` (the rule's digest), `limit` (the excess over"
        " the rule's per-key limit) or `shared` (the recipient's digest for a key and window,"
        " joined by rules and drip steps)"
    )
    recipient_id: str | None
    target_key: str
    key: str = Field(description="the rendered digest key ('' when the rule has none)")
    status: str = Field(
        description="open (collecting), closed (its action was taken, or it was full),"
        " flushed (sent early), cancelled"
    )
    window: dict[str, Any] = Field(description="as configured on the rule")
    opened_at: datetime = Field(description="when its first item came")
    closes_at: datetime = Field(
        description="when the window ends (quiet hours may move the action later)"
    )
    last_item_at: datetime | None
    item_count: int
    action_id: UUID | None = Field(description="the one action it sends")
    action_status: str | None
    finished_at: datetime | None
    created_at: datetime

    @classmethod
    def of(cls, view: DigestView) -> DigestOut:
        d = view.digest
        return cls(
            id=d.id, rule_id=None if d.source == SHARED_SOURCE else d.source_id,
            source=d.source, recipient_id=d.recipient_id,
            target_key=d.target_key, key=d.digest_key, status=view.state,
            window=d.time_window, opened_at=d.opened_at, closes_at=d.closes_at,
            last_item_at=d.last_item_at, item_count=d.item_count, action_id=d.action_id,
            action_status=view.action_status, finished_at=d.finished_at,
            created_at=d.created_at,
        )  # fmt: skip


class DigestItemOut(BaseModel):
    position: int = Field(description="1 for the first item")
    item_key: str = Field(
        description="the event's id, or a hash of the event (a drip step's:"
        " `step:<enrollment>:<step>`)"
    )
    data: dict[str, Any] = Field(description="what the template sees of it in `items`")
    occurred_at: datetime
    added_at: datetime


class DigestDetail(DigestOut):
    items: list[DigestItemOut]

    @classmethod
    def with_items(cls, view: DigestView, items: Sequence[StoredItem]) -> DigestDetail:
        return cls(
            **DigestOut.of(view).model_dump(),
            items=[DigestItemOut(position=i.position, item_key=i.item_key, data=i.data,
                                 occurred_at=i.occurred_at, added_at=i.added_at)
                   for i in items],
        )  # fmt: skip


class DigestPage(BaseModel):
    items: list[DigestOut]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page")
