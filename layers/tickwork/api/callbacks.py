"""POST /v1/callbacks/{connection_id}: providers' own status callbacks, public (no JWT: the
provider calls it) and verified the provider's way instead (tickwork.feedback).

Served before the resolver (as the console and the OpenAPI document are): the bodies are
the providers' (form-encoded for Twilio, SNS's JSON as text/plain), not the API's JSON. A
verified callback is recorded in the connection's workspace's tenant transaction; a
forged or unverifiable one is 401 `callback_unverified`, changes nothing and is counted.
Nothing else waits on a callback: the API answers the provider and is done."""

from __future__ import annotations

import base64
import binascii
from http import HTTPStatus
from typing import Any, Literal
from uuid import UUID

import psycopg
from aws_lambda_powertools.event_handler import content_types

from tickwork import runtime
from tickwork.api.errors import error_result, status_of
from tickwork.connections import Connection
from tickwork.connections.secrets import SecretStore, SecretStoreError
from tickwork.events import DeliveryEvent as OutcomeEvent
from tickwork.events import emit_delivery_events
from tickwork.feedback import postmark, sns, twilio
from tickwork.feedback.common import CallbackRequest
from tickwork.feedback.model import (
    SUPPORTED,
    UNSUPPORTED_NOTE,
    USES_SECRET,
    CallbackSecretUnusedError,
    CallbacksUnsupportedError,
    CallbackUnverifiedError,
    DeliveryEvent,
    MalformedCallbackError,
    Recorded,
)
from tickwork.feedback.store import callback_connection, count, record_event
from tickwork.platform.config import Settings
from tickwork.platform.errors import NotFoundError, PayloadTooLargeError, TickworkError
from tickwork.platform.observability import emit, logger
from tickwork.runtime import Runtime
from tickwork.tenancy import tenant_transaction

PREFIX = "/v1/callbacks/"
MAX_CALLBACK_BYTES = 256 * 1024
# Twilio reads the answer to an inbound message as TwiML: an empty one sends no reply (its
# own opt-out handling has answered a STOP already).
EMPTY_TWIML = '<?xml version="1.0" encoding="UTF-8"?><Response></Response>'


def is_callback(path: str) -> bool:
    return path.startswith(PREFIX)


def callback_secret_ref(store: SecretStore, connection_id: UUID) -> str:
    """Where a connection's callback secret is kept, beside its credentials (the same
    store, so the same access rules; a credentials PATCH leaves it alone)."""
    return store.ref(f"{connection_id}/callback")


def public_base(settings: Settings, headers: dict[str, str]) -> str:
    """The API's public URL as providers call it: TICKWORK_PUBLIC_API_URL, else the
    request's own scheme and host (API Gateway's X-Forwarded-Proto and Host)."""
    if settings.public_api_url:
        return settings.public_api_url.rstrip("/")
    scheme = headers.get("x-forwarded-proto", "").split(",")[0].strip() or "http"
    return f"{scheme}://{headers.get('host', 'localhost')}"


def callback_url(settings: Settings, headers: dict[str, str], connection_id: UUID) -> str:
    return f"{public_base(settings, headers)}{PREFIX}{connection_id}"


def _answer(status: int, body: str = "", content_type: str = content_types.APPLICATION_JSON
            ) -> dict[str, Any]:  # fmt: skip
    return {"statusCode": status, "headers": {"Content-Type": content_type}, "body": body,
            "isBase64Encoded": False}  # fmt: skip


