"""Quotas on a real Postgres: the counts use their indexes and count one workspace; a stored
schedule over the window quota is paused by the expander with the reason; the count of
actions created is one for every API connection; an operator's limits are the workspace's
own, and the API's role cannot write them."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import psycopg
import pytest

from tests.conftest import make_workspace
from tests.e2e.test_api_quotas import away_from_a_minute_boundary
from tests.integration.test_query_plans import index_scans, plan_of, seq_scans
from tickwork import cli, quotas
from tickwork.engine import expander
from tickwork.platform.config import Settings
from tickwork.platform.db import connect
from tickwork.platform.errors import InputError, QuotaExceededError, RateLimitedError
from tickwork.platform.sql import query
from tickwork.quotas import QUOTA_NAMES, Limits
from tickwork.recurring import store as recurring
from tickwork.recurring.store import NewSchedule
from tickwork.tenancy import tenant_transaction


def limits(**given: int) -> Limits:
    """The stack's default quotas with `given` set (as an operator sets them)."""
    return Limits.of(Settings(), given)


@pytest.fixture
def crowded(conn, now):
    """A busy workspace (50k queued rows and 50k published), and a quiet one."""
    busy, quiet = make_workspace(conn, "Busy"), make_workspace(conn, "Quiet")
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
        " status, finished_at) select %(ws)s, 'webhook', 't', %(at)s + g * interval '1 s',"
        " case when g %% 2 = 0 then 'queued' else 'published' end,"
        " case when g %% 2 = 0 then null else %(at)s end from generate_series(1, 100000) g",
        {"ws": busy, "at": now + timedelta(hours=1)},
    )
    # Another tenant's active rows, due before the busy one's: the due index would walk
    # them, the workspace's own index does not.
    conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " select %(ws)s, 'webhook', 't', %(at)s + g * interval '1 ms'"
        " from generate_series(1, 50000) g",
        {"ws": make_workspace(conn, "Other"), "at": now + timedelta(minutes=30)},
    )
    conn.execute("analyze scheduled_actions")
    conn.execute("analyze action_queue")
    return busy, quiet


def test_the_active_count_reads_the_workspaces_queue_and_stops_at_the_cap(conn, crowded):
    busy, quiet = crowded
    plan = plan_of(conn, query("count_active_actions"), {"workspace_id": busy, "cap": 1001})
    assert "ix_action_queue_workspace" in index_scans(plan)
    assert not {"scheduled_actions", "action_queue"} & seq_scans(plan)
    quotas.check_active_actions(conn, quiet, limits(active_actions=1))
    quotas.check_active_actions(conn, busy, limits(active_actions=50_000))
    with pytest.raises(QuotaExceededError, match="more than 49999 active"):
        quotas.check_active_actions(conn, busy, limits(active_actions=49_999))
    quotas.check_active_actions(conn, busy, limits(active_actions=0))  # off


def test_the_request_count_starts_again_each_window(conn, workspace):
    away_from_a_minute_boundary()
    two = limits(api_requests_per_minute=2)
    assert quotas.count_request(conn, workspace, two).count == 1
    assert quotas.count_request(conn, workspace, two).count == 2
    with pytest.raises(RateLimitedError) as refused:
        quotas.count_request(conn, workspace, two)
    assert 1 <= refused.value.retry_after_seconds <= 60
    conn.execute("update workspace_api_usage set window_start = window_start - interval '1 min'")
    assert quotas.count_request(conn, workspace, two).count == 1


def test_the_expander_pauses_a_stored_schedule_over_the_window_quota(conn, workspace, now):
    roomy, strict = Settings(), Settings(quota_schedule_window_rows=10)
    with pytest.raises(QuotaExceededError, match="at most 10"):
        recurring.create_schedule(conn, workspace, _hourly(), strict, now)
    created = recurring.create_schedule(conn, workspace, _hourly(), roomy, now)
    # the quota is lowered below what the schedule makes in a window, and the window moves
    later = now + timedelta(days=20)
    summary = expander.expand_all(conn, strict, now=later)
    assert summary.paused == 1
    paused = recurring.get_schedule(conn, workspace, created.schedule.id)
    assert paused.status == "paused"
    assert "at most 10" in (paused.paused_reason or "")


