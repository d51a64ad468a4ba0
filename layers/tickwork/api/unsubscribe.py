"""`/v1/unsubscribe/{token}`: the one-click unsubscribe links email carries (RFC 8058).

No login: the signed token is the authority (tickwork.suppression.links). `GET` shows a
small confirmation page with a button (mail scanners and link previews fetch links, so a
GET never unsubscribes); `POST`, the mail client's one-click request or the page's form,
puts the address on the workspace's suppression list (`unsubscribed`, source `link`, the
link's scope). A second POST finds it there and changes nothing; either way the answer is
200. A token that is not ours, or one byte changed, is 400 `invalid_unsubscribe_link` and
nothing is written.

A POST must carry RFC 8058's `List-Unsubscribe=One-Click` (form-encoded, or a field of a
multipart form, as RFC 8058 allows both); one without it (a scanner that POSTs whatever
it finds, an empty body, JSON) is 400 `one_click_required` and writes nothing.

Served by the API function before its JSON resolver (like the console's files): the one-
click POST is a form, not JSON, and a tenant's JWT has nothing to do with it.
"""

from __future__ import annotations

import base64
import email
import email.errors
import email.message
import html
import json
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl

import psycopg

from tickwork import runtime
from tickwork.api.errors import error_result
from tickwork.platform.config import Settings
from tickwork.platform.observability import logger
from tickwork.suppression import links
from tickwork.suppression.links import InvalidUnsubscribeLinkError, Link
from tickwork.suppression.store import suppress
from tickwork.tenancy import tenant_transaction

PREFIX = links.PATH_PREFIX
SOURCE = "link"
# The one-click body is 26 bytes; a form post a little more (a multipart one a few hundred).
MAX_BODY_BYTES = 4096
ONE_CLICK = ("List-Unsubscribe", "One-Click")
ALLOW = "GET, HEAD, POST"


def is_unsubscribe(path: str) -> bool:
    return path.startswith(PREFIX)


def _wants_html(headers: dict[str, str]) -> bool:
    return "text/html" in headers.get("accept", "")


def _page(status: int, title: str, paragraphs: list[str], form: bool = False) -> dict[str, Any]:
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    if form:
        # Posts to this same address (the token stays out of the form's fields).
        body += (
            '<form method="post"><input type="hidden" name="List-Unsubscribe"'
            ' value="One-Click"><button type="submit">Unsubscribe</button></form>'
        )
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="robots" content="noindex">'
        f"<title>{html.escape(title)}</title></head><body><main><h1>{html.escape(title)}</h1>"
        f"{body}</main></body></html>"
    )
    return _result(status, "text/html; charset=utf-8", page)


def _result(
    status: int, content_type: str, body: str, extra: dict[str, str] | None = None
) -> dict[str, Any]:
    headers = {
        "Content-Type": content_type,
        # No script, no style, no frame; the form posts here only.
        "Content-Security-Policy": "default-src 'none'; form-action 'self';"
        " frame-ancestors 'none'; base-uri 'none'",
        "X-Content-Type-Options": "nosniff",
        # The address holds the token: it never leaves in a Referer, and nothing keeps it.
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
        "X-Robots-Tag": "noindex",
        **(extra or {}),
    }
    return {"statusCode": status, "headers": headers, "body": body, "isBase64Encoded": False}


def _json(status: int, body: dict[str, Any]) -> dict[str, Any]:
    return _result(status, "application/json", json.dumps(body))


def _scope_words(scope: str) -> str:
    if scope.startswith("campaign:"):
        return "the messages of this campaign"
    if scope.startswith("rule:"):
        return "the messages of this kind"
    return "all messages from this sender"


def _invalid(exc: InvalidUnsubscribeLinkError, as_html: bool) -> dict[str, Any]:
    if as_html:
        return _page(HTTPStatus.BAD_REQUEST.value, "This link does not work", [
            html.escape(exc.message), f"(error code <code>{exc.code}</code>)",
        ])  # fmt: skip
    return error_result(HTTPStatus.BAD_REQUEST, "invalid_unsubscribe_link", exc.message)


