"""Bodies of /v1/connections. Credentials are accepted and never returned; URL settings
are shown masked (`providers.catalog.masked_settings`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from tickwork.connections import Connection
from tickwork.providers.catalog import masked_settings


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateConnection(Strict):
    name: str = Field(min_length=1, max_length=200, examples=["Marketing email"])
    provider: str = Field(min_length=1, max_length=63, examples=["postmark"])
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="shown back, URLs masked (userinfo, query values and token-like parts)",
    )
    credentials: dict[str, Any] = Field(
        default_factory=dict, description="write-only: stored as a secret, never returned"
    )


class ConnectionPatch(Strict):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    settings: dict[str, Any] | None = Field(default=None, description="replaces the settings")
    credentials: dict[str, Any] | None = Field(
        default=None, description="replaces the credentials (write-only)"
    )
    status: Literal["active", "disabled"] | None = None


class CallbacksOut(BaseModel):
    """The provider's status callbacks to this connection (delivery feedback)."""

    supported: bool = Field(description="false: the provider sends nothing back")
    url: str | None = Field(
        description="where the provider posts them (without credentials); null if unsupported"
    )
    setup: str = Field(description="how to set them up at the provider, or why there are none")
    counts: dict[str, int] = Field(
        description="callbacks received by outcome: applied, stale (late or reordered),"
        " duplicate, unmatched (no action of this connection has that message id), ignored"
        " (events not tracked), unverified (forged or unverifiable: refused)"
    )
    last_at: datetime | None = Field(description="when the last one came")


class CallbackSecretOut(BaseModel):
    secret: str = Field(description="shown once: Tickwork keeps it write-only, like credentials")
    username: str
    url: str = Field(description="the callback URL with the credentials in it, for the provider")


class ConnectionOut(BaseModel):
    id: UUID
    name: str
    provider: str
    settings: dict[str, Any]
    status: Literal["active", "disabled", "deleted"]
    verified_at: datetime | None
    verify_ok: bool | None
    verify_message: str | None
    created_at: datetime
    updated_at: datetime
    callbacks: CallbacksOut | None = Field(
        default=None, description="the provider's status callbacks (delivery feedback)"
    )

    @classmethod
    def of(cls, row: Connection, callbacks: CallbacksOut | None = None) -> ConnectionOut:
        return cls(
            id=row.id, name=row.name, provider=row.provider,
            settings=masked_settings(row.provider, row.settings),
            status=row.status, verified_at=row.verified_at, verify_ok=row.verify_ok,
            verify_message=row.verify_message, created_at=row.created_at,
            updated_at=row.updated_at, callbacks=callbacks,
        )  # fmt: skip


class ConnectionList(BaseModel):
    items: list[ConnectionOut]


class VerifyOut(BaseModel):
    ok: bool
    message: str = Field(description="what works, or what to fix")
    account: str | None = Field(description="the account the credentials belong to")
    connection: ConnectionOut