def _hourly() -> NewSchedule:
    return NewSchedule(action_type="webhook", target_key="primary", rrule="FREQ=HOURLY",
                       timezone="UTC")  # fmt: skip


# ------------------------------------------- caps on rules, recipients, events and the rate


@pytest.fixture
def crowded_rules(conn, now):
    """A workspace with a few rules and recipients beside another with many."""
    mine, theirs = make_workspace(conn, "Mine"), make_workspace(conn, "Theirs")
    for workspace, rules, recipients in ((mine, 300, 1000), (theirs, 20_000, 100_000)):
        conn.execute(
            "insert into rules (workspace_id, name, trigger_type, event_type, action_type,"
            " target_key) select %s, 'r' || g, 'event', 'type.' || (g %% 50), 'log', 't'"
            " from generate_series(1, %s) g",
            (workspace, rules),
        )
        conn.execute(
            "insert into recipients (workspace_id, recipient_id, timezone)"
            " select %s, 'r-' || g, 'UTC' from generate_series(1, %s) g",
            (workspace, recipients),
        )
    conn.execute("vacuum analyze rules")
    conn.execute("vacuum analyze recipients")
    return mine


@pytest.mark.parametrize(
    ("name", "params", "index"),
    [
        # the workspace's rules: either index that leads with workspace_id (0037's key too)
        ("count_rules", {}, {"ix_rules_workspace", "ux_rules_workspace_id"}),
        ("count_event_rules", {"event_type": "type.7"}, "ix_rules_event"),
        ("count_recipients", {"cap": 501}, "recipients_pkey"),
    ],
)
def test_the_cap_counts_use_their_index(conn, crowded_rules, name, params, index):
    plan = plan_of(conn, query(name), {"workspace_id": crowded_rules} | params)
    expected = index if isinstance(index, set) else {index}
    assert expected & index_scans(plan), json.dumps(plan, indent=1)
    assert not {"rules", "recipients"} & seq_scans(plan)


def test_the_cap_counts_count_the_workspace_alone(conn, crowded_rules):
    quotas.check_rules(conn, crowded_rules, limits(rules=300), new=True, event_type="type.7")
    with pytest.raises(QuotaExceededError, match="would have 300 rules; its quota is 299"):
        quotas.check_rules(conn, crowded_rules, limits(rules=299), new=True, event_type=None)
    with pytest.raises(QuotaExceededError, match=r"'type\.7' would have 6 enabled rules"):
        quotas.check_rules(
            conn, crowded_rules, limits(actions_per_event=5), new=False, event_type="type.7"
        )
    quotas.check_recipients(conn, crowded_rules, limits(recipients=1000))
    with pytest.raises(QuotaExceededError, match="more than 999 recipients"):
        quotas.check_recipients(conn, crowded_rules, limits(recipients=999))
    off = limits(rules=0, actions_per_event=0, recipients=0)
    quotas.check_rules(conn, crowded_rules, off, new=True, event_type="type.7")
    quotas.check_recipients(conn, crowded_rules, off)


def test_the_suppression_count_reads_the_workspaces_entries_through_an_index(conn):
    mine, theirs = make_workspace(conn, "Mine"), make_workspace(conn, "Theirs")
    for workspace, entries in ((mine, 300), (theirs, 30_000)):
        conn.execute(
            "insert into suppressions (workspace_id, channel, address, scope, reason, source)"
            " select %s, 'email', 'a' || g || '@example.com', 'all', 'manual', 'user:u'"
            " from generate_series(1, %s) g",
            (workspace, entries),
        )
    conn.execute("vacuum analyze suppressions")
    plan = plan_of(conn, query("count_suppressions"), {"workspace_id": mine, "cap": 301})
    assert {"suppressions_pkey", "ix_suppressions_created"} & index_scans(plan), plan
    assert "suppressions" not in seq_scans(plan)
    quotas.check_suppressions(conn, mine, limits(suppressions=300))
    with pytest.raises(QuotaExceededError, match="more than 299 entries"):
        quotas.check_suppressions(conn, mine, limits(suppressions=299))
    quotas.check_suppressions(conn, mine, limits(suppressions=0))


