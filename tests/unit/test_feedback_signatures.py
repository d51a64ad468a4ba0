"""The providers' verification rules against their documented examples."""

from __future__ import annotations

import base64

import pytest

from tickwork.feedback import sns, twilio
from tickwork.feedback.common import CallbackRequest, check_basic_auth
from tickwork.feedback.model import CallbackUnverifiedError
from tickwork.platform.config import Settings


def test_twilios_signature_matches_its_helper_librarys_example():
    # twilio-python's request validator test: this URL, these parameters, token 12345
    params = {"CallSid": "CA1234567890ABCDE", "Caller": "+14158675309", "Digits": "1234",
              "From": "+14158675309", "To": "+18005551212"}  # fmt: skip
    url = "https://mycompany.com/myapp.php?foo=1&bar=2"
    assert twilio.signature(url, list(params.items()), "12345") == "RSOYDt4T1cUTdK1PDd93/VVr8B8="


def test_snss_string_to_sign_takes_the_types_fields_in_order():
    message = {"Type": "Notification", "MessageId": "m", "TopicArn": "t", "Message": "hi",
               "Timestamp": "2026-12-05T00:00:00Z", "Signature": "x", "SigningCertURL": "u",
               "UnsubscribeURL": "v"}  # fmt: skip
    expected = (
        "Message\nhi\nMessageId\nm\nTimestamp\n2026-12-05T00:00:00Z\nTopicArn\nt\n"
        "Type\nNotification\n"
    )
    assert sns.string_to_sign(message).decode() == expected
    with_subject = sns.string_to_sign(message | {"Subject": "s"}).decode()
    assert "MessageId\nm\nSubject\ns\nTimestamp" in with_subject


@pytest.mark.parametrize(
    ("url", "trusted"),
    [
        ("https://sns.us-east-1.amazonaws.com/SimpleNotificationService-1.pem", True),
        ("https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-1.pem", True),
        ("http://sns.us-east-1.amazonaws.com/x.pem", False),
        ("https://sns.us-east-1.amazonaws.com.evil.com/x.pem", False),
        ("https://evil.com/sns.us-east-1.amazonaws.com/x.pem", False),
        ("https://sns.us-east-1.amazonaws.com:8443/x.pem", False),
        ("https://s3.amazonaws.com/x.pem", False),
    ],
)
def test_sns_certificates_come_only_from_sns_hosts(url, trusted):
    assert sns.trusted_origin(url, Settings()) is trusted


def test_a_test_origin_is_trusted_only_when_configured():
    local = "http://127.0.0.1:5000/cert.pem"
    assert not sns.trusted_origin(local, Settings())
    assert sns.trusted_origin(local, Settings(sns_certificate_origin="http://127.0.0.1:5000"))


def basic(user: str, password: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_postmarks_basic_auth_takes_only_the_connections_secret():
    check_basic_auth(basic("tickwork", "s3cret"), "s3cret", "Postmark")
    for headers in (basic("tickwork", "other"), basic("admin", "s3cret"), {},
                    {"authorization": "Bearer s3cret"}, {"authorization": "Basic !!"}):  # fmt: skip
        with pytest.raises(CallbackUnverifiedError):
            check_basic_auth(headers, "s3cret", "Postmark")
    with pytest.raises(CallbackUnverifiedError, match="no callback secret"):
        check_basic_auth(basic("tickwork", ""), None, "Postmark")


def test_a_twilio_request_without_a_signature_or_token_is_unverified():
    request = CallbackRequest("https://api.example.com/v1/callbacks/x", {}, "MessageSid=SM1")
    with pytest.raises(CallbackUnverifiedError):
        twilio.verify(request, "token-123456", "")
    with pytest.raises(CallbackUnverifiedError):
        twilio.verify(request, None, "")
