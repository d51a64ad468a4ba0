"""Request and answer bodies of /v1/suppressions."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from tickwork.api.models import Strict
from tickwork.suppression.model import Channel, Reason, Suppression


class SuppressionIn(Strict):
    channel: str = Field(description="`email` or `sms`", max_length=20)
    address: str = Field(
        description="an email address (a display name may lead) or an E.164 phone number;"
        " stored normalized",
        min_length=1,
        max_length=320,
    )
    reason: Reason = Field(default="manual", description="why it must not be messaged")
    scope: str = Field(
        default="all",
        description="`all`, or only one campaign's or rule's messages: `campaign:<id>`,"
        " `rule:<id>`",
        max_length=50,
    )
    detail: str | None = Field(default=None, max_length=300, description="a short note")


class SuppressionOut(BaseModel):
    channel: Channel
    address: str
    scope: str
    reason: Reason
    source: str = Field(
        description="who or what added it: `user:<subject>`, `postmark:bounce:<connection id>`,"
        " `twilio:stop:<connection id>`, `link` (an unsubscribe link), ..."
    )
    detail: str | None
    created_at: datetime

    @classmethod
    def of(cls, entry: Suppression) -> SuppressionOut:
        return cls.model_validate(entry, from_attributes=True)


class SuppressionPage(BaseModel):
    items: list[SuppressionOut]
    next_cursor: str | None
