"""What every provider's callback reader shares: the request as it arrived, times, text."""

from __future__ import annotations

import base64
import hmac
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tickwork.feedback.model import CallbackUnverifiedError, MalformedCallbackError
from tickwork.providers.redact import sanitize

_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
# What no provider sends and Postgres cannot store as text: a NUL, or half of a UTF-16
# surrogate pair (`"\ud800"` in JSON). Refused before anything is written.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# No provider's body nests deeper than a few levels; Python's parser recurses per level.
MAX_DEPTH = 64
DETAIL_CHARS = 300
# The user name in a callback URL's credentials (https://tickwork:<secret>@...).
CALLBACK_USER = "tickwork"


@dataclass(frozen=True)
class CallbackRequest:
    """A callback as it reached the API: its public URL (what the provider called, query
    included: Twilio signs it), lower-cased headers and the body's text."""

    url: str
    headers: dict[str, str]
    body: str


def instant(value: Any) -> datetime | None:
    """A provider's ISO 8601 time, in UTC; None when absent or unreadable (the time it
    reached us stands in)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
        return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    except (ValueError, OverflowError):  # unreadable, or out of range once in UTC (year 1)
        return None


def detail(*parts: Any) -> str | None:
    """A short, sanitized note from a provider's documented fields (a bounce's type and
    description); never a message's body or a bounce's dump."""
    text = ": ".join(str(p) for p in parts if p not in (None, ""))
    if not text:
        return None
    return _CONTROL.sub(" ", sanitize(text))[:DETAIL_CHARS] or None


def storable(text: str, what: str) -> str:
    """The text, unless it holds a NUL or a lone surrogate (MalformedCallbackError)."""
    found = _UNSTORABLE.search(text)
    if found:
        raise MalformedCallbackError(
            f"the {what} holds a character no provider sends (\\u{ord(found.group()):04x}:"
            " a NUL or half of a surrogate pair)"
        )
    return text


def check_json(value: Any, what: str) -> None:
    """Refuse JSON nested deeper than MAX_DEPTH or with a NUL or a lone surrogate in any
    string or key. Iterative: a hostile document cannot exhaust the stack."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise MalformedCallbackError(f"the {what} body nests deeper than {MAX_DEPTH} levels")
        if isinstance(node, str):
            storable(node, what)
        elif isinstance(node, dict):
            for key, item in node.items():
                storable(key, what)
                stack.append((item, depth + 1))
        elif isinstance(node, list):
            stack.extend((item, depth + 1) for item in node)


def json_object(body: str, what: str) -> dict[str, Any]:
    """The body's JSON object, or MalformedCallbackError (400) saying what is wrong: never
    an error that escapes as a 500, whatever the body (deep nesting included)."""
    try:
        parsed = json.loads(body)
    except RecursionError as exc:
        raise MalformedCallbackError(
            f"the {what} body nests deeper than {MAX_DEPTH} levels"
        ) from exc
    except ValueError as exc:  # not JSON, or an integer longer than Python converts
        raise MalformedCallbackError(f"the {what} body is not JSON") from exc
    check_json(parsed, what)
    if not isinstance(parsed, dict):
        raise MalformedCallbackError(f"the {what} body is not a JSON object")
    return parsed


def text_field(body: dict[str, Any], name: str, what: str, limit: int = 300) -> str:
    value = body.get(name)
    if not isinstance(value, str | int) or isinstance(value, bool) or str(value) == "":
        raise MalformedCallbackError(f"the {what} has no {name}", field=name)
    text = str(value)
    if len(text) > limit:
        raise MalformedCallbackError(f"the {what}'s {name} is longer than {limit}", field=name)
    return text


def check_basic_auth(headers: dict[str, str], secret: str | None, how: str) -> None:
    """The callback carries the connection's callback secret as HTTP basic auth
    (`tickwork:<secret>`), compared in constant time."""
    if not secret:
        raise CallbackUnverifiedError(
            f"this connection has no callback secret yet: an admin makes one"
            f" (POST /v1/connections/{{id}}/callback-secret) and puts it in {how}"
        )
    raw = headers.get("authorization", "")
    scheme, _, encoded = raw.partition(" ")
    try:
        user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
    except ValueError:  # not base64 (binascii.Error), not ASCII, not UTF-8 once decoded
        user, password = "", ""
    ok = scheme.lower() == "basic" and hmac.compare_digest(
        f"{user}:{password}".encode(), f"{CALLBACK_USER}:{secret}".encode()
    )
    if not ok:
        raise CallbackUnverifiedError(
            "the callback does not carry this connection's callback credentials"
        )
