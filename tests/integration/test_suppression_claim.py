"""Suppression at claim: a row addressed to a suppressed address is cancelled by the claim
itself (`suppressed`), never reaching its provider (fake Postmark and Twilio servers count
the calls); the SQL that reads and normalizes the addresses agrees with Python's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.engine import drain, row
from tests.fakes import LOOPBACK
from tests.fakes.postmark import TOKEN, FakePostmark
from tests.fakes.twilio import ACCOUNT_SID, AUTH_TOKEN, FakeTwilio
from tests.integration.test_query_plans import index_scans, plan_of
from tickwork import connections
from tickwork.actions import scheduling as actions
from tickwork.actions import store, why
from tickwork.actions.model import NewAction
from tickwork.engine.tick import run_tick
from tickwork.platform.config import ActionTypeConfig
from tickwork.platform.db import Connection
from tickwork.platform.errors import InputError
from tickwork.platform.sql import query
from tickwork.providers.postmark import PostmarkProvider
from tickwork.providers.twilio import TwilioProvider
from tickwork.suppression.model import mask_address, normalize_address
from tickwork.suppression.store import suppress

EMAILS = [
    "ann@example.com",
    "Ann@Example.COM",
    "  ann@example.com  ",
    "Ann <ann@example.com>",
    '"Ann Example" <Ann@Example.com>',
    '"Doe, Ann" <ann@example.com>',
    "<ann@example.com>",
    "Ann <ann@example.com",
    "ann@example.com>",
    "Ann (home) <ann@example.com>",
    "ann(home)@example.com",
    "ann.b+news@mail.example.co.uk",
    "ÄNN@example.com",
    "Élodie <élodie@example.fr>",
    "a..b@example.com",
    ".a@example.com",
    "a\\b@example.com",
    "o'brien@example.ie",
    "Ann: <ann@example.com>",
    "ann",
    "@example.com",
    "ann@",
    "",
    "Ann <<ann@example.com>>",
    "a;b@example.com",
    "a,b@example.com",
    "a[b]@example.com",
    '"a b"@example.com',
    "ann @ example.com",
    "Doe, Ann <ann@example.com>",
    "Doe; Ann <ann@example.com>",
    "Ann Example <ann.example@example.com>",
    "ann.example@example.com",
    "ANN_x-y%z@sub.example.org",
    "ann@example.com.",
    "ann@.example.com",
    "a.@example.com",
    "a!#$&*=?^`{|}~@example.com",
    "Ann B. Smith <ann@example.com>",
    "ann@example.com (Ann)",
    "\tann@example.com\n",
    "ann . b @ example . com",
    "<ann @ example.com>",
    "Ann < ann@example.com >",
    "ann b@example.com",
    "ann@example .com",
    "a@b@example.com",
]
PHONES = [
    "+15550100000",
    " +15550100000 ",
    "+1 (555) 010-0000",
    "+44.20.7946.0000",
    "+1-555-010-0000",
    "15550100000",
    "+0123456789",
    "+12345",
    "+1234567890123456",
    "+1555010000a",
    "",
]


def _python(channel: str, address: str) -> str | None:
    try:
        return normalize_address(channel, address)
    except InputError:
        return None


@pytest.mark.parametrize(
    ("channel", "address"), [("email", a) for a in EMAILS] + [("sms", p) for p in PHONES]
)
def test_sql_and_python_normalize_alike(conn: Connection, channel: str, address: str) -> None:
    [(sql, claimed)] = conn.execute(
        "select tickwork_normalize_address(%s, %s), tickwork_claim_addresses(%s, %s)",
        (channel, address, channel, Jsonb({"to": address})),
    ).fetchall()
    python = _python(channel, address)
    assert sql == python
    # What the claim looks up for a message to it (its plain-address shortcut included).
    assert claimed == ([] if python is None else [python])


@pytest.mark.parametrize(
    ("channel", "address"),
    [("email", "ann@example.com"), ("email", "x@y.io"), ("sms", "+15550100000"),
     ("sms", "+123"), ("email", "nobody")],
)  # fmt: skip
def test_sql_and_python_mask_alike(conn: Connection, channel: str, address: str) -> None:
    [(sql,)] = conn.execute("select tickwork_mask_address(%s, %s)", (channel, address)).fetchall()
    assert sql == mask_address(channel, address)
    assert address not in sql or len(address) < 5


def test_a_messages_addresses_are_its_to_cc_and_bcc(conn: Connection) -> None:
    payload = {"to": ["Ann <Ann@Example.com>", "bob@example.com"], "cc": "Cy <cy@example.com>",
               "bcc": ["dee@example.com"], "subject": "s", "text": "t",
               "reply_to": "eve@example.com"}  # fmt: skip
    [(email,)] = conn.execute(
        "select tickwork_message_addresses('email', %s)", (Jsonb(payload),)
    ).fetchall()
    assert sorted(email) == ["ann@example.com", "bob@example.com", "cy@example.com",
                             "dee@example.com"]  # fmt: skip
    [(sms,)] = conn.execute(
        "select tickwork_message_addresses('sms', %s)", (Jsonb({"to": "+15550100000"}),)
    ).fetchall()
    assert sms == ["+15550100000"]
    [(none,)] = conn.execute(
        "select tickwork_message_addresses('sms', %s)", (Jsonb({"text": "hi"}),)
    ).fetchall()
    assert none == []


# ------------------------------------------------------------------------------ dispatch


@pytest.fixture
def fakes(runtime: Any) -> Iterator[tuple[FakePostmark, FakeTwilio]]:
    postmark, twilio = FakePostmark(), FakeTwilio()
    runtime.settings = runtime.settings.model_copy(
        update={"action_types": {"email": ActionTypeConfig(provider="postmark"),
                                 "sms": ActionTypeConfig(provider="twilio")}}
    )  # fmt: skip
    runtime.providers.register("email", PostmarkProvider({"api_url": postmark.url}, 2.0, LOOPBACK))
    runtime.providers.register("sms", TwilioProvider({"api_url": twilio.url}, 2.0, LOOPBACK))
    yield postmark, twilio
    postmark.close()
    twilio.close()


def _connection(conn: Connection, workspace: UUID, runtime: Any, provider: str) -> UUID:
    settings, credentials = {
        "postmark": ({"from": "News <news@example.com>"}, {"server_token": TOKEN}),
        "twilio": ({"account_sid": ACCOUNT_SID, "from": "+15005550006"},
                   {"auth_token": AUTH_TOKEN}),
    }[provider]  # fmt: skip
    return connections.create(
        conn, workspace, name=provider, provider=provider, settings=settings,
        credentials=credentials, store=runtime.secrets, created_by=None,
    ).id  # fmt: skip


def _schedule(
    conn: Connection, workspace: UUID, runtime: Any, now: Any, action_type: str,
    payloads: list[dict[str, Any]],
) -> list[UUID]:  # fmt: skip
    via = _connection(conn, workspace, runtime, "postmark" if action_type == "email" else "twilio")
    return [
        actions.schedule(conn, workspace, NewAction(
            action_type=action_type, target_key=f"t{n}", publish_at=now, payload=payload,
            connection_id=via,
        ), runtime.settings, now).action.id
        for n, payload in enumerate(payloads)
    ]  # fmt: skip


def _email(to: Any) -> dict[str, Any]:
    return {"to": to, "subject": "Hello", "text": "Hi"}


def test_a_suppressed_email_is_cancelled_with_no_call_and_the_others_are_sent(
    conn, workspace, runtime, now, fakes
):
    postmark, _ = fakes
    suppress(conn, workspace, "email", "ann@example.com", "hard_bounce", "postmark:c1")
    ids = _schedule(conn, workspace, runtime, now, "email", [
        _email("Ann <ANN@example.com>"), _email("bob@example.com"),
        _email(["cy@example.com"]), _email("dee@example.com"),
    ])  # fmt: skip
    run_tick(conn, runtime.queues, runtime.settings)
    summary = drain(runtime, "email")
    assert summary.published == 3
    assert sorted(e.json()["To"] for e in postmark.emails()) == [
        "bob@example.com", "cy@example.com", "dee@example.com"]  # fmt: skip
    held = row(conn, ids[0])
    assert (held["status"], held["error_code"], held["attempt_count"]) == (
        "cancelled", "suppressed", 0)  # fmt: skip
    assert held["last_error"] == (
        "suppressed: a***@example.com is on the suppression list (hard_bounce)"
    )
    assert held["finished_at"] is not None
    assert held["submitted_at"] is None
    assert {row(conn, i)["status"] for i in ids[1:]} == {"published"}


def test_a_suppressed_sms_is_cancelled_with_no_call(conn, workspace, runtime, now, fakes):
    _, twilio = fakes
    suppress(conn, workspace, "sms", "+1 (555) 010-0000", "stop_reply", "twilio:c1")
    ids = _schedule(conn, workspace, runtime, now, "sms", [
        {"to": "+15550100000", "body": "hi"}, {"to": "+15550100001", "body": "hi"},
    ])  # fmt: skip
    run_tick(conn, runtime.queues, runtime.settings)
    drain(runtime, "sms")
    assert [m.form()["To"] for m in twilio.messages()] == ["+15550100001"]
    held = row(conn, ids[0])
    assert (held["status"], held["error_code"]) == ("cancelled", "suppressed")
    assert "+15*******00" in held["last_error"]
    assert "+15550100000" not in held["last_error"]
    assert row(conn, ids[1])["status"] == "published"


def test_one_suppressed_cc_holds_the_whole_email(conn, workspace, runtime, now, fakes):
    postmark, _ = fakes
    suppress(conn, workspace, "email", "cy@example.com", "complaint", "postmark:c1")
    [held] = _schedule(conn, workspace, runtime, now, "email", [
        _email("ann@example.com") | {"cc": ["Cy <cy@example.com>"]},
    ])  # fmt: skip
    run_tick(conn, runtime.queues, runtime.settings)
    drain(runtime, "email")
    assert postmark.emails() == []
    assert row(conn, held)["error_code"] == "suppressed"


def test_why_shows_the_suppression_with_the_address_masked(conn, workspace, runtime, now, fakes):
    suppress(conn, workspace, "email", "ann@example.com", "manual", "user:bob")
    [held] = _schedule(conn, workspace, runtime, now, "email", [_email("ann@example.com")])
    run_tick(conn, runtime.queues, runtime.settings)
    drain(runtime, "email")
    changes = conn.execute(
        "select kind, reason from action_changes where action_id = %s", (held,)
    ).fetchall()
    assert changes == [
        ("cancel", "suppressed: a***@example.com is on the suppression list (manual)")
    ]
    steps = api_why(runtime, workspace, held)
    [step] = [s for s in steps if s.code == "suppressed"]
    assert step.text == (
        "Not sent when it fell due: a***@example.com is on the suppression list (manual)."
    )
    assert "ann@example.com" not in repr(steps)


def api_why(runtime: Any, workspace: UUID, action_id: UUID) -> list[why.Step]:
    """The steps `GET /v1/actions/{id}/why` answers with."""
    facts = why.read(runtime.db.connection(), workspace, action_id)
    assert facts is not None
    return why.explain(facts, runtime.settings, datetime.now(UTC), ZoneInfo("UTC"))


# ------------------------------------------------------------------- the claim statement


def _insert(
    conn: Connection, workspace: UUID, payload: dict[str, Any], *, source: str = "api",
    action_type: str = "email", transactional: bool = False,
) -> UUID:  # fmt: skip
    [(action_id,)] = conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
        " payload, source, transactional) values (%s, %s, 't', now() - interval '1 second',"
        " %s, %s, %s) returning id",
        (workspace, action_type, Jsonb(payload), source, transactional),
    ).fetchall()
    return UUID(str(action_id))


def _claim(conn: Connection, ids: list[UUID], channel: str | None = "email") -> set[UUID]:
    return {a.id for a in store.claim(conn, "email", ids, early_tolerance=1.0, channel=channel)}


def _rule_row(conn: Connection, workspace: UUID) -> tuple[UUID, UUID]:
    [(rule_id,)] = conn.execute(
        "insert into rules (workspace_id, name, trigger_type, event_type, action_type,"
        " target_key) values (%s, 'welcome', 'event', 'signup', 'email', 't') returning id",
        (workspace,),
    ).fetchall()
    action_id = _insert(conn, workspace, _email("ann@example.com"), source="rule")
    conn.execute(
        "insert into rule_actions (action_id, workspace_id, rule_id, kind, idempotency_key,"
        " context) values (%s, %s, %s, 'event', %s, '{}')",
        (action_id, workspace, rule_id, str(action_id)),
    )
    return rule_id, action_id


def _campaign_row(conn: Connection, workspace: UUID) -> tuple[UUID, UUID]:
    [(campaign_id,)] = conn.execute(
        "insert into campaigns (workspace_id, name, steps) values (%s, 'drip', '[{}]')"
        " returning id",
        (workspace,),
    ).fetchall()
    conn.execute(
        "insert into recipients (workspace_id, recipient_id, timezone) values (%s, 'ann', 'UTC')"
        " on conflict do nothing",
        (workspace,),
    )
    [(enrollment_id,)] = conn.execute(
        "insert into enrollments (workspace_id, campaign_id, recipient_id, starts_at)"
        " values (%s, %s, 'ann', now()) returning id",
        (workspace, campaign_id),
    ).fetchall()
    action_id = _insert(conn, workspace, _email("ann@example.com"), source="sequence")
    conn.execute(
        "insert into enrollment_actions (action_id, workspace_id, enrollment_id, step_index)"
        " values (%s, %s, %s, 0)",
        (action_id, workspace, enrollment_id),
    )
    return campaign_id, action_id


def test_a_campaign_scope_holds_only_that_campaigns_messages(conn, workspace):
    campaign, in_campaign = _campaign_row(conn, workspace)
    _, other_campaign = _campaign_row(conn, workspace)
    _, by_rule = _rule_row(conn, workspace)
    plain = _insert(conn, workspace, _email("ann@example.com"))
    suppress(conn, workspace, "email", "ann@example.com", "unsubscribed", "unsubscribe:x",
             scope=f"campaign:{campaign}")  # fmt: skip
    claimed = _claim(conn, [in_campaign, other_campaign, by_rule, plain])
    assert claimed == {other_campaign, by_rule, plain}
    held = row(conn, in_campaign)
    assert (held["status"], held["error_code"]) == ("cancelled", "suppressed")
    assert held["last_error"].endswith(f"(unsubscribed, for campaign:{campaign})")


def test_a_rule_scope_holds_only_that_rules_messages(conn, workspace):
    rule, by_rule = _rule_row(conn, workspace)
    _, by_other_rule = _rule_row(conn, workspace)
    suppress(conn, workspace, "email", "ann@example.com", "unsubscribed", "unsubscribe:x",
             scope=f"rule:{rule}")  # fmt: skip
    assert _claim(conn, [by_rule, by_other_rule]) == {by_other_rule}
    assert row(conn, by_rule)["error_code"] == "suppressed"


def test_a_transactional_message_ignores_unsubscribes_but_not_bounces(conn, workspace):
    suppress(conn, workspace, "email", "ann@example.com", "unsubscribed", "unsubscribe:all")
    suppress(conn, workspace, "email", "bob@example.com", "hard_bounce", "postmark:c1")
    to_ann = _insert(conn, workspace, _email("ann@example.com"), transactional=True)
    to_bob = _insert(conn, workspace, _email("bob@example.com"), transactional=True)
    assert _claim(conn, [to_ann, to_bob]) == {to_ann}
    assert row(conn, to_bob)["error_code"] == "suppressed"


def test_other_workspaces_and_channels_and_types_without_channel_are_not_held(conn, workspace):
    other = conn.execute("insert into workspaces (name) values ('Other') returning id").fetchone()[
        0
    ]  # type: ignore[index]
    suppress(conn, other, "email", "ann@example.com", "manual", "user:x")
    suppress(conn, workspace, "sms", "+15550100000", "manual", "user:x")
    mine = _insert(conn, workspace, _email("ann@example.com"))
    assert _claim(conn, [mine]) == {mine}
    suppress(conn, workspace, "email", "bob@example.com", "manual", "user:x")
    unchecked = _insert(conn, workspace, _email("bob@example.com"))
    # A type whose provider sends to no address (no channel) is claimed as it always was.
    assert _claim(conn, [unchecked], channel=None) == {unchecked}


def test_a_cancelled_or_claimed_row_is_not_touched_again(conn, workspace):
    suppress(conn, workspace, "email", "ann@example.com", "manual", "user:x")
    action_id = _insert(conn, workspace, _email("ann@example.com"))
    assert _claim(conn, [action_id]) == set()
    first = row(conn, action_id)
    assert _claim(conn, [action_id]) == set()
    assert row(conn, action_id) == first
    changes = conn.execute(
        "select count(*) from action_changes where action_id = %s", (action_id,)
    ).fetchone()
    assert changes == (1,)


def test_the_claim_looks_up_suppressions_by_primary_key(conn, workspace):
    conn.execute(
        "insert into suppressions (workspace_id, channel, address, reason, source, created_at)"
        " select %s, 'email', 'user' || g || '@example.com', 'manual', 'user:x',"
        "        now() - g * interval '1 minute'"
        " from generate_series(1, 20000) g",
        (workspace,),
    )
    # (each entry made at its own time, as a list grows: with one created_at for all,
    # Postgres 18 skip-scans the list's index ix_suppressions_created at the same cost)
    _campaign, in_campaign = _campaign_row(conn, workspace)
    _, by_rule = _rule_row(conn, workspace)
    ids = [in_campaign, by_rule] + [
        _insert(conn, workspace, _email(f"user{n}@example.com")) for n in range(1, 50)
    ]
    # Both tables analyzed, so the plan does not depend on whether autovacuum got there first.
    conn.execute("analyze suppressions")
    conn.execute("analyze scheduled_actions")
    plan = plan_of(
        conn,
        query("claim_addressed_actions"),
        {"ids": ids, "action_type": "email", "early_tolerance": 1.0, "max_lateness": None,
         "reclaim_after": None, "channel": "email", "route_provider": None},
    )  # fmt: skip
    scans = index_scans(plan)
    assert "suppressions_pkey" in scans, json.dumps(plan, indent=1)
    assert "suppressions" not in _seq_scanned(plan), json.dumps(plan, indent=1)


def _seq_scanned(plan: dict[str, Any]) -> set[str]:
    found = {plan["Relation Name"]} if plan.get("Node Type") == "Seq Scan" else set()
    for child in plan.get("Plans", []):
        found |= _seq_scanned(child)
    return found


def test_the_addressed_claim_runs_no_row_trigger_for_a_row_it_claims(conn, workspace):
    action_id = _insert(conn, workspace, _email("ann@example.com"))
    params = {"ids": [action_id], "action_type": "email", "early_tolerance": 1.0,
              "max_lateness": None, "reclaim_after": None, "channel": "email",
              "route_provider": "postmark"}  # fmt: skip
    with conn.transaction(force_rollback=True), psycopg.ClientCursor(conn) as cur:
        cur.execute("explain (analyze, format json) " + query("claim_addressed_actions"), params)
        fired = {t["Trigger Name"] for t in cur.fetchone()[0][0].get("Triggers", []) if t["Calls"]}
    assert fired == set()
