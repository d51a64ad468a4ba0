"""Unsubscribe links: a token signed per recipient and per scope, and the URL that carries it.

A link is `<public_api_url>/v1/unsubscribe/<token>`. The token holds what a click must
suppress, so the route needs no lookup and no login: the workspace, the channel, the
normalized address and the scope (`all`, `campaign:<id>` or `rule:<id>`), followed by an
HMAC-SHA256 of them under the stack's unsubscribe key. Changing any byte (another address,
another workspace, a wider scope) breaks the MAC, so a link cannot be forged or replayed
for anyone else; clicking it twice suppresses once (the store's insert is idempotent).

The token is signed, not encrypted: its holder (the recipient, whose mailbox it is in) can
read the address out of it. Nothing else is in it.

    version (1) | workspace (16) | channel (1) | scope kind (1) | scope id (0 or 16)
    | address (UTF-8, the rest) | HMAC-SHA256 (32), all base64url without padding
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from typing import Final
from uuid import UUID

from tickwork.platform.config import Settings
from tickwork.platform.errors import BadRequestError, InputError
from tickwork.suppression.model import normalize_address

PATH_PREFIX: Final = "/v1/unsubscribe/"
VERSION: Final = 1
MAC_BYTES: Final = 32
# Domain separation: the key signs these tokens and nothing else that could be confused.
_CONTEXT: Final = b"tickwork-unsubscribe\x00"
_CHANNELS: Final = ("email", "sms")
_SCOPE_KINDS: Final = ("all", "campaign", "rule")
# An address is at most 320 characters (the table's check), up to 4 bytes each in UTF-8.
MAX_TOKEN_CHARS: Final = 4 * ((1 + 16 + 1 + 1 + 16 + 4 * 320 + MAC_BYTES) + 2) // 3


class InvalidUnsubscribeLinkError(BadRequestError):
    """A token that is not one this stack signed (forged, altered, cut short)."""

    code = "invalid_unsubscribe_link"


class UnsubscribeUnavailableError(InputError):
    """An unsubscribe link is asked for where none can be made."""

    code = "unsubscribe_unavailable"


@dataclass(frozen=True)
class Link:
    """What a token stands for."""

    workspace_id: UUID
    channel: str
    address: str  # normalized
    scope: str  # all, campaign:<uuid>, rule:<uuid>


def resolve_scope(
    asked: str | None, *, campaign_id: UUID | None = None, rule_id: UUID | None = None
) -> str:
    """The scope a link covers: the action's campaign or rule when asked for and the action
    has one, a scope already resolved as it is, else everything."""
    if asked == "campaign" and campaign_id is not None:
        return f"campaign:{campaign_id}"
    if asked == "rule" and rule_id is not None:
        return f"rule:{rule_id}"
    if asked is not None and asked.startswith(("campaign:", "rule:")):
        kind, _, raw = asked.partition(":")
        try:
            return f"{kind}:{UUID(raw)}"
        except ValueError:
            return "all"
    return "all"


def _encode_scope(scope: str) -> bytes:
    if scope == "all":
        return bytes([0])
    kind, _, raw = scope.partition(":")
    if kind not in _SCOPE_KINDS[1:]:
        raise ValueError(f"unknown unsubscribe scope {scope!r}")
    return bytes([_SCOPE_KINDS.index(kind)]) + UUID(raw).bytes


def _mac(key: str, body: bytes) -> bytes:
    return hmac.new(key.encode("utf-8"), _CONTEXT + body, hashlib.sha256).digest()


def sign(key: str, workspace_id: UUID, channel: str, address: str, scope: str = "all") -> str:
    """The token for one recipient and scope (the address is normalized first)."""
    normalized = normalize_address(channel, address)
    body = (
        bytes([VERSION])
        + workspace_id.bytes
        + bytes([_CHANNELS.index(channel)])
        + _encode_scope(scope)
        + normalized.encode("utf-8")
    )
    token = base64.urlsafe_b64encode(body + _mac(key, body))
    return token.rstrip(b"=").decode("ascii")


def _refused() -> InvalidUnsubscribeLinkError:
    # One answer for every way a token is wrong: which check failed tells a forger nothing.
    return InvalidUnsubscribeLinkError(
        "this unsubscribe link is not valid: it may have been cut short or changed; use the"
        " link from the message exactly as it came"
    )


def verify(key: str, token: str) -> Link:
    """What a token stands for, or InvalidUnsubscribeLinkError; the MAC is checked first,
    in constant time, before any of the token's content is read."""
    if not token or len(token) > MAX_TOKEN_CHARS or not token.isascii():
        raise _refused()
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError) as exc:
        raise _refused() from exc
    # The strict round trip: one spelling per token (no padding, no stray bits).
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != token:
        raise _refused()
    body, mac = raw[:-MAC_BYTES], raw[-MAC_BYTES:]
    if len(body) < 1 + 16 + 1 + 1 + 1 or not hmac.compare_digest(mac, _mac(key, body)):
        raise _refused()
    try:
        return _decode(body)
    except (ValueError, IndexError, InputError) as exc:
        # Signed by us yet unreadable: a token of a version this code does not know.
        raise _refused() from exc


def _decode(body: bytes) -> Link:
    if body[0] != VERSION:
        raise ValueError("unknown token version")
    workspace_id = UUID(bytes=body[1:17])
    channel = _CHANNELS[body[17]]
    kind = _SCOPE_KINDS[body[18]]
    rest = body[19:]
    scope = "all"
    if kind != "all":
        scope, rest = f"{kind}:{UUID(bytes=rest[:16])}", rest[16:]
    address = rest.decode("utf-8")
    if not address or normalize_address(channel, address) != address:
        raise ValueError("the address is not in its normalized form")
    return Link(workspace_id, channel, address, scope)


def configured(settings: Settings) -> bool:
    """Whether the stack can make links: a public URL, and a key here or in the functions
    that sign them (`unsubscribe_links_elsewhere`)."""
    has_key = settings.unsubscribe_key or settings.unsubscribe_links_elsewhere
    return bool(settings.public_api_url and has_key)


def url(settings: Settings, workspace_id: UUID, channel: str, address: str, scope: str) -> str:
    """The HTTPS link for one recipient and scope, or UnsubscribeUnavailableError when the
    stack has no public URL or key to make one with."""
    if not settings.public_api_url or not settings.unsubscribe_key:
        raise UnsubscribeUnavailableError(
            "unsubscribe links are not configured on this stack: the operator sets"
            " public_api_url (TICKWORK_PUBLIC_API_URL) and the unsubscribe key",
            field="unsubscribe",
        )
    token = sign(settings.unsubscribe_key, workspace_id, channel, address, scope)
    return f"{settings.public_api_url}{PATH_PREFIX}{token}"


def mask(address: str) -> str:
    """An address as the confirmation page shows it, enough to recognize and no more:
    `a***@e******.com`, `+1******0000`."""
    if "@" in address:
        local, _, domain = address.rpartition("@")
        name, dot, tld = domain.rpartition(".")
        shown_domain = f"{name[:1]}{'*' * max(1, len(name) - 1)}{dot}{tld}" if dot else "***"
        return f"{local[:1]}***@{shown_domain}"
    return f"{address[:2]}{'*' * max(1, len(address) - 6)}{address[-4:]}"
