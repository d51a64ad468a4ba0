"""Amazon SES events, delivered by Amazon SNS to an HTTPS subscription.

SNS signs every message: the documented string to sign (the message's fields, each name
and value on a line of its own, in a fixed order per type) with the private key of the
certificate at `SigningCertURL`, RSA PKCS#1 v1.5 with SHA1 (`SignatureVersion` 1) or
SHA256 (2). The certificate is fetched only from SNS's own certificate URLs,
`https://sns.<region>.amazonaws.com/SimpleNotificationService-<hex>.pem` (a region as AWS
names them, GovCloud's `us-gov-west-1` included; `sns.cn-north-1.amazonaws.com.cn` in
China), never from anywhere else a message names: not from another `*.amazonaws.com`
host such as `sns.s3.amazonaws.com`, an S3 bucket named `sns` that anyone could own. The
operator may allow one more origin (TICKWORK_SNS_CERTIFICATE_ORIGIN: a local stand-in,
tests). A message without a signature is unverified (401), as a forged one is. The
message's `TopicArn` must be the one the SES connection names (`callback_topic_arn`):
anybody can sign with SNS, only that topic speaks for the connection.

A `SubscriptionConfirmation` is confirmed by GETting its `SubscribeURL` (an SNS host,
`/?Action=ConfirmSubscription&...`); a `Notification` carries an SES event (event
publishing's `eventType`, or an identity notification's `notificationType`):

| SES event | becomes |
|---|---|
| Delivery | delivered, at `delivery.timestamp` |
| Bounce, `bounceType` Permanent | bounced hard; each bounced recipient suppressed (`hard_bounce`) |
| Bounce, Transient or Undetermined | bounced soft |
| Complaint | complained; each complained recipient suppressed (`complaint`) |
| Reject, Rendering Failure | undelivered |
| Send | sent |
| anything else (Open, Click, DeliveryDelay, Subscription) | ignored |

The event's identity is the SNS `MessageId` (a redelivery carries the same)."""

from __future__ import annotations

import base64
import re
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlsplit

import httpx
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tickwork.feedback.common import CallbackRequest, detail, instant, json_object, text_field
from tickwork.feedback.model import (
    CallbackUnverifiedError,
    DeliveryEvent,
    MalformedCallbackError,
    Suppress,
)
from tickwork.platform.config import Settings
from tickwork.platform.errors import TickworkError
from tickwork.providers import http, outbound_policy

# SNS's regional hosts: a region as AWS names them (us-east-1, ap-southeast-5,
# us-gov-west-1) under amazonaws.com, China's (cn-north-1, cn-northwest-1) under
# amazonaws.com.cn. One label of letters, digits and dashes is not enough: `s3` and
# `s3-website-us-east-1` are S3's, and `sns.s3.amazonaws.com` is anyone's bucket `sns`.
SNS_HOST = re.compile(
    r"^sns\.(?:(?!cn-)[a-z]{2}(?:-gov)?-[a-z]+-[0-9]{1,2}\.amazonaws\.com"
    r"|cn-[a-z]+-[0-9]{1,2}\.amazonaws\.com\.cn)$"
)
# The path SNS serves its signing certificates at.
CERTIFICATE_PATH = re.compile(r"^/SimpleNotificationService-[0-9a-f]{1,64}\.pem$")
FIELDS = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": (
        "Message",
        "MessageId",
        "SubscribeURL",
        "Timestamp",
        "Token",
        "TopicArn",
        "Type",
    ),
    "UnsubscribeConfirmation": (
        "Message",
        "MessageId",
        "SubscribeURL",
        "Timestamp",
        "Token",
        "TopicArn",
        "Type",
    ),
}
MAX_CERTIFICATE_BYTES = 16 * 1024
FETCH_SECONDS = 5.0
WHAT = "SNS message"


class SubscriptionUnconfirmedError(TickworkError):
    """SNS's SubscribeURL could not be called: the subscription stays pending."""

    code = "subscription_unconfirmed"


@dataclass(frozen=True)
class SnsMessage:
    kind: str
    fields: dict[str, Any]


def _on_sns(url: str, settings: Settings) -> tuple[bool, SplitResult | None]:
    """(whether the URL is on the operator's one extra origin, its parts when it is https on
    an SNS host: no credentials, no port but 443, no fragment)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is not a number, a bracket left open
        return False, None
    extra = settings.sns_certificate_origin
    if extra and f"{parts.scheme}://{parts.netloc}" == extra.rstrip("/"):
        return True, None
    sns_host = (
        parts.scheme == "https"
        and "@" not in parts.netloc
        and bool(SNS_HOST.fullmatch(parts.hostname or ""))
        and port in (None, 443)
        and not parts.fragment
    )
    return False, parts if sns_host else None


def trusted_certificate_url(url: str, settings: Settings) -> bool:
    """The certificate may be fetched: one of SNS's own certificate URLs
    (`https://sns.<region>.amazonaws.com/SimpleNotificationService-<hex>.pem`), or on the
    operator's one extra origin."""
    extra, parts = _on_sns(url, settings)
    return extra or (
        parts is not None and not parts.query and bool(CERTIFICATE_PATH.fullmatch(parts.path))
    )


