"""Amazon SES v2 `SendEmail` through boto3, with the workspace's own AWS credentials (an IAM
user allowed `ses:SendEmail`) and region. `MessageId` is the provider id; the action id goes
in `EmailTags` (`tickwork_action_id`) so the message can be found in SES event records.
botocore's own retries are off: a retry after a timeout could send twice. botocore's
timeouts bound each socket operation only, so the signed request is sent through the guarded
client of `http.py` instead (the client's HTTP session is replaced): one total deadline per
call and a bounded read, as for every other provider. Its destination is AWS's regional
endpoint (or the operator's `endpoint_url`), never a tenant's, so any address may be
reached: an SES interface endpoint in the VPC resolves to private addresses.
Past the deadline the call is ambiguous, unless it provably never left (no connection made,
the host name not resolved).

| answer | outcome |
|---|---|
| `MessageId` | delivered |
| `MessageRejected` | rejected `message_rejected` |
| `MailFromDomainNotVerifiedException` | rejected `mail_from_not_verified` |
| `AccountSuspendedException` | rejected `account_suspended` |
| `SendingPausedException` | rejected `sending_paused` |
| `BadRequestException` | rejected `invalid_request` |
| `NotFoundException` | rejected `not_found` (e.g. the configuration set) |
| invalid or unauthorized credentials | rejected `auth_failed` |
| `TooManyRequestsException`, `LimitExceededException`, throttling | transient |
| could not connect, host name not resolved in time | transient |
| 5xx, read timeouts, deadline passed once connected | ambiguous (no idempotency key) |

No lookup: SES has no API to find a sent message (by id, tag or anything else). What
stands in is the configuration set's event destination: each event carries
`mail.messageId` and `mail.tags` (our action id). The SNS callbacks match events by
`MessageId`, which an unanswered attempt never learned (they count such an event
`unmatched`); a Firehose or CloudWatch destination keeps them for a person to search by
the action id. A row left `ambiguous` or `stuck` stays for a person.
"""

from __future__ import annotations

import hashlib
import re
import threading
from typing import Any

import httpx
from pydantic import Field, field_validator

from tickwork.actions.model import Claimed
from tickwork.platform.observability import logger
from tickwork.providers import http, unsubscribe
from tickwork.providers.base import (
    Ambiguous,
    Delivered,
    Outcome,
    Rejected,
    Transient,
    Verified,
    Via,
)
from tickwork.providers.http import OutboundPolicy, Redactor
from tickwork.providers.postmark import Payload as EmailPayload
from tickwork.providers.schema import Schema, mailbox

REJECTIONS = {
    "MessageRejected": "message_rejected",
    "MailFromDomainNotVerifiedException": "mail_from_not_verified",
    "AccountSuspendedException": "account_suspended",
    "SendingPausedException": "sending_paused",
    "BadRequestException": "invalid_request",
    "NotFoundException": "not_found",
}
AUTH = frozenset({"UnrecognizedClientException", "InvalidClientTokenId", "AccessDenied",
                  "AccessDeniedException", "SignatureDoesNotMatch", "ExpiredToken"})  # fmt: skip
TRANSIENT = frozenset({"TooManyRequestsException", "LimitExceededException", "Throttling",
                       "ThrottlingException"})  # fmt: skip
TAG_VALUE = re.compile(r"[^A-Za-z0-9_.@-]")
ANY_ADDRESS = OutboundPolicy.allowing(["0.0.0.0/0", "::/0"])


class Settings(Schema):
    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-[0-9]$")
    from_address: str = Field(alias="from", min_length=3, max_length=320)
    configuration_set: str | None = Field(default=None, max_length=64)
    # The SNS topic the configuration set publishes its events to: only its messages are
    # taken as this connection's delivery feedback (POST /v1/callbacks/{connection_id}).
    callback_topic_arn: str | None = Field(
        default=None, pattern=r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_.-]{1,256}$"
    )
    # Every message to one address carries a one-click unsubscribe link (RFC 8058).
    unsubscribe: bool | None = None

    @field_validator("from_address")
    @classmethod
    def _from(cls, value: str) -> str:
        return mailbox(value)