def test_the_digest_count_counts_only_the_workspaces_digests_still_collecting(conn, now):
    mine, theirs = make_workspace(conn, "Mine"), make_workspace(conn, "Theirs")

    def digest(workspace: object, status: str, action_status: str) -> object:
        row = conn.execute(
            "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at,"
            " status, finished_at) values (%(ws)s, 'log', 't', %(at)s, %(status)s,"
            " case when %(status)s = 'queued' then null else %(at)s end) returning id",
            {"ws": workspace, "at": now + timedelta(hours=1), "status": action_status},
        ).fetchone()
        assert row is not None
        conn.execute(
            "insert into digests (workspace_id, source, source_id, target_key, digest_key,"
            " group_key, status, time_window, opened_at, closes_at, action_id) values"
            " (%(ws)s, 'rule', gen_random_uuid(), 't', '', encode(sha256(gen_random_uuid()::text"
            "::bytea), 'hex'), %(status)s, '{\"seconds\": 60}', %(at)s, %(at)s, %(action)s)",
            {"ws": workspace, "status": status, "at": now, "action": row[0]},
        )
        return row[0]

    # Two collecting; one open whose action a dispatcher took; one closed (full); and
    # another workspace's many
    first = digest(mine, "open", "queued")
    digest(mine, "open", "queued")
    digest(mine, "open", "published")
    digest(mine, "closed", "queued")
    for _ in range(5):
        digest(theirs, "open", "queued")
    quotas.check_digests(conn, mine, limits(digests=2), [first])
    with pytest.raises(QuotaExceededError, match="more than 1 digests collecting"):
        quotas.check_digests(conn, mine, limits(digests=1), [first])
    # Only a request that opened a digest is held to it, and 0 is no quota
    [[plain]] = conn.execute(
        "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
        " values (%s, 'log', 't', %s) returning id",
        (mine, now + timedelta(hours=1)),
    ).fetchall()
    quotas.check_digests(conn, mine, limits(digests=1), [plain])
    quotas.check_digests(conn, mine, limits(digests=1), [])
    quotas.check_digests(conn, mine, limits(digests=0), [first])


def test_every_api_connection_shares_one_count_of_actions_created(database_url, workspace):
    away_from_a_minute_boundary()
    ten = limits(actions_per_minute=10)
    with connect(database_url) as one, connect(database_url) as other:
        for conn, made, total in ((one, 4, 4), (other, 5, 9), (one, 1, 10)):
            with tenant_transaction(conn, workspace):
                usage = quotas.count_actions_created(conn, workspace, made, ten)
                assert usage is not None
                assert usage.count == total
        with (
            pytest.raises(RateLimitedError, match="created 10 actions this minute") as refused,
            tenant_transaction(other, workspace),
        ):
            quotas.count_actions_created(other, workspace, 1, ten)
        assert refused.value.details["quota"] == "actions_per_minute"
        # the refusal rolled its own count back
        row = one.execute("select actions from workspace_action_usage").fetchone()
        assert row == (10,)
        # nothing made, nothing counted; and 0 is no quota
        assert quotas.count_actions_created(one, workspace, 0, ten) is None
        assert (
            quotas.count_actions_created(one, workspace, 99, limits(actions_per_minute=0)) is None
        )


# ---------------------------------------------------------------- what an operator sets


def test_the_api_role_can_read_a_workspaces_limits_but_not_write_them(conn, workspace):
    quotas.set_limits(conn, workspace, Settings(), {"rules": 7})
    with tenant_transaction(conn, workspace):
        assert conn.execute("select limits from workspaces").fetchone() == ({"rules": 7},)
    with (
        pytest.raises(psycopg.errors.InsufficientPrivilege, match="workspaces"),
        tenant_transaction(conn, workspace),
    ):
        conn.execute("update workspaces set limits = '{\"rules\": 100000}'")
    assert quotas.workspace_limits(conn, workspace, Settings()).rules == 7


@pytest.mark.parametrize("stored", ['{"rules": -1}', '{"rules": 1.5}', '{"rules": "9"}', "[]"])
def test_the_database_keeps_only_whole_limits(conn, workspace, stored):
    with pytest.raises(psycopg.errors.CheckViolation, match="workspaces_limits_valid"):
        conn.execute("update workspaces set limits = %s::jsonb", (stored,))