def handle(event: dict[str, Any]) -> dict[str, Any]:
    """One callback, as a Lambda proxy result."""
    http = event.get("requestContext", {}).get("http", {})
    if http.get("method", "").upper() != "POST":
        return error_result(
            HTTPStatus.METHOD_NOT_ALLOWED, "method_not_allowed",
            "a callback is POSTed by the provider; use POST", {"allowed": ["POST"]},
            headers={"Allow": "POST"},
        )  # fmt: skip
    try:
        return _handle(event)
    except sns.SubscriptionUnconfirmedError as exc:
        return error_result(HTTPStatus.BAD_GATEWAY, "subscription_unconfirmed", exc.message)
    except MalformedCallbackError as exc:
        # The caller's body, not our fault: one line, no traceback, nothing of the body
        # (the message may quote a value: only the field it names is logged).
        where = {"path": str(event.get("rawPath", ""))[:80], "field": exc.details.get("field")}
        logger.warning("callback refused: malformed", extra=where)
        return error_result(status_of(exc), exc.code, exc.message, exc.details)
    except TickworkError as exc:
        return error_result(status_of(exc), exc.code, exc.message, exc.details)
    except psycopg.DataError:
        # A value Postgres will not store got past the readers' checks (which refuse NULs,
        # lone surrogates, deep nesting): still the body's fault, and retrying cannot help.
        logger.warning("callback refused: a value the database cannot store",
                       extra={"path": str(event.get("rawPath", ""))[:80]})  # fmt: skip
        return error_result(
            HTTPStatus.BAD_REQUEST, "bad_request",
            "the callback carries a value that cannot be stored; nothing was recorded",
        )  # fmt: skip
    except psycopg.OperationalError:
        # The provider retries (Postmark, SNS) what is not answered 2xx.
        logger.exception("database unavailable")
        return error_result(
            HTTPStatus.SERVICE_UNAVAILABLE,
            "unavailable",
            "the service is briefly unavailable; retry",
        )
    except Exception:
        logger.exception("unhandled error in a callback")
        return error_result(
            HTTPStatus.INTERNAL_SERVER_ERROR, "internal", "something went wrong on our side"
        )


def _body(event: dict[str, Any]) -> str:
    body = event.get("body") or ""
    if len(body) > MAX_CALLBACK_BYTES * 2:
        raise _too_large()
    if event.get("isBase64Encoded") and body:
        try:
            body = base64.b64decode(body, validate=True).decode("utf-8")
        except (binascii.Error, ValueError) as exc:
            raise MalformedCallbackError("the callback body is not UTF-8 text") from exc
    if len(body.encode()) > MAX_CALLBACK_BYTES:
        raise _too_large()
    return str(body)


def _too_large() -> TickworkError:
    return PayloadTooLargeError(f"a callback body is at most {MAX_CALLBACK_BYTES} bytes")


def _handle(event: dict[str, Any]) -> dict[str, Any]:
    raw_path = str(event.get("rawPath", ""))
    raw_id = raw_path[len(PREFIX) :].strip("/")
    try:
        connection_id = UUID(raw_id)
    except ValueError as exc:
        raise NotFoundError(f"no connection {raw_id[:60]!r}") from exc
    headers = {k.lower(): str(v) for k, v in (event.get("headers") or {}).items()}
    rt = runtime.current()
    query = event.get("rawQueryString") or ""
    url = f"{public_base(rt.settings, headers)}{raw_path}" + (f"?{query}" if query else "")
    request = CallbackRequest(url, headers, _body(event))
    conn = rt.api_database().connection()
    connection = callback_connection(conn, connection_id)
    if connection is None or connection.status == "deleted":
        raise NotFoundError(f"no connection {connection_id}")
    if connection.provider not in SUPPORTED:
        raise CallbacksUnsupportedError(f"{connection.provider}: {UNSUPPORTED_NOTE}")
    try:
        events, answer = _read(rt, connection, request)
    except CallbackUnverifiedError:
        with tenant_transaction(conn, connection.workspace_id):
            count(conn, connection, "unverified")
        _metric(connection, "unverified")
        logger.warning("callback refused: not verified", extra={
            "connection_id": str(connection.id), "provider": connection.provider})  # fmt: skip
        raise
    with tenant_transaction(conn, connection.workspace_id):
        recorded = [_record(rt, conn, connection, e) for e in events]
        # In the same transaction: an outcome event exists exactly when its state does
        emit_delivery_events(conn, [o for r in recorded if (o := outcome_event(r)) is not None])
    for result in recorded:
        _metric(connection, result.outcome)
    return answer