def trusted_subscribe_url(url: str, settings: Settings) -> bool:
    """A SubscribeURL may be called: SNS's ConfirmSubscription on an SNS host, or on the
    operator's one extra origin."""
    extra, parts = _on_sns(url, settings)
    if extra:
        return True
    if parts is None or parts.path not in ("", "/"):
        return False
    return ("Action", "ConfirmSubscription") in parse_qsl(parts.query)


def string_to_sign(message: dict[str, Any]) -> bytes:
    """SNS's documented string to sign: each field of the type's list that the message has,
    `name\\nvalue\\n`, in that order."""
    kind = str(message.get("Type"))
    text = "".join(
        f"{name}\n{message[name]}\n" for name in FIELDS[kind]
        if name in message and message[name] is not None
    )  # fmt: skip
    return text.encode()


class _Certificates:
    """Signing certificates by URL, kept for the process (SNS rotates them rarely, under a
    new URL)."""

    def __init__(self) -> None:
        self._found: dict[str, rsa.RSAPublicKey] = {}
        self._lock = threading.Lock()

    def key(self, url: str, settings: Settings) -> rsa.RSAPublicKey:
        with self._lock:
            found = self._found.get(url)
        if found is not None:
            return found
        key = _fetch_key(url, settings)
        with self._lock:
            if len(self._found) > 100:
                self._found.clear()
            self._found[url] = key
        return key


CERTIFICATES = _Certificates()


def _get(url: str, settings: Settings, max_bytes: int) -> http.Reply:
    with http.client(outbound_policy(settings), FETCH_SECONDS) as client:
        return http.call(client, "GET", url, total_seconds=FETCH_SECONDS,
                         max_body_bytes=max_bytes)  # fmt: skip


def _fetch_key(url: str, settings: Settings) -> rsa.RSAPublicKey:
    try:
        reply = _get(url, settings, MAX_CERTIFICATE_BYTES)
    except (httpx.HTTPError, http.UnsafeDestinationError, http.ResolutionTimeoutError) as exc:
        raise CallbackUnverifiedError("SNS's signing certificate could not be fetched") from exc
    if reply.status != 200 or reply.truncated:
        raise CallbackUnverifiedError(
            f"SNS's signing certificate could not be fetched (HTTP {reply.status})"
        )
    try:
        key = x509.load_pem_x509_certificate(reply.body).public_key()
    except ValueError as exc:
        raise CallbackUnverifiedError("SNS's signing certificate is not a certificate") from exc
    if not isinstance(key, rsa.RSAPublicKey):
        raise CallbackUnverifiedError("SNS's signing certificate is not an RSA certificate")
    return key


def _check_signature(message: dict[str, Any], settings: Settings) -> None:
    """The message's signature verifies with the certificate at its SigningCertURL, one of
    SNS's own."""
    version = str(message.get("SignatureVersion"))
    algorithm: hashes.HashAlgorithm
    if version == "1":
        algorithm = hashes.SHA1()
    elif version == "2":
        algorithm = hashes.SHA256()
    else:
        raise CallbackUnverifiedError(f"SNS SignatureVersion {version[:10]!r} is not 1 or 2")
    certificate_url = str(message["SigningCertURL"])
    if not trusted_certificate_url(certificate_url, settings):
        raise CallbackUnverifiedError(
            "the SigningCertURL is not one of SNS's certificates"
            " (https://sns.<region>.amazonaws.com/SimpleNotificationService-<hex>.pem)"
        )
    try:
        signature = base64.b64decode(str(message["Signature"]), validate=True)
    except ValueError as exc:  # binascii.Error, or a character that is not ASCII
        raise CallbackUnverifiedError("the SNS Signature is not base64") from exc
    key = CERTIFICATES.key(certificate_url, settings)
    try:
        key.verify(signature, string_to_sign(message), padding.PKCS1v15(), algorithm)
    except InvalidSignature as exc:
        raise CallbackUnverifiedError("the SNS signature does not verify") from exc


