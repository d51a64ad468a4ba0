"""Values of the suppression list: channels, reasons, and one spelling per address.

An address is stored and compared normalized, so `Ann@Example.com`, `"Ann" <ann@example.com>`
and `ann@example.com` are one entry, and so are `+1 (555) 010-0000` and `+15550100000`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from email.utils import parseaddr
from typing import Any, Final, Literal

from tickwork.platform.errors import InputError

Channel = Literal["email", "sms"]
CHANNELS: Final = ("email", "sms")
Reason = Literal["hard_bounce", "complaint", "unsubscribed", "stop_reply", "manual"]
REASONS: Final = ("hard_bounce", "complaint", "unsubscribed", "stop_reply", "manual")

_PHONE_NOISE = re.compile(r"[\s().-]")
_E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")


def normalize_address(channel: str, address: str, field: str = "address") -> str:
    """The stored spelling of `address`: an email's addr-spec lowercased; a phone number
    in E.164 without spaces, dots, dashes or brackets. Refuses what is neither."""
    if channel == "email":
        _, spec = parseaddr(address.strip())
        if not spec or "@" not in spec or spec.startswith("@") or spec.endswith("@"):
            raise InputError(f"{address!r} is not an email address", field=field)
        return spec.lower()
    if channel == "sms":
        number = _PHONE_NOISE.sub("", address.strip())
        if not _E164.match(number):
            raise InputError(
                f"{address!r} is not a phone number in E.164 form (+15550100000)", field=field
            )
        return number
    raise InputError(f"{channel!r} is not a channel; known: {', '.join(CHANNELS)}", field="channel")


@dataclass(frozen=True)
class Suppression:
    channel: str
    address: str
    scope: str
    reason: str
    source: str
    detail: str | None
    created_at: datetime


def suppression_from_row(row: dict[str, Any]) -> Suppression:
    return Suppression(
        channel=row["channel"],
        address=row["address"],
        scope=row["scope"],
        reason=row["reason"],
        source=row["source"],
        detail=row["detail"],
        created_at=row["created_at"],
    )
