"""The suppression table: one spelling per address, the first reason kept, tenancy."""

from __future__ import annotations

from uuid import UUID

import pytest

from tests.conftest import make_workspace
from tickwork.platform.db import Connection
from tickwork.platform.errors import InputError
from tickwork.suppression.model import normalize_address
from tickwork.suppression.store import find_suppression, list_suppressions, suppress


@pytest.mark.parametrize(
    ("channel", "given", "stored"),
    [
        ("email", "Ann@Example.COM", "ann@example.com"),
        ("email", '"Ann" <ann@example.com>', "ann@example.com"),
        ("sms", "+1 (555) 010-0000", "+15550100000"),
        ("sms", "+44.20.7946.0000", "+442079460000"),
    ],
)
def test_addresses_are_stored_in_one_spelling(channel: str, given: str, stored: str) -> None:
    assert normalize_address(channel, given) == stored


@pytest.mark.parametrize(
    ("channel", "given"), [("email", "ann"), ("email", "@example.com"), ("sms", "5550100"),
                           ("sms", "+0123456789"), ("fax", "+15550100000")],
)  # fmt: skip
def test_what_is_not_an_address_is_refused(channel: str, given: str) -> None:
    with pytest.raises(InputError):
        normalize_address(channel, given)


def test_the_first_reason_is_kept_and_workspaces_are_apart(
    conn: Connection, workspace: UUID
) -> None:
    assert suppress(conn, workspace, "email", "Ann@Example.com", "hard_bounce", "postmark:c1")
    assert not suppress(conn, workspace, "email", "ann@example.com", "manual", "user:bob")
    found = find_suppression(conn, workspace, "email", "<ANN@example.com>")
    assert found is not None
    assert (found.reason, found.source) == ("hard_bounce", "postmark:c1")
    other = make_workspace(conn, "Other")
    assert find_suppression(conn, other, "email", "ann@example.com") is None


def test_a_scoped_entry_is_apart_from_everything(conn: Connection, workspace: UUID) -> None:
    scope = "campaign:6f1c2b1e-8f1e-4a57-9a54-3f0d2a9b7c11"
    assert suppress(conn, workspace, "sms", "+15550100000", "unsubscribed", "u", scope=scope)
    assert find_suppression(conn, workspace, "sms", "+15550100000") is None
    found = find_suppression(conn, workspace, "sms", "+15550100000", scope=scope)
    assert found is not None
    assert found.scope == scope
    assert suppress(conn, workspace, "sms", "+15550100000", "stop_reply", "twilio:c1")


def test_a_page_cursor_of_the_longest_address_fits_the_apis_limit(
    conn: Connection, workspace: UUID
) -> None:
    # The longest address one may add (64 + "@" + 255): its cursor stays under the 600
    # characters GET /v1/suppressions takes, with the longest scope, and pages on from it
    longest = "a" * 64 + "@" + ".".join(["b" * 63] * 3 + ["c" * 59]) + ".com"
    scope = "campaign:00000000-0000-4000-8000-000000000000"
    assert suppress(conn, workspace, "email", longest, "manual", "test", scope=scope)
    assert suppress(conn, workspace, "email", "ann@example.com", "manual", "test")
    first = list_suppressions(conn, workspace, limit=1)
    assert first.next_cursor is not None
    assert len(first.next_cursor) <= 600
    rest = list_suppressions(conn, workspace, limit=1, cursor=first.next_cursor)
    assert {e.address for e in first.items + rest.items} == {
        normalize_address("email", longest), "ann@example.com"}  # fmt: skip
