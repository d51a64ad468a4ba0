"""A connection's secret carries its provider as a tag, which IAM reads: the public routes'
function may read Twilio connections' credentials (Twilio signs its callbacks with the auth
token) and no other connection's. Secrets Manager is moto's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tickwork import connections
from tickwork.connections.secrets import PROVIDER_TAG, SecretsManagerStore

TWILIO = {"auth_token": "twilio-token-1"}


@pytest.fixture
def store(monkeypatch) -> Iterator[SecretsManagerStore]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    with mock_aws():
        client = boto3.client("secretsmanager", region_name="eu-west-1")
        yield SecretsManagerStore("tickwork-prod", max_age=0, client=client)


def tags(store: SecretsManagerStore, ref: str) -> dict[str, str]:
    found: list[dict[str, Any]] = store.client().describe_secret(SecretId=ref).get("Tags", [])
    return {tag["Key"]: tag["Value"] for tag in found}


def test_a_new_connections_secret_is_tagged_with_its_provider(conn, workspace, store):
    twilio = connections.create(
        conn, workspace, name="SMS", provider="twilio", settings={"account_sid": "AC1"},
        credentials=TWILIO, store=store, created_by=None,
    )  # fmt: skip
    slack = connections.create(
        conn, workspace, name="Bot", provider="slack", settings={},
        credentials={"bot_token": "xoxb-1"}, store=store, created_by=None,
    )  # fmt: skip
    assert tags(store, twilio.secret_ref or "") == {PROVIDER_TAG: "twilio"}
    assert tags(store, slack.secret_ref or "") == {PROVIDER_TAG: "slack"}


def test_new_credentials_tag_a_secret_made_before_tags(conn, workspace, store):
    # Given a Twilio connection whose secret an earlier version stored without the tag
    row = connections.create(
        conn, workspace, name="SMS", provider="twilio", settings={"account_sid": "AC1"},
        credentials=TWILIO, store=store, created_by=None,
    )  # fmt: skip
    ref = row.secret_ref or ""
    store.client().untag_resource(SecretId=ref, TagKeys=[PROVIDER_TAG])
    assert tags(store, ref) == {}
    # When its credentials are sent again
    connections.update(conn, workspace, row.id, store=store, credentials={"auth_token": "t-2x3y4z"})
    # Then the secret holds them, tagged
    assert store.get(ref) == {"auth_token": "t-2x3y4z"}
    assert tags(store, ref) == {PROVIDER_TAG: "twilio"}
