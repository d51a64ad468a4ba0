"""The console as a person uses it, in chromium: sign in, schedule, see it at its local
time, reschedule, cancel, retry as an admin, be refused as a member, see nothing of
another workspace, keep what was typed across an expired token."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from tests.browser.conftest import Console
from tests.e2e.conftest import Api
from tests.waiting import wait_for
from tickwork.actions import model, store
from tickwork.actions.model import Attempt
from tickwork.platform.db import connect


def schedule(api: Api, at: datetime, **extra: Any) -> dict[str, Any]:
    body = {"action_type": "webhook", "target_key": "primary", "payload": {"n": 1},
            "publish_at": at.isoformat(), **extra}  # fmt: skip
    result: dict[str, Any] = api.admin.call("POST", "/v1/actions", json=body)
    return result


def failed_action(api: Api, database_url: str) -> str:
    """An action the provider rejected, through the engine's own claim and finalize."""
    made = schedule(api, datetime.now(UTC) + timedelta(seconds=30), thing_id="will-fail")
    with connect(database_url) as conn:
        store.claim(conn, "webhook", [made["id"]], early_tolerance=7200)
        store.finalize(conn, [model.failed(made["id"], "provider_rejected", "400 Bad Request")])
    return str(made["id"])


def status_of(api: Api, action_id: str) -> str:
    return str(api.admin.call("GET", f"/v1/actions/{action_id}")["status"])


def test_schedules_9am_tokyo_tomorrow_and_shows_it_at_9_in_tokyo(console: Console) -> None:
    api, page = console.api, console.page
    console.sign_in("alice", api.workspace_a)
    console.open("#/calendar")
    console.set_zone("Asia/Tokyo")
    tomorrow = (datetime.now(ZoneInfo("Asia/Tokyo")) + timedelta(days=1)).date()

    form = page.locator("form.new-action")
    form.locator("[name=action_type]").fill("webhook")
    form.locator("[name=target_key]").fill("primary")
    form.locator("[name=date]").fill(tomorrow.isoformat())
    form.locator("[name=time]").fill("09:00")
    form.locator("[name=timezone]").select_option("Asia/Tokyo")
    form.locator("[name=payload]").fill('{"hello": "Tokyo"}')
    form.locator("button[type=submit]").click()

    # The calendar opens on that day, in Tokyo time, with the action in the 09:00 row.
    chip = page.locator(f'td[data-date="{tomorrow.isoformat()}"][data-hour="09"] .chip')
    chip.wait_for()
    assert chip.inner_text().startswith("09:00 webhook")
    made = api.admin.call("GET", f"/v1/actions/{chip.get_attribute('data-id')}")
    due = datetime(tomorrow.year, tomorrow.month, tomorrow.day, 9, tzinfo=ZoneInfo("Asia/Tokyo"))
    assert datetime.fromisoformat(made["publish_at"]) == due
    assert (made["status"], made["payload"]) == ("queued", {"hello": "Tokyo"})

    # The week view in UTC puts it at midnight UTC (09:00 - 9 h).
    console.set_zone("UTC")
    console.open(f"#/calendar?view=week&date={tomorrow.isoformat()}")
    utc = page.locator(f'.chip[data-id="{made["id"]}"]')
    assert utc.get_attribute("data-local") == due.astimezone(UTC).strftime("%H:%M")


def test_reschedules_by_the_ui(console: Console) -> None:
    api, page = console.api, console.page
    old = schedule(api, datetime.now(UTC) + timedelta(days=2))
    console.sign_in("alice", api.workspace_a)
    console.open(f"#/actions/{old['id']}")
    target = (datetime.now(UTC) + timedelta(days=3)).date()
    form = page.locator("form[data-draft^=reschedule]")
    form.locator("[name=date]").fill(target.isoformat())
    form.locator("[name=time]").fill("10:30")
    form.locator("[name=timezone]").select_option("UTC")
    form.locator("button[type=submit]").click()

    page.wait_for_function("old => !location.hash.includes(old)", arg=old["id"])
    new_id = page.evaluate("location.hash").rsplit("/", 1)[1]
    page.locator(".why-steps").wait_for()
    new = api.admin.call("GET", f"/v1/actions/{new_id}")
    assert (new["status"], new["rescheduled_from"]) == ("queued", old["id"])
    assert datetime.fromisoformat(new["publish_at"]) == datetime(
        target.year, target.month, target.day, 10, 30, tzinfo=UTC
    )
    assert status_of(api, old["id"]) == "cancelled"
    # The page shows the lineage both ways.
    assert page.locator(f'a[href="#/actions/{old["id"]}"]').count() >= 1