class Credentials(Schema):
    access_key_id: str = Field(pattern=r"^[A-Z0-9]{16,128}$")
    secret_access_key: str = Field(min_length=16, max_length=128)


class Payload(EmailPayload):
    """As Postmark's: to/cc/bcc, subject, text and/or html, tag, reply_to."""


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def _status(exc: Exception) -> int:
    response = getattr(exc, "response", None) or {}
    return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


class _Raw:
    """The body as botocore reads a raw response (`stream()`)."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Any:
        yield self.body


class _Session:
    """botocore's HTTP session interface (`send`, `close`) over `http.call`: the signed
    request, sent within one total deadline."""

    def __init__(self, client: httpx.Client, total_seconds: float, max_body_bytes: int) -> None:
        self.client = client
        self.total_seconds = total_seconds
        self.max_body_bytes = max_body_bytes

    def send(self, request: Any) -> Any:
        from botocore.awsrequest import AWSResponse  # noqa: PLC0415 - lazy: botocore loads only where AWS is called (cold start)
        from botocore.compat import HTTPHeaders  # noqa: PLC0415 - lazy: botocore loads only where AWS is called (cold start)

        body = request.body
        if body is not None and not isinstance(body, bytes | str):
            body = body.read()
        reply = http.call(
            self.client, request.method, request.url, total_seconds=self.total_seconds,
            max_body_bytes=self.max_body_bytes, headers=dict(request.headers.items()), content=body,
        )  # fmt: skip
        headers = HTTPHeaders()
        for name, value in reply.headers.multi_items():
            headers[name] = value
        return AWSResponse(request.url, reply.status, headers, _Raw(reply.body))

    def close(self) -> None:
        pass  # shared by this provider's clients; closed with the provider


def outcome_of_error(exc: Exception, redactor: Redactor) -> Outcome:
    if isinstance(exc, httpx.HTTPError | http.UnsafeDestinationError | http.ResolutionTimeoutError):
        return http.outcome_of_error(exc, "SES", redactor)
    from botocore.exceptions import (  # noqa: PLC0415 - lazy: botocore loads only where AWS is called (cold start)
        ClientError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
    )

    if isinstance(exc, EndpointConnectionError | ConnectTimeoutError):
        return Transient("could not connect to SES")
    if isinstance(exc, NoCredentialsError):
        return Rejected("auth_failed", "the SES connection has no credentials")
    if not isinstance(exc, ClientError):
        return Ambiguous(f"the SES call may have arrived ({type(exc).__name__})")
    code = _code(exc)
    # AWS documents its error as {Code, Message}: those are shown.
    message = redactor.message(exc.response.get("Error", {}).get("Message"))
    detail = f"SES {redactor.code(code) or 'error'}: {message}"
    if code in REJECTIONS:
        return Rejected(REJECTIONS[code], detail)
    if code in AUTH:
        return Rejected("auth_failed", detail)
    if code in TRANSIENT:
        return Transient(detail)
    if _status(exc) >= 500 or not _status(exc):
        return Ambiguous(detail)
    return Rejected("provider_rejected", detail)


class SesProvider:
    name = "ses"
    idempotent = False
    io_bound = True

    def __init__(
        self,
        options: dict[str, Any],
        timeout: float = 10.0,
        policy: OutboundPolicy | None = None,
        max_body_bytes: int = http.DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        # An endpoint override is for tests and local stand-ins only (operator-configured).
        self.endpoint_url = options.get("endpoint_url")
        self.timeout = timeout
        self.session = _Session(
            http.client(policy or ANY_ADDRESS, timeout), timeout, max_body_bytes
        )
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def client(self, via: Via) -> Any:
        """One boto3 client per connection and credentials (clients are thread-safe)."""
        import boto3  # noqa: PLC0415 - lazy: boto3 loads only where AWS is called (cold start)
        from botocore.config import Config  # noqa: PLC0415 - lazy: botocore loads only where AWS is called (cold start)

        key = hashlib.sha256(
            f"{via.id}:{via.settings['region']}:{via.credentials['access_key_id']}:"
            f"{via.credentials['secret_access_key']}".encode()
        ).hexdigest()
        with self._lock:
            found = self._clients.get(key)
            if found is None:
                found = boto3.client(
                    "sesv2",
                    region_name=via.settings["region"],
                    aws_access_key_id=via.credentials["access_key_id"],
                    aws_secret_access_key=via.credentials["secret_access_key"],
                    endpoint_url=self.endpoint_url,
                    config=Config(
                        connect_timeout=self.timeout,
                        read_timeout=self.timeout,
                        retries={"total_max_attempts": 1},
                    ),
                )
                # Where botocore would send with urllib3 (after its hooks: moto's answers
                # first in tests).
                found._endpoint.http_session = self.session
                self._clients[key] = found
            return found

    def send(self, action: Claimed, via: Via | None = None) -> Outcome:
        if via is None:
            return Rejected("connection_required", "SES sends only through a connection")
        payload = Payload.model_validate(action.payload)
        body: dict[str, Any] = {}
        if payload.text:
            body["Text"] = {"Data": payload.text, "Charset": "UTF-8"}
        if payload.html:
            body["Html"] = {"Data": payload.html, "Charset": "UTF-8"}
        simple: dict[str, Any] = {
            "Subject": {"Data": payload.subject, "Charset": "UTF-8"},
            "Body": body,
        }
        if via.unsubscribe_url:
            # SendEmail's Simple content takes extra header fields (Message.Headers).
            simple["Headers"] = [
                {"Name": name, "Value": value}
                for name, value in unsubscribe.headers(via.unsubscribe_url)
            ]
        tags = [{"Name": "tickwork_action_id", "Value": str(action.id)}]
        if payload.tag:
            tags.append({"Name": "tag", "Value": TAG_VALUE.sub("_", payload.tag)[:256]})
        request: dict[str, Any] = {
            "FromEmailAddress": payload.from_address or via.settings["from"],
            "Destination": {
                "ToAddresses": payload.to,
                "CcAddresses": payload.cc or [],
                "BccAddresses": payload.bcc or [],
            },
            "Content": {"Simple": simple},
            "EmailTags": tags,
        }
        if payload.reply_to:
            request["ReplyToAddresses"] = [payload.reply_to]
        if via.settings.get("configuration_set"):
            request["ConfigurationSetName"] = via.settings["configuration_set"]
        redactor = Redactor.of(via.credentials)
        try:
            answer = self.client(via).send_email(**request)
        except Exception as exc:
            logger.warning("provider call did not succeed", extra={
                "provider": "ses", "action_id": str(action.id), "code": _code(exc),
                "error": redactor.operator(f"{type(exc).__name__}: {exc}")})  # fmt: skip
            return outcome_of_error(exc, redactor)
        message_id = answer.get("MessageId")
        if not message_id:
            return Ambiguous("SES answered without a MessageId")
        return Delivered(str(message_id))

    def verify(self, via: Via) -> Verified:
        """The sender identity: is it verified for sending from this account and region?"""
        address = str(via.settings.get("from", ""))
        sender = address.rsplit("<", 1)[-1].rstrip(">")
        redactor = Redactor.of(via.credentials)
        client = self.client(via)
        for identity in (sender, sender.rsplit("@", 1)[-1]):
            try:
                found = client.get_email_identity(EmailIdentity=identity)
            except Exception as exc:
                code = _code(exc)
                if code == "NotFoundException":
                    continue
                if code in AUTH:
                    return Verified(
                        False,
                        "AWS refused the access key: check the key id, its secret, and that"
                        " it may call ses:GetEmailIdentity",
                    )
                return Verified(False, f"SES answered {code or type(exc).__name__}:"
                                f" {redactor.tenant(str(exc))}")  # fmt: skip
            if found.get("VerifiedForSendingStatus"):
                return Verified(True, f"{identity} may send", identity)
            return Verified(False, f"{identity} is not verified for sending in SES yet")
        return Verified(False, f"neither {sender} nor its domain is an SES identity in"
                        f" {via.settings.get('region')}")  # fmt: skip
