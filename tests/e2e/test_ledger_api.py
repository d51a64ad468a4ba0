"""The ledger and the resolver through the HTTP API: an action's attempts on GET, for
members too (sanitized only), and POST /v1/actions/{id}/resolve for admins."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import httpx

from tests.e2e.conftest import Api
from tests.e2e.test_api import create, error_of
from tests.waiting import wait_for
from tickwork.actions import model, store
from tickwork.actions.model import Action, Attempt
from tickwork.platform.db import connect
from tickwork.providers.base import Absent, Found, LookupResult, Outcome, Via


class Looking:
    """The runtime's webhook provider, with a lookup that finds what `have` names."""

    lookup_retention = timedelta(days=1)
    lookup_grace = timedelta(0)

    def __init__(self, inner: Any, have: dict[str, str]) -> None:
        self.inner = inner
        self.idempotent = inner.idempotent
        self.io_bound = inner.io_bound
        self.have = have

    def send(self, action: Action, via: Via | None = None) -> Outcome:
        return self.inner.send(action, via)  # type: ignore[no-any-return]

    def lookup(self, action: Action, via: Via | None = None) -> LookupResult:
        found = self.have.get(str(action.id))
        return Found(found, "in the provider's log") if found else Absent()


def claimed_and_finished(api: Api, database_url: str, outcome: str) -> str:
    """A row claimed and finalized as `outcome` (its call in the ledger), as a dispatcher
    would have left it; made after the runtime's resolver cron had its first pass (the next
    is a minute away), so the API is the one resolving it."""
    wait_for(lambda: api.local.resolutions)
    created = create(api, thing_id=f"post-{outcome}")
    with connect(database_url) as conn:
        [claimed] = store.claim(conn, "webhook", [created["id"]], early_tolerance=7200)
        now = time.time()
        if outcome == "delivered":  # the row it publishes records the call
            done = model.published(claimed.id, "r-1")
        else:
            done = model.failed(claimed.id, "ambiguous", "read timeout from the endpoint")
            call = Attempt(1, now - 0.2, now, "ambiguous", excerpt="read timeout from the endpoint")
            done = done._replace(attempt=call)
        store.finalize(conn, [done])
    return str(created["id"])


def test_members_see_an_actions_attempts_and_other_workspaces_do_not(api, database_url):
    action_id = claimed_and_finished(api, database_url, "delivered")
    seen = api.member.call("GET", f"/v1/actions/{action_id}")
    [attempt] = seen["attempts"]
    assert (attempt["attempt"], attempt["outcome"], attempt["provider_message_id"]) == (
        1, "delivered", "r-1",
    )  # fmt: skip
    assert attempt["latency_ms"] >= 0
    assert attempt["finished_at"] >= attempt["started_at"]
    assert attempt["resolution"] is None
    assert error_of(api.outsider.http.get(f"/v1/actions/{action_id}"), 404)


def test_resolve_is_for_admins_and_publishes_what_the_provider_has(api, database_url):
    action_id = claimed_and_finished(api, database_url, "ambiguous")
    providers = api.local.runtime.providers
    providers.register(
        "webhook", Looking(providers.for_action_type("webhook"), {action_id: "p-42"})
    )
    refused = api.member.http.post(f"/v1/actions/{action_id}/resolve")
    assert "admin" in error_of(refused, 403)["message"]
    resolved = api.admin.call("POST", f"/v1/actions/{action_id}/resolve")
    assert resolved["verdict"] == "delivered"
    assert (resolved["action"]["status"], resolved["action"]["provider_id"]) == (
        "published",
        "p-42",
    )
    [attempt] = api.member.call("GET", f"/v1/actions/{action_id}")["attempts"]
    assert (attempt["outcome"], attempt["resolution"]) == ("ambiguous", "delivered")
    assert attempt["excerpt"] == "read timeout from the endpoint"
    # Asked again, it is published: nothing to resolve
    again = api.admin.http.post(f"/v1/actions/{action_id}/resolve")
    assert "only actions failed as ambiguous or stuck" in error_of(again, 409)["message"]