def test_cancels_one(console: Console) -> None:
    api, page = console.api, console.page
    made = schedule(api, datetime.now(UTC) + timedelta(hours=5))
    console.sign_in("alice", api.workspace_a)
    console.open(f"#/actions/{made['id']}")
    page.get_by_role("button", name="Cancel", exact=True).click()
    page.locator(".facts .badge.status-cancelled").wait_for()
    assert status_of(api, made["id"]) == "cancelled"
    why = page.locator(".why-steps").inner_text()
    assert "alice" in why  # cancelled by whom, from the change log


def test_admin_retries_a_failed_one(console: Console, database_url: str) -> None:
    api, page = console.api, console.page
    failed = failed_action(api, database_url)
    console.sign_in("alice", api.workspace_a)
    console.open(f"#/failures?from={datetime.now(UTC).date() - timedelta(days=1)}")
    row = page.locator(f'tr[data-id="{failed}"]')
    assert "provider_rejected" in row.inner_text()
    row.locator("a").click()
    page.get_by_role("button", name="Retry", exact=True).click()
    wait_for(lambda: api.admin.call("GET", f"/v1/actions/{failed}")["manual_retries"] == 1)


def test_a_member_has_no_admin_controls_and_sees_the_apis_refusal(
    console: Console, database_url: str
) -> None:
    api, page = console.api, console.page
    failed = failed_action(api, database_url)
    console.sign_in("mallory-member", api.workspace_a)
    assert page.locator("#top .role").inner_text() == "member"
    assert page.get_by_role("link", name="Operations").count() == 0
    console.open(f"#/actions/{failed}")
    page.locator(".facts .badge.status-failed").wait_for()
    assert page.get_by_role("button", name="Retry", exact=True).count() == 0
    console.open("#/failures")
    assert page.get_by_role("button", name="Retry all failed").count() == 0
    # Asked for anyway, the admins' view shows the API's own 403.
    console.open("#/operations")
    refusal = page.locator("main .error-box")
    refusal.wait_for()
    assert "HTTP 403" in refusal.inner_text()
    assert "admin" in refusal.inner_text()
    assert status_of(api, failed) == "failed"


def test_a_member_of_b_sees_nothing_of_a(console: Console) -> None:
    api, page = console.api, console.page
    mine = schedule(api, datetime.now(UTC) + timedelta(hours=2), thing_id="secret-of-a")
    console.sign_in("bob", api.workspace_b)
    console.open("#/calendar?view=month")
    assert page.locator(".chip").count() == 0
    assert "secret-of-a" not in page.content()
    console.open(f"#/actions/{mine['id']}")
    refusal = page.locator("main .error-box")
    refusal.wait_for()
    assert "HTTP 404" in refusal.inner_text()
    assert "secret-of-a" not in page.content()


def test_an_expired_token_signs_in_again_and_keeps_what_was_typed(console: Console) -> None:
    api, page = console.api, console.page
    console.sign_in("alice", api.workspace_a)
    console.open("#/calendar")
    form = page.locator("form.new-action")
    form.locator("[name=action_type]").fill("webhook")
    form.locator("[name=target_key]").fill("typed-before-expiry")
    expired = console.jwt.sign("alice", ttl_seconds=-60)
    page.evaluate(
        "([token, ws]) => sessionStorage.setItem('tickwork.session',"
        " JSON.stringify({token, workspace: ws}))",
        [expired, api.workspace_a],
    )
    form.locator("button[type=submit]").click()
    page.locator(".signin .notice").wait_for()
    assert "expired" in page.locator(".signin .notice").inner_text()
    page.locator("#signin-token").fill(console.jwt.sign("alice", ttl_seconds=600))
    page.get_by_role("button", name="Sign in").click()
    restored = page.locator("form.new-action [name=target_key]")
    restored.wait_for()
    assert restored.input_value() == "typed-before-expiry"


