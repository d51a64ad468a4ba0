"""A fake Amazon SNS on loopback: it signs messages as SNS documents (the string to sign,
RSA PKCS#1 v1.5 with SHA1 for SignatureVersion 1 or SHA256 for 2) with the key of a
self-signed certificate it serves at its SigningCertURL, and records the GETs of its
SubscribeURL (a subscription's confirmation)."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from tests.fakes.server import Answer, FakeServer, Seen
from tickwork.feedback.sns import string_to_sign

CERTIFICATE = "/SimpleNotificationService-0123456789abcdef.pem"
CONFIRM = "/confirm"
TOPIC = "arn:aws:sns:us-east-1:123456789012:ses-events"


def _key_and_certificate() -> tuple[rsa.RSAPrivateKey, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.amazonaws.com")])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=30))
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    return key, certificate.public_bytes(serialization.Encoding.PEM)


class FakeSns(FakeServer):
    def __init__(self) -> None:
        super().__init__()
        self.key, self.pem = _key_and_certificate()

    def answer(self, seen: Seen) -> Answer:
        if seen.method == "GET" and seen.path == CERTIFICATE:
            return Answer(200, self.pem)
        if seen.method == "GET" and seen.path == CONFIRM:
            return Answer(200, "<ConfirmSubscriptionResponse/>")
        return Answer(404, "not found")

    def confirmations(self) -> list[Seen]:
        return self.to(CONFIRM)

    def sign(self, message: dict[str, Any], version: int = 1, key: Any = None) -> dict[str, Any]:
        """The message with SignatureVersion, SigningCertURL and Signature, as SNS sends it."""
        signed = {**message, "SignatureVersion": str(version),
                  "SigningCertURL": f"{self.url}{CERTIFICATE}"}  # fmt: skip
        algorithm = hashes.SHA1() if version == 1 else hashes.SHA256()
        signature = (key or self.key).sign(string_to_sign(signed), padding.PKCS1v15(), algorithm)
        return signed | {"Signature": base64.b64encode(signature).decode()}

    def notification(self, ses_event: dict[str, Any], topic: str = TOPIC,
                     version: int = 1) -> dict[str, Any]:  # fmt: skip
        return self.sign({
            "Type": "Notification", "MessageId": str(uuid.uuid4()), "TopicArn": topic,
            "Message": json.dumps(ses_event),
            "Timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "UnsubscribeURL": f"{self.url}/unsubscribe",
        }, version)  # fmt: skip

    def subscription_confirmation(self, topic: str = TOPIC) -> dict[str, Any]:
        token = uuid.uuid4().hex
        return self.sign({
            "Type": "SubscriptionConfirmation", "MessageId": str(uuid.uuid4()), "Token": token,
            "TopicArn": topic,
            "Message": f"You have chosen to subscribe to the topic {topic}.",
            "SubscribeURL": f"{self.url}{CONFIRM}?Action=ConfirmSubscription&Token={token}",
            "Timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        })  # fmt: skip


def ses_event(kind: str, message_id: str, **body: Any) -> dict[str, Any]:
    """An SES event-publishing record (eventType, mail, and the event's own object)."""
    mail = {"timestamp": "2026-12-05T08:00:00.000Z", "source": "news@example.com",
            "messageId": message_id, "destination": ["ann@example.com"],
            "tags": {"tickwork_action_id": ["x"]}}  # fmt: skip
    return {"eventType": kind, "mail": mail, **body}
