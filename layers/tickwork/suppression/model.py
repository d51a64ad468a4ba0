"""Values of the suppression list: channels, reasons, and one spelling per address.

An address is stored and compared normalized, so `Ann@Example.com`, `"Ann" <ann@example.com>`
and `ann@example.com` are one entry, and so are `+1 (555) 010-0000` and `+15550100000`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from email.utils import parseaddr
from typing import Any, Final, Literal

from tickwork.platform.errors import InputError, InvalidAddressError, UnknownChannelError

Channel = Literal["email", "sms"]
CHANNELS: Final = ("email", "sms")
Reason = Literal["hard_bounce", "complaint", "unsubscribed", "stop_reply", "manual"]
REASONS: Final = ("hard_bounce", "complaint", "unsubscribed", "stop_reply", "manual")

# The providers whose messages go to addresses of a channel: the claim checks their rows
# against the list (the action type's provider names the channel).
PROVIDER_CHANNELS: Final[dict[str, Channel]] = {
    "postmark": "email",
    "ses": "email",
    "twilio": "sms",
}

_PHONE_NOISE = re.compile(r"[\s().-]")
_E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")


def normalize_address(channel: str, address: str, field: str = "address") -> str:
    """The stored spelling of `address`: an email's addr-spec lowercased; a phone number
    in E.164 without spaces, dots, dashes or brackets. Refuses what is neither."""
    if channel == "email":
        _, spec = parseaddr(address.strip())
        if not spec or "@" not in spec or spec.startswith("@") or spec.endswith("@"):
            raise InvalidAddressError(f"{address!r} is not an email address", field=field)
        return spec.lower()
    if channel == "sms":
        number = _PHONE_NOISE.sub("", address.strip())
        if not _E164.match(number):
            raise InvalidAddressError(
                f"{address!r} is not a phone number in E.164 form (+15550100000)", field=field
            )
        return number
    raise UnknownChannelError(
        f"{channel!r} is not a channel; known: {', '.join(CHANNELS)}", field="channel"
    )


_SCOPE = re.compile(
    r"^(?:all|(?:campaign|rule):[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$"
)


def check_scope(scope: str, field: str = "scope") -> str:
    """`all`, `campaign:<uuid>` or `rule:<uuid>` (lowercase), as the table stores it."""
    if not _SCOPE.match(scope):
        raise InputError(
            f"{scope!r} is not a scope: give all, campaign:<id> or rule:<id>", field=field
        )
    return scope


def channel_of_provider(provider: str) -> Channel | None:
    """The channel a provider sends to, or None when its messages have no address."""
    return PROVIDER_CHANNELS.get(provider)


def mask_address(channel: str, address: str) -> str:
    """An address as logs and an action's history show it (`a***@example.com`,
    `+15******00`): recognisable to who knows it, unreadable to others. The SQL twin is
    tickwork_mask_address (migration 0025)."""
    if channel == "email" and address.find("@") > 0:
        return address[0] + "***" + address[address.rindex("@") :]
    if channel == "sms" and len(address) > 5:
        return address[:3] + "*" * (len(address) - 5) + address[-2:]
    return "***"


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