def test_an_operator_sets_and_resets_a_workspaces_limits(conn, workspace):
    settings = Settings(quota_rules=50)
    other = make_workspace(conn, "Other")
    done = quotas.set_limits(conn, workspace, settings, {"rules": 5, "actions_per_minute": 0})
    assert (done.rules, done.actions_per_minute) == (5, 0)
    assert done.overridden == {"rules", "actions_per_minute"}
    assert quotas.workspace_limits(conn, other, settings).rules == 50
    back = quotas.set_limits(conn, workspace, settings, {}, reset=["rules"])
    assert (back.rules, back.actions_per_minute, back.overridden) == (
        50,
        0,
        {"actions_per_minute"},
    )
    for given, reset, message in (
        ({"bogus": 1}, [], "'bogus' is not a quota"),
        ({"rules": -1}, [], "whole number from 0"),
        ({"rules": 1}, ["rules"], "set or reset, not both"),
    ):
        with pytest.raises(InputError, match=message):
            quotas.set_limits(conn, workspace, settings, given, reset)


def test_limits_are_the_workspaces_own_else_the_stacks_defaults():
    settings = Settings(quota_rules=9, quota_recipients=8)
    found = Limits.of(settings, {"rules": 1, "gone_quota": 3})
    assert (found.rules, found.recipients, found.overridden) == (1, 8, {"rules"})
    assert (
        set(found.as_dict())
        == set(QUOTA_NAMES)
        == {
            name.removeprefix("quota_")
            for name in Settings.model_fields
            if name.startswith("quota_")
        }
    )


def test_the_expander_holds_each_workspace_to_its_own_window_quota(conn, now):
    strict, roomy = make_workspace(conn, "Strict"), make_workspace(conn, "Roomy")
    made = {
        ws: recurring.create_schedule(conn, ws, _hourly(), Settings(), now).schedule.id
        for ws in (strict, roomy)
    }
    quotas.set_limits(conn, strict, Settings(), {"schedule_window_rows": 10})
    summary = expander.expand_all(conn, Settings(), now=now + timedelta(days=20))
    assert summary.paused == 1
    assert recurring.get_schedule(conn, strict, made[strict]).status == "paused"
    assert recurring.get_schedule(conn, roomy, made[roomy]).status == "active"


def test_the_workspace_limits_command_shows_sets_and_resets(
    database_url, conn, workspace, monkeypatch, capsys
):
    monkeypatch.setenv("TICKWORK_QUOTA_RULES", "40")
    base = ["workspace", "limits", "Acme", "--database-url", database_url]
    # Given nothing set, it shows the stack's defaults (this shell's TICKWORK_QUOTA_*)
    assert cli.main(base) == 0
    shown = capsys.readouterr()
    assert "limits of workspace Acme" in shown.out
    assert re.search(r"rules\s+40  the stack's default", shown.out)
    assert re.search(r"actions_per_minute\s+6000  the stack's default", shown.out)
    # When an operator sets two and prints JSON
    assert cli.main([*base, "--rules", "5", "--actions-per-minute", "0", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["workspace_id"] == str(workspace)
    assert (body["limits"]["rules"], body["limits"]["actions_per_minute"]) == (5, 0)
    assert body["overridden"] == ["actions_per_minute", "rules"]
    assert conn.execute("select limits from workspaces").fetchone() == (
        {"rules": 5, "actions_per_minute": 0},
    )
    # Then a reset puts one back, `all` every one
    assert cli.main([*base, "--reset", "rules"]) == 0
    assert re.search(r"rules\s+40  the stack's default", capsys.readouterr().out)
    assert cli.main([*base, "--reset", "all"]) == 0
    assert conn.execute("select limits from workspaces").fetchone() == ({},)
    # and mistakes are refused with what to do, writing nothing
    assert cli.main([*base, "--rules", "3", "--reset", "rules"]) == 2
    assert "set or reset, not both" in capsys.readouterr().err
    assert cli.main(["workspace", "limits", "Nope", "--database-url", database_url]) == 2
    assert "no workspace 'Nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main([*base, "--rules", "-1"])
    assert "not a whole number" in capsys.readouterr().err
    assert conn.execute("select limits from workspaces").fetchone() == ({},)