def _form_fields(content_type: str, body: str) -> list[tuple[str, str]]:
    """The fields of a form body: form-encoded or multipart (RFC 8058 allows both). A body
    that is neither has none; nothing here raises on what a stranger sends."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == "multipart/form-data":
        message = email.message_from_string(f"Content-Type: {content_type}\r\n\r\n{body}")
        parts = message.get_payload() if message.is_multipart() else []
        fields: list[tuple[str, str]] = []
        for part in parts if isinstance(parts, list) else []:
            if not isinstance(part, email.message.Message):
                continue
            name = part.get_param("name", header="content-disposition")
            value = part.get_payload()
            if isinstance(name, str) and isinstance(value, str):
                fields.append((name, value.strip()))
        return fields
    if kind in ("", "application/x-www-form-urlencoded"):
        return parse_qsl(body, keep_blank_values=True)
    return []


def _one_click(headers: dict[str, str], body: str, base64_encoded: bool) -> bool:
    """Whether the POST carries `List-Unsubscribe=One-Click`."""
    try:
        if base64_encoded:
            body = base64.b64decode(body, validate=True).decode("utf-8")
        return ONE_CLICK in _form_fields(headers.get("content-type", ""), body)
    except (ValueError, LookupError, TypeError, AttributeError, email.errors.MessageError):
        # Not base64, not UTF-8, a part in an unknown charset: not a one-click request.
        return False


def _not_one_click(as_html: bool) -> dict[str, Any]:
    message = (
        "an unsubscribe POST carries List-Unsubscribe=One-Click (RFC 8058), form-encoded or"
        " as a multipart field; nothing was changed. Open the link to unsubscribe from its page"
    )
    if as_html:
        return _page(HTTPStatus.BAD_REQUEST.value, "Nothing was changed", [
            html.escape(message), "(error code <code>one_click_required</code>)",
        ])  # fmt: skip
    return error_result(HTTPStatus.BAD_REQUEST, "one_click_required", message)


def _unavailable() -> dict[str, Any]:
    return error_result(
        HTTPStatus.SERVICE_UNAVAILABLE, "unavailable", "the service is briefly unavailable; retry"
    )


def _record(link: Link) -> bool:
    """Put the link's address on the suppression list; True when it was not on it."""
    rt = runtime.current()
    conn = rt.api_database().connection()
    try:
        with tenant_transaction(conn, link.workspace_id, actor="unsubscribe-link"):
            return suppress(
                conn, link.workspace_id, link.channel, link.address, "unsubscribed", SOURCE,
                scope=link.scope,
            )  # fmt: skip
    except psycopg.errors.ForeignKeyViolation:
        # The workspace is gone, and with it everything it could send: nothing to stop.
        return False


def serve(
    method: str,
    path: str,
    headers: dict[str, str],
    body: str,
    settings: Settings,
    base64_encoded: bool = False,
) -> dict[str, Any]:
    """An API Gateway (payload v2) result for a path under /v1/unsubscribe/ (`body` as the
    event has it: base64 when `base64_encoded`)."""
    headers = {key.lower(): value for key, value in headers.items()}
    as_html = _wants_html(headers)
    token = path[len(PREFIX) :]
    if not token or "/" in token:
        return error_result(HTTPStatus.NOT_FOUND, "not_found", "no such route")
    if method not in {"GET", "HEAD", "POST"}:
        return error_result(
            HTTPStatus.METHOD_NOT_ALLOWED, "method_not_allowed",
            f"{method} is not served here; use GET or POST", headers={"Allow": ALLOW},
        )  # fmt: skip
    if len(body) > MAX_BODY_BYTES:
        return error_result(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "payload_too_large",
            f"an unsubscribe request's body is at most {MAX_BODY_BYTES} bytes",
        )  # fmt: skip
    if not settings.unsubscribe_key:
        # No key, no link this stack signed: every token is one it cannot vouch for.
        return _invalid(links.InvalidUnsubscribeLinkError("unsubscribe links are off"), as_html)
    try:
        link = links.verify(settings.unsubscribe_key, token)
    except InvalidUnsubscribeLinkError as exc:
        return _invalid(exc, as_html)
    masked = html.escape(links.mask(link.address))
    if method in {"GET", "HEAD"}:
        return _page(200, "Unsubscribe", [
            f"Stop {_scope_words(link.scope)} to <strong>{masked}</strong>?",
        ], form=True)  # fmt: skip
    if not _one_click(headers, body, base64_encoded):
        return _not_one_click(as_html)
    try:
        added = _record(link)
    except psycopg.OperationalError:
        logger.exception("database unavailable")
        return _unavailable()
    logger.info(
        "unsubscribed through a link",
        extra={"workspace_id": str(link.workspace_id), "scope": link.scope, "new": added},
    )
    if as_html:
        return _page(200, "You are unsubscribed", [
            f"<strong>{masked}</strong> will no longer receive {_scope_words(link.scope)}.",
        ])  # fmt: skip
    return _json(200, {"unsubscribed": True, "already": not added, "scope": link.scope})