def verify(request: CallbackRequest, topic_arn: str, settings: Settings) -> SnsMessage:
    """The message, once its signature verifies with SNS's certificate and it comes from
    the connection's topic."""
    message = json_object(request.body, WHAT)
    kind = text_field(message, "Type", WHAT, 64)
    if kind not in FIELDS:
        raise MalformedCallbackError(f"{kind[:40]!r} is not a type of SNS message", field="Type")
    for name in ("Signature", "SigningCertURL", "SignatureVersion"):
        # Unsigned is unverified (401), as forged is; a signed message's fields are read next
        if not isinstance(message.get(name), str) or not message[name]:
            raise CallbackUnverifiedError(f"the SNS message is not signed: it has no {name}")
    for name in ("MessageId", "Timestamp", "TopicArn", "Message"):
        text_field(message, name, WHAT, 300_000)
    _check_signature(message, settings)
    sent = instant(message["Timestamp"])
    if sent is None or sent < datetime.now(UTC) - timedelta(days=settings.callback_receipt_days):
        # Older than the receipts that tell a replay from a new message: refused.
        raise CallbackUnverifiedError("the SNS message is too old (its Timestamp) to be taken")
    if not topic_arn:
        raise CallbackUnverifiedError(
            "the SES connection names no SNS topic: set settings.callback_topic_arn to the"
            " topic its events are published to"
        )
    if message["TopicArn"] != topic_arn:
        raise CallbackUnverifiedError("the SNS message comes from another topic than the"
                                      " connection's callback_topic_arn")  # fmt: skip
    return SnsMessage(kind, message)


def confirm(message: SnsMessage, settings: Settings) -> None:
    """Confirm the subscription: GET its SubscribeURL (on an SNS host only)."""
    url = str(message.fields.get("SubscribeURL") or "")
    if not trusted_subscribe_url(url, settings):
        raise CallbackUnverifiedError(
            "the SubscribeURL is not SNS's (https://sns.<region>.amazonaws.com/"
            "?Action=ConfirmSubscription&...)"
        )
    try:
        reply = _get(url, settings, 16 * 1024)
    except (httpx.HTTPError, http.UnsafeDestinationError, http.ResolutionTimeoutError) as exc:
        raise SubscriptionUnconfirmedError(
            "SNS could not be reached to confirm the subscription; ask SNS to send the"
            " confirmation again"
        ) from exc
    if reply.status != 200:
        raise SubscriptionUnconfirmedError(
            f"SNS answered HTTP {reply.status} to the confirmation; ask SNS to send it again"
        )


def _recipients(items: Any) -> list[str]:
    out = []
    for item in items if isinstance(items, list) else []:
        address = item.get("emailAddress") if isinstance(item, dict) else None
        if isinstance(address, str) and "@" in address and len(address) <= 320:
            out.append(address)
    return out


def _object(ses: dict[str, Any], name: str) -> dict[str, Any]:
    found = ses.get(name)
    return found if isinstance(found, dict) else {}


def events(message: SnsMessage) -> list[DeliveryEvent]:
    """The SES event a Notification carries (other messages carry none)."""
    if message.kind != "Notification":
        return []
    key = f"sns:{message.fields['MessageId']}"[:300]
    ses = json_object(str(message.fields["Message"]), "SES event")
    kind = str(ses.get("eventType") or ses.get("notificationType") or "")
    found = ses.get("mail")
    mail: dict[str, Any] = found if isinstance(found, dict) else {}
    message_id = mail.get("messageId")
    if not isinstance(message_id, str) or not message_id or len(message_id) > 300:
        raise MalformedCallbackError("the SES event has no mail.messageId", field="mail")
    if kind == "Delivery":
        body = _object(ses, "delivery")
        return [DeliveryEvent(key, message_id, "delivered", instant(body.get("timestamp")),
                              detail=detail("Delivery", body.get("smtpResponse")))]  # fmt: skip
    if kind == "Bounce":
        body = _object(ses, "bounce")
        hard = body.get("bounceType") == "Permanent"
        bounced = _recipients(body.get("bouncedRecipients")) if hard else []
        suppress = tuple(Suppress("email", a, "hard_bounce") for a in bounced)
        return [DeliveryEvent(
            key, message_id, "bounced", instant(body.get("timestamp")),
            bounce="hard" if hard else "soft",
            detail=detail(body.get("bounceType"), body.get("bounceSubType")), suppress=suppress,
        )]  # fmt: skip
    if kind == "Complaint":
        body = _object(ses, "complaint")
        suppress = tuple(Suppress("email", a, "complaint")
                         for a in _recipients(body.get("complainedRecipients")))  # fmt: skip
        return [DeliveryEvent(
            key, message_id, "complained", instant(body.get("timestamp")),
            detail=detail("Complaint", body.get("complaintFeedbackType")), suppress=suppress,
        )]  # fmt: skip
    if kind in ("Reject", "Rendering Failure"):
        return [DeliveryEvent(key, message_id, "undelivered", None, detail=detail(kind))]
    if kind == "Send":
        return [DeliveryEvent(key, message_id, "sent", instant(mail.get("timestamp")))]
    return [DeliveryEvent(key, message_id, None, None)]