def test_resolve_of_an_absent_message_sends_it_once_more(api, database_url):
    action_id = claimed_and_finished(api, database_url, "ambiguous")
    providers = api.local.runtime.providers
    providers.register("webhook", Looking(providers.for_action_type("webhook"), {}))
    resolved = api.admin.call("POST", f"/v1/actions/{action_id}/resolve")
    assert (resolved["verdict"], resolved["action"]["status"]) == ("requeued", "queued")
    assert resolved["action"]["attempt_count"] == 1


class Plain:
    """A provider that offers no lookup (as SES and Twilio)."""

    idempotent = False
    io_bound = False

    def send(self, action: Action, via: Via | None = None) -> Outcome:
        raise AssertionError("nothing is sent by a resolve")


def test_resolve_without_a_lookup_or_of_an_unknown_row_is_explained(api, database_url):
    action_id = claimed_and_finished(api, database_url, "ambiguous")
    api.local.runtime.providers.register("webhook", Plain())
    refused = api.admin.http.post(f"/v1/actions/{action_id}/resolve")
    assert "offers no way to ask" in error_of(refused, 409)["message"]
    missing = api.admin.http.post(f"/v1/actions/{UUID(int=5)}/resolve")
    assert error_of(missing, 404)
    bad = api.admin.http.post("/v1/actions/not-a-uuid/resolve")
    assert error_of(bad, 404)


def test_attempts_name_the_provider_called_and_why_it_was_a_fallback(api, database_url):
    # Given a row of a type with fallback providers whose first call got a transient
    # answer from Postmark and whose second went to SES past the threshold, written by
    # the dispatcher's finalize (its ledger entries name each provider)
    created = create(api, thing_id="post-failover")
    later = datetime.now(UTC) + timedelta(hours=1)  # out of the runtime's dispatchers' way
    with connect(database_url) as conn:
        [claimed] = store.claim(conn, "webhook", [created["id"]], early_tolerance=7200)
        now = time.time()
        first = Attempt(1, now - 0.3, now - 0.2, "transient", excerpt="HTTP 503",
                        provider="postmark")  # fmt: skip
        requeued = model.requeued(claimed.id, later, "HTTP 503")._replace(attempt=first)
        store.finalize(conn, [requeued])
        [again] = store.claim(conn, "webhook", [created["id"]], early_tolerance=7200)
        second = Attempt(2, now - 0.1, now, "delivered", provider="ses",
                         failover_reason="threshold")  # fmt: skip
        store.finalize(conn, [model.published(again.id, "ses-1")._replace(attempt=second)])
    # When a member reads the action
    attempts = api.member.call("GET", f"/v1/actions/{created['id']}")["attempts"]
    # Then each attempt names its provider, and the fallback's says why it was one
    seen = [(a["attempt"], a["outcome"], a["provider"], a["failover_reason"]) for a in attempts]
    assert seen == [(1, "transient", "postmark", None), (2, "delivered", "ses", "threshold")]
    assert attempts[1]["provider_message_id"] == "ses-1"
    # And an attempt of a type without fallbacks names none (the type's own provider)
    plain = claimed_and_finished(api, database_url, "delivered")
    [own] = api.member.call("GET", f"/v1/actions/{plain}")["attempts"]
    assert (own["provider"], own["failover_reason"]) == (None, None)
    # And the OpenAPI document describes both fields, the reason's values included
    document = httpx.get(f"{api.url}/v1/openapi.json").json()
    fields = document["components"]["schemas"]["AttemptOut"]["properties"]
    assert {"provider", "failover_reason"} <= set(fields)
    described = json.dumps(fields["failover_reason"])
    assert '"threshold"' in described
    assert '"circuit_open"' in described
