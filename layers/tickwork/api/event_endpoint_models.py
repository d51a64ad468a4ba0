"""Bodies of /v1/event-endpoints. The signing secret is answered once, at creation; the URL
is shown masked."""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from tickwork.events import EVENT_TYPES, EventEndpoint

EventType = Literal[
    "action.published",
    "action.failed",
    "action.delivered",
    "action.bounced",
    "action.cancelled",
    "enrollment.completed",
]
assert set(EventType.__args__) == set(EVENT_TYPES)  # type: ignore[attr-defined]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


ActionTypeName = Field(min_length=1, max_length=63)


class CreateEventEndpoint(Strict):
    url: str = Field(min_length=1, max_length=2000, examples=["https://example.com/tickwork"])
    event_types: list[EventType] = Field(
        min_length=1, max_length=6, description="the events it receives"
    )
    action_types: list[str] | None = Field(
        default=None, min_length=1, max_length=50,
        description="only events of actions of these types (default: every type)",
    )  # fmt: skip
    description: str | None = Field(default=None, max_length=300)


class EventEndpointPatch(Strict):
    status: Literal["active", "disabled"] | None = None
    event_types: list[EventType] | None = Field(default=None, min_length=1, max_length=6)
    action_types: list[str] | None = Field(
        default=None, min_length=0, max_length=50,
        description="replaces the filter; an empty list removes it (every type)",
    )  # fmt: skip
    description: str | None = Field(default=None, max_length=300)


class EventEndpointOut(BaseModel):
    id: UUID
    url: str = Field(description="masked")
    event_types: list[str]
    action_types: list[str] | None
    description: str | None
    status: Literal["active", "disabled", "deleted"]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: EventEndpoint) -> EventEndpointOut:
        return cls(
            id=row.id, url=row.masked_url, event_types=row.event_types,
            action_types=row.action_types, description=row.description, status=row.status,
            created_at=row.created_at, updated_at=row.updated_at,
        )  # fmt: skip


class CreatedEventEndpoint(EventEndpointOut):
    secret: str = Field(description="whsec_<base64>: the signing key, shown this once; keep it")


class EventEndpointList(BaseModel):
    items: list[EventEndpointOut]
