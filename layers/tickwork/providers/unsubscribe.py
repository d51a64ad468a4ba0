"""One-click unsubscribe for email sent through a connection (RFC 8058).

A message carries `List-Unsubscribe: <https://...>` and `List-Unsubscribe-Post:
List-Unsubscribe=One-Click` when its connection has `unsubscribe: true` in its settings, or
its payload asks with `unsubscribe: true` or `{"scope": "all" | "campaign" | "rule"}`. The
link is per recipient, so only a message to one address (one `to`, no `cc` or `bcc`) can
carry one: a payload that asks for it with more is refused when scheduled; the connection's
setting leaves such a message without the headers.

The link itself is made by the dispatcher (it holds the signing key) and handed to the
provider on the `Via`; providers only put it in the headers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.utils import parseaddr
from typing import Any, Final

from pydantic import Field

from tickwork.providers.schema import Schema

PROVIDERS: Final = frozenset({"postmark", "ses"})
ONE_CLICK: Final = "List-Unsubscribe=One-Click"
SCOPE = re.compile(
    r"^(all|campaign|rule)(:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})?$"
)


class Ask(Schema):
    """What a payload's `unsubscribe` object asks for."""

    scope: str = Field(
        default="all", pattern=SCOPE.pattern,
        description="all (everything from this workspace), campaign or rule (the action's"
        " own, when it has one; else everything)",
    )  # fmt: skip


Unsubscribe = bool | Ask | None


@dataclass(frozen=True)
class Wanted:
    """A message that should carry a link: to whom, for which scope (as asked: `campaign`
    and `rule` are resolved by whoever knows the action's campaign or rule)."""

    address: str
    scope: str


def single_recipient(payload: dict[str, Any]) -> str | None:
    """The one address a message goes to, or None when it goes to several."""
    to = payload.get("to")
    if isinstance(to, str):
        to = [to]
    if not isinstance(to, list) or len(to) != 1 or payload.get("cc") or payload.get("bcc"):
        return None
    _, address = parseaddr(str(to[0]))
    return address or None


def asked_scope(payload: dict[str, Any]) -> str | None:
    """The scope the payload asks for, None when it does not ask (or says false)."""
    value = payload.get("unsubscribe")
    if value is True:
        return "all"
    if isinstance(value, dict):
        return str(value.get("scope") or "all")
    return None


def wanted(
    provider: str, payload: dict[str, Any], connection_settings: dict[str, Any]
) -> Wanted | None:
    """Whether a message should carry a link: the payload asks, or the connection's setting
    does and the payload does not say `unsubscribe: false`; and it goes to one address."""
    if provider not in PROVIDERS or payload.get("unsubscribe") is False:
        return None
    scope = asked_scope(payload)
    if scope is None and connection_settings.get("unsubscribe") is True:
        scope = "all"
    if scope is None:
        return None
    address = single_recipient(payload)
    return None if address is None else Wanted(address, scope)


def headers(url: str) -> list[tuple[str, str]]:
    """The two header fields of RFC 8058 for one link."""
    return [("List-Unsubscribe", f"<{url}>"), ("List-Unsubscribe-Post", ONE_CLICK)]