def test_bad_input_shows_the_apis_message_at_the_field(console: Console) -> None:
    api, page = console.api, console.page
    console.sign_in("alice", api.workspace_a)
    console.open("#/calendar")
    form = page.locator("form.new-action")
    form.locator("[name=action_type]").fill("webhook")
    form.locator("[name=target_key]").fill("no-such-endpoint")
    form.locator("[name=payload]").fill("{not json")
    form.locator("button[type=submit]").click()
    assert "not valid JSON" in form.locator('.field-error[data-for="payload"]').inner_text()
    form.locator("[name=payload]").fill("{}")
    form.locator("button[type=submit]").click()
    slot = form.locator('.field-error[data-for="target_key"]')
    slot.wait_for()
    assert "no-such-endpoint" in slot.inner_text()
    assert form.locator("[name=target_key]").get_attribute("aria-invalid") == "true"


def test_the_failures_tag_filter_lists_and_cancels_by_tag(
    console: Console, database_url: str
) -> None:
    api, page = console.api, console.page
    failed = failed_action(api, database_url)
    with connect(database_url) as conn:
        conn.execute("update scheduled_actions set tags = '{podcast:42}' where id = %s", (failed,))
    later = datetime.now(UTC) + timedelta(hours=5)
    tagged = [schedule(api, later, thing_id=f"p{i}", tags=["podcast:42"])["id"] for i in range(3)]
    other = schedule(api, later, thing_id="other", tags=["podcast:43"])["id"]
    console.sign_in("alice", api.workspace_a)
    yesterday = datetime.now(UTC).date() - timedelta(days=1)
    # The range is on the due time, for the bulk cancel too: it must reach the rows 5 hours on
    until = later.date() + timedelta(days=2)
    console.open(f"#/failures?from={yesterday}&to={until}&tag=podcast:42")
    page.locator(f'tr[data-id="{failed}"]').wait_for()
    # A retry in bulk takes no tag: with one chosen it is not offered.
    assert page.get_by_role("button", name="Retry all failed").count() == 0
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel all queued").click()
    wait_for(lambda: all(status_of(api, i) == "cancelled" for i in tagged))
    assert status_of(api, other) == "queued"
    assert status_of(api, failed) == "failed"


def test_the_attempts_table_names_the_provider_and_why_it_was_a_fallback(
    console: Console, database_url: str
) -> None:
    # Given an action whose first call got a transient answer from Postmark and whose second
    # went to SES past the threshold, through the engine's own claim and finalize
    api, page = console.api, console.page
    made = schedule(api, datetime.now(UTC) + timedelta(seconds=30), thing_id="failed-over")
    later = datetime.now(UTC) + timedelta(hours=1)  # out of the runtime's dispatchers' way
    with connect(database_url) as conn:
        store.claim(conn, "webhook", [made["id"]], early_tolerance=7200)
        now = datetime.now(UTC).timestamp()
        first = Attempt(1, now - 0.3, now - 0.2, "transient", excerpt="HTTP 503",
                        provider="postmark")  # fmt: skip
        requeued = model.requeued(made["id"], later, "HTTP 503")._replace(attempt=first)
        store.finalize(conn, [requeued])
        store.claim(conn, "webhook", [made["id"]], early_tolerance=7200)
        second = Attempt(2, now - 0.1, now, "delivered", provider="ses",
                         failover_reason="threshold")  # fmt: skip
        store.finalize(conn, [model.published(made["id"], "ses-1")._replace(attempt=second)])
    # When a member opens it
    console.sign_in("mallory-member", api.workspace_a)
    console.open(f"#/actions/{made['id']}")
    table = page.get_by_role("table", name="Attempts (the ledger)")
    table.wait_for()
    rows = table.locator("tbody tr")
    # Then each attempt names its provider, and the fallback's says why it was one
    assert "postmark" in rows.nth(0).inner_text()
    assert "failed over" not in rows.nth(0).inner_text()
    fallback = rows.nth(1).inner_text()
    assert "ses (failed over: the first answered transiently too often)" in fallback
