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


PEM = "/SimpleNotificationService-9c6465fa7f48f5cacd23014631ec1136.pem"


@pytest.mark.parametrize(
    ("url", "trusted"),
    [
        # SNS's own certificate URLs: its regional hosts, GovCloud's and China's
        (f"https://sns.us-east-1.amazonaws.com{PEM}", True),
        (f"https://sns.ap-southeast-5.amazonaws.com{PEM}", True),
        (f"https://sns.us-gov-west-1.amazonaws.com{PEM}", True),
        (f"https://sns.cn-north-1.amazonaws.com.cn{PEM}", True),
        (f"https://sns.cn-northwest-1.amazonaws.com.cn{PEM}", True),
        (f"https://sns.eu-central-1.amazonaws.com:443{PEM}", True),
        # S3's addresses of a bucket named `sns`, which anyone could own
        (f"https://sns.s3.amazonaws.com{PEM}", False),
        (f"https://sns.s3-website-us-east-1.amazonaws.com{PEM}", False),
        (f"https://sns.s3-us-west-2.amazonaws.com{PEM}", False),
        (f"https://sns.s3.us-east-1.amazonaws.com{PEM}", False),
        # other one-label hosts that are no region
        (f"https://sns.ec2.amazonaws.com{PEM}", False),
        (f"https://sns.us-east.amazonaws.com{PEM}", False),
        (f"https://sns.cn-north-1.amazonaws.com{PEM}", False),
        (f"https://sns.us-east-1.amazonaws.com.cn{PEM}", False),
        # an SNS host, but not its certificate path
        ("https://sns.us-east-1.amazonaws.com/x.pem", False),
        ("https://sns.us-east-1.amazonaws.com/SimpleNotificationService-XYZ.pem", False),
        (f"https://sns.us-east-1.amazonaws.com/a{PEM}", False),
        (f"https://sns.us-east-1.amazonaws.com{PEM}?x=1", False),
        (f"https://sns.us-east-1.amazonaws.com{PEM}#f", False),
        ("https://sns.us-east-1.amazonaws.com/", False),
        # not https, another port, credentials, look-alike hosts
        (f"http://sns.us-east-1.amazonaws.com{PEM}", False),
        (f"https://sns.us-east-1.amazonaws.com:8443{PEM}", False),
        (f"https://sns.us-east-1.amazonaws.com:x{PEM}", False),
        (f"https://evil.com@sns.us-east-1.amazonaws.com{PEM}", False),
        (f"https://sns.us-east-1.amazonaws.com.evil.com{PEM}", False),
        (f"https://evil.com/sns.us-east-1.amazonaws.com{PEM}", False),
        (f"https://s3.amazonaws.com{PEM}", False),
        ("", False),
    ],
)
def test_sns_certificates_come_only_from_snss_own_certificate_urls(url, trusted):
    assert sns.trusted_certificate_url(url, Settings()) is trusted


@pytest.mark.parametrize(
    ("url", "trusted"),
    [
        ("https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription"
         "&TopicArn=arn:aws:sns:us-west-2:123456789012:t&Token=2336412f37", True),
        ("https://sns.us-west-2.amazonaws.com/?Action=Publish&TopicArn=t", False),
        ("https://sns.us-west-2.amazonaws.com/x?Action=ConfirmSubscription", False),
        ("https://sns.s3.amazonaws.com/?Action=ConfirmSubscription", False),
        ("http://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription", False),
    ],
)  # fmt: skip
def test_subscriptions_are_confirmed_only_at_sns(url, trusted):
    assert sns.trusted_subscribe_url(url, Settings()) is trusted


def test_a_test_origin_is_trusted_only_when_configured():
    local = "http://127.0.0.1:5000/cert.pem"
    assert not sns.trusted_certificate_url(local, Settings())
    extra = Settings(sns_certificate_origin="http://127.0.0.1:5000")
    assert sns.trusted_certificate_url(local, extra)
    assert sns.trusted_subscribe_url("http://127.0.0.1:5000/confirm?Token=1", extra)


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
