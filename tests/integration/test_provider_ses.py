"""Amazon SES v2 SendEmail through boto3, against moto (and botocore's Stubber for the error
codes moto does not produce); the Secrets Manager store against moto."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from tests.fakes import LOOPBACK, a_via, an_action
from tests.fakes.server import Answer
from tests.fakes.ses import SEND, FakeSes, error
from tickwork.connections.secrets import SecretsManagerStore, SecretStoreError
from tickwork.providers.base import Ambiguous, Delivered, Rejected, Transient
from tickwork.providers.http import OutboundPolicy
from tickwork.providers.ses import SesProvider

PAYLOAD = {"to": ["ann@example.com"], "subject": "Hello", "text": "Hi Ann", "html": "<p>Hi</p>",
           "tag": "welcome"}  # fmt: skip
CREDENTIALS = {"access_key_id": "AKIAIOSFODNN7EXAMPLE",
               "secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}  # fmt: skip


@pytest.fixture
def aws(monkeypatch) -> Iterator[None]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    with mock_aws():
        yield


def via(**settings: Any):
    return a_via("ses", {"region": "eu-west-1", "from": "news@example.com", **settings},
                 dict(CREDENTIALS))  # fmt: skip


def test_a_verified_sender_sends_and_the_message_id_is_kept(aws):
    boto3.client("sesv2", region_name="eu-west-1").create_email_identity(
        EmailIdentity="example.com"
    )
    action = an_action(payload=PAYLOAD)
    outcome = SesProvider({}).send(action, via())
    assert isinstance(outcome, Delivered)
    assert outcome.provider_id


def test_an_unverified_sender_is_message_rejected(aws):
    outcome = SesProvider({}).send(an_action(payload=PAYLOAD), via())
    assert isinstance(outcome, Rejected)
    assert outcome.code == "message_rejected"


def test_the_request_carries_tags_configuration_set_and_both_bodies(aws):
    provider = SesProvider({})
    v = via(configuration_set="marketing")
    client = provider.client(v)
    action = an_action(payload=PAYLOAD)
    with Stubber(client) as stub:
        stub.add_response("send_email", {"MessageId": "0100-abc"}, {
            "FromEmailAddress": "news@example.com",
            "Destination": {"ToAddresses": ["ann@example.com"], "CcAddresses": [],
                            "BccAddresses": []},
            "Content": {"Simple": {"Subject": {"Data": "Hello", "Charset": "UTF-8"},
                                   "Body": {"Text": {"Data": "Hi Ann", "Charset": "UTF-8"},
                                            "Html": {"Data": "<p>Hi</p>", "Charset": "UTF-8"}}}},
            "EmailTags": [{"Name": "tickwork_action_id", "Value": str(action.id)},
                          {"Name": "tag", "Value": "welcome"}],
            "ConfigurationSetName": "marketing",
        })  # fmt: skip
        outcome = provider.send(action, v)
        stub.assert_no_pending_responses()
    assert outcome == Delivered("0100-abc")


@pytest.mark.parametrize(
    ("code", "status", "kind", "error_code"),
    [
        ("MessageRejected", 400, Rejected, "message_rejected"),
        ("MailFromDomainNotVerifiedException", 400, Rejected, "mail_from_not_verified"),
        ("AccountSuspendedException", 400, Rejected, "account_suspended"),
        ("SendingPausedException", 400, Rejected, "sending_paused"),
        ("BadRequestException", 400, Rejected, "invalid_request"),
        ("NotFoundException", 404, Rejected, "not_found"),
        ("UnrecognizedClientException", 403, Rejected, "auth_failed"),
        ("AccessDeniedException", 403, Rejected, "auth_failed"),
        ("TooManyRequestsException", 429, Transient, None),
        ("LimitExceededException", 400, Transient, None),
        ("InternalFailure", 500, Ambiguous, None),
        ("SomethingNew", 400, Rejected, "provider_rejected"),
    ],
)  # fmt: skip
def test_error_table(aws, code, status, kind, error_code):
    provider = SesProvider({})
    v = via()
    with Stubber(provider.client(v)) as stub:
        stub.add_client_error(
            "send_email", service_error_code=code, service_message=f"{code} happened",
            http_status_code=status,
        )  # fmt: skip
        outcome = provider.send(an_action(payload=PAYLOAD), v)
    assert isinstance(outcome, kind), outcome
    if error_code:
        assert isinstance(outcome, Rejected)
        assert outcome.code == error_code
    assert CREDENTIALS["secret_access_key"] not in str(outcome)


def test_could_not_connect_is_transient():
    provider = SesProvider({"endpoint_url": "http://127.0.0.1:1"}, timeout=0.5, policy=LOOPBACK)
    outcome = provider.send(an_action(payload=PAYLOAD), via())
    assert isinstance(outcome, Transient)


# ------------------------------------------------- over real HTTP: one total deadline


@pytest.fixture
def ses() -> Iterator[FakeSes]:
    fake = FakeSes()
    yield fake
    fake.close()


def test_a_signed_request_reaches_ses_over_the_guarded_client(ses):
    provider = SesProvider({"endpoint_url": ses.url}, timeout=2.0, policy=LOOPBACK)
    outcome = provider.send(an_action(payload=PAYLOAD), via())
    assert isinstance(outcome, Delivered), outcome
    assert outcome.provider_id.startswith("0100-")
    (seen,) = ses.to(SEND)
    assert seen.headers["authorization"].startswith(
        f"AWS4-HMAC-SHA256 Credential={CREDENTIALS['access_key_id']}/"
    )
    assert seen.json()["Destination"]["ToAddresses"] == ["ann@example.com"]


def test_an_error_over_http_keeps_the_error_table(ses):
    ses.then(SEND, error("MessageRejected", 400, "Email address is not verified."))
    provider = SesProvider({"endpoint_url": ses.url}, timeout=2.0, policy=LOOPBACK)
    outcome = provider.send(an_action(payload=PAYLOAD), via())
    assert isinstance(outcome, Rejected), outcome
    assert outcome.code == "message_rejected"


def test_an_answer_dripping_past_the_total_deadline_is_ambiguous(ses):
    # Given SES answering one byte every 250 ms (each read well inside the 1 s timeout)
    ses.then(SEND, Answer(200, {"MessageId": "0100-" + "x" * 40}, drip=0.25))
    provider = SesProvider({"endpoint_url": ses.url}, timeout=1.0, policy=LOOPBACK)
    # When a call with a 1 s total deadline is made
    started = time.monotonic()
    outcome = provider.send(an_action(payload=PAYLOAD), via())
    elapsed = time.monotonic() - started
    # Then it ends near the deadline, ambiguous: the request had left
    assert isinstance(outcome, Ambiguous), outcome
    assert elapsed < 1.6, elapsed
    assert len(ses.to(SEND)) == 1


def test_a_host_name_not_resolved_by_the_deadline_is_transient(ses):
    # Given an SES endpoint whose name takes 10 s to resolve
    release = threading.Event()
    port = int(ses.url.rsplit(":", 1)[1])

    def slow(host: str, _port: int) -> list[Any]:
        release.wait(10)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    policy = OutboundPolicy(LOOPBACK.allowed_networks, slow)
    provider = SesProvider({"endpoint_url": f"http://ses.slow.example:{port}"}, timeout=1.0,
                           policy=policy)  # fmt: skip
    started = time.monotonic()
    outcome = provider.send(an_action(payload=PAYLOAD), via())
    elapsed = time.monotonic() - started
    release.set()
    # Then it ends at the deadline, transient (nothing was sent)
    assert isinstance(outcome, Transient), outcome
    assert elapsed < 1.6, elapsed
    assert ses.requests == []


def test_any_address_may_be_the_ses_endpoint(ses):
    # SES's endpoint is AWS's (or the operator's), never a tenant's: a VPC interface
    # endpoint resolves to private addresses, so no address rule applies to it.
    outcome = SesProvider({"endpoint_url": ses.url}, timeout=2.0).send(
        an_action(payload=PAYLOAD), via()
    )
    assert isinstance(outcome, Delivered), outcome
    assert len(ses.to(SEND)) == 1


# ----------------------------------------------------------------- the secret store


def test_secrets_manager_store_round_trip_and_delete(aws):
    client = boto3.client("secretsmanager", region_name="eu-west-1")
    store = SecretsManagerStore("tickwork-prod", max_age=0, client=client)
    ref = store.ref("1234")
    assert ref == "tickwork-prod/connections/1234"
    store.put(ref, {"server_token": "abc12345"})
    assert store.get(ref) == {"server_token": "abc12345"}
    store.put(ref, {"server_token": "new-value"})  # an existing secret gets a new version
    assert store.get(ref) == {"server_token": "new-value"}
    store.delete(ref)
    with pytest.raises(SecretStoreError):
        store.get(ref)