def outcome_event(recorded: Recorded) -> OutcomeEvent | None:
    """The tenant's `action.delivered` / `action.bounced` for a delivery state this
    callback moved to (complaints and carrier failures have no event of their own)."""
    after, before = recorded.after, recorded.before
    if recorded.action_id is None or after is None:
        return None
    if before is not None and before.status == after.status:
        return None  # a soft bounce become hard is still the one bounce
    kinds: dict[str, Literal["action.delivered", "action.bounced"]] = {
        "delivered": "action.delivered",
        "bounced": "action.bounced",
    }
    kind = kinds.get(after.status)
    if kind is None:
        return None
    details: dict[str, Any] = {"status": after.status, "bounce": after.bounce,
                               "at": after.at.isoformat() if after.at else None}  # fmt: skip
    return OutcomeEvent(recorded.action_id, kind, details)


def _record(rt: Runtime, conn: Any, connection: Connection, event: DeliveryEvent) -> Recorded:
    return record_event(conn, connection, event, keep_days=rt.settings.callback_receipt_days)


def _metric(connection: Connection, outcome: str) -> None:
    emit({}, by=("Callbacks", "Outcome", {f"{connection.provider}:{outcome}": 1}))


def _secret(store: SecretStore, ref: str) -> dict[str, str]:
    try:
        return store.get(ref)
    except SecretStoreError:
        return {}


def _read(
    rt: Runtime, connection: Connection, request: CallbackRequest
) -> tuple[list[DeliveryEvent], dict[str, Any]]:
    """The callback verified the provider's way and read into events, with the answer the
    provider expects."""
    ok = _answer(200, '{"ok":true}')
    if connection.provider == "postmark":
        secret = _secret(rt.secrets, callback_secret_ref(rt.secrets, connection.id))
        postmark.verify(request, secret.get("secret"))
        return postmark.events(request), ok
    if connection.provider == "twilio":
        credentials = _secret(rt.secrets, connection.secret_ref or "")
        token = credentials.get("callback_auth_token") or credentials.get("auth_token")
        form = twilio.verify(request, token, str(connection.settings.get("account_sid", "")))
        found, inbound = twilio.events(request, form)
        if inbound:
            return found, _answer(200, EMPTY_TWIML, "text/xml")
        return found, ok
    message = sns.verify(request, str(connection.settings.get("callback_topic_arn") or ""),
                         rt.settings)  # fmt: skip
    if message.kind == "SubscriptionConfirmation":
        sns.confirm(message, rt.settings)
        return [], ok
    return sns.events(message), ok


def check_uses_secret(provider: str) -> None:
    """Refuse to make a callback secret no callback of this provider would carry (it
    would look like one more credential to keep, and verify nothing)."""
    if provider in USES_SECRET:
        return
    how = {
        "twilio": "Twilio signs its callbacks with the connection's auth token"
                  " (X-Twilio-Signature)",
        "ses": "SNS signs its messages with its own certificate; the connection's"
               " settings.callback_topic_arn says which topic speaks for it",
    }.get(provider, f"{provider} sends no status callbacks")  # fmt: skip
    raise CallbackSecretUnusedError(
        f"a {provider} connection takes no callback secret: {how}; only Postmark"
        " connections use one (in the webhook URL's credentials)",
        details={"provider": provider},
    )


def connection_callbacks(provider: str) -> tuple[bool, str]:
    """Whether a provider's connections receive callbacks, and how to set them up."""
    if provider == "postmark":
        return True, ("In Postmark, add a webhook (Delivery, Bounce, Spam Complaint) to this"
                      " URL with the credentials POST /v1/connections/{id}/callback-secret"
                      " gives once")  # fmt: skip
    if provider == "twilio":
        return True, ("Twilio signs its status callbacks and incoming messages with the"
                      " connection's auth token; Tickwork asks for status callbacks to this"
                      " URL on every SMS when the stack knows its public URL; point the"
                      " number's or messaging service's incoming messages here for STOP"
                      " replies")  # fmt: skip
    if provider == "ses":
        return True, ("Publish the configuration set's events (Delivery, Bounce, Complaint)"
                      " to an SNS topic named in settings.callback_topic_arn and subscribe"
                      " this URL (HTTPS) to it; the subscription confirms itself")  # fmt: skip
    return False, UNSUPPORTED_NOTE
