"""An action's page says what a person needs in words they can use: the CLI command that
shows the same (and works as printed), its connection by name with how to verify it, what
the provider said after it took the message, why-steps a screen reader reads apart; and the
zone lists offer IANA's current names only."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from tests.browser.conftest import Console
from tests.browser.test_console import schedule
from tests.e2e.conftest import Api
from tickwork import cli
from tickwork.actions import model, store
from tickwork.feedback.model import rank
from tickwork.local.auth import LocalJwt
from tickwork.local.paths import DevServer, data_dir, jwt_key_file
from tickwork.platform.db import connect
from tickwork.platform.sql import query

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_why_command_works_as_printed(
    console: Console, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    api, page = console.api, console.page
    made = schedule(api, datetime.now(UTC) + timedelta(hours=3))
    console.sign_in("alice", api.workspace_a)
    console.open(f"#/actions/{made['id']}")
    printed = page.locator(".why-command").inner_text()
    assert printed == (
        f"tickwork actions why --workspace {api.workspace_a} --user alice {made['id']}"
    )
    # Pasted where `tickwork dev` runs this API (its data directory: the record and the key)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("TICKWORK_QUEUE_URLS", raising=False)
    root = data_dir()
    shutil.copy(tmp_path / "jwt-secret", jwt_key_file(root))
    local = api.local
    DevServer(os.getpid(), local.api.url, local.receiver.url, database_url, True, [],
              sandbox_url=local.sandbox.url).write(root)  # fmt: skip
    capsys.readouterr()
    code = cli.main(shlex.split(printed)[1:])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith(f"action {made['id']} is queued")


def test_why_steps_read_apart_and_the_delivery_shows(console: Console, database_url: str) -> None:
    # Given a webhook the provider took, then reported delivered
    api, page = console.api, console.page
    made = schedule(api, datetime.now(UTC) + timedelta(seconds=30), thing_id="delivered")
    with connect(database_url) as conn:
        store.claim(conn, "webhook", [made["id"]], early_tolerance=7200)
        store.finalize(conn, [model.published(made["id"], "msg-1")])
        # as a provider's status callback records it (tickwork.feedback.store)
        conn.execute(query("record_delivery"), {
            "action_id": made["id"], "workspace_id": api.workspace_a, "attempt": 1,
            "status": "delivered", "bounce": None, "rank": rank("delivered", None),
            "at": None, "detail": "accepted by the mailbox",
        })  # fmt: skip
    console.sign_in("alice", api.workspace_a)
    console.open(f"#/actions/{made['id']}")
    # Then every step with a time reads "<time>: <text>", not "<time><text>"
    steps = page.locator(".why-steps li")
    steps.first.wait_for()
    timed = [t for t in steps.all_text_contents() if re.match(r"\d{4}-\d\d-\d\d ", t)]
    assert timed
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d: \S", t) for t in timed), timed
    # And the details and the attempt say delivered, with the provider's words
    facts = page.locator(".facts").inner_text()
    assert re.search(r"Delivery\s+delivered at .*: accepted by the mailbox", facts), facts
    attempts = page.get_by_role("table", name="Attempts (the ledger)").inner_text()
    assert "delivered" in attempts


def test_a_connection_shows_by_name_and_can_be_verified(console: Console) -> None:
    # Given an email sent through a Postmark connection nobody verified yet
    api, page = console.api, console.page
    body = json.loads((EXAMPLES / "connections" / "postmark.json").read_text())
    connection = api.admin.call("POST", "/v1/connections", json=body)
    email = {"to": "ann@example.com", "subject": "Hi", "text": "Hello"}
    made = schedule(api, datetime.now(UTC) + timedelta(hours=3), action_type="email",
                    target_key="ann", connection_id=connection["id"], payload=email)  # fmt: skip
    console.sign_in("mallory-member", api.workspace_a)
    console.open(f"#/actions/{made['id']}")
    # Then it is shown by its name, not its id, and says how to verify it
    shown = page.locator(".facts").inner_text()
    assert "Transactional email (postmark)" in shown
    assert connection["id"] not in shown
    assert "not verified yet" in shown
    # When the member verifies it (the local sandbox answers as Postmark would)
    page.get_by_role("button", name="Verify now").click()
    page.locator(".connection-verified", has_text="verified 20").wait_for()
    assert api.admin.call("GET", f"/v1/connections/{connection['id']}")["verify_ok"] is True
    # And the new action form offers it by name
    console.open("#/calendar")
    option = page.locator("form.new-action [name=connection_id] option", has_text="Transactional")
    assert option.get_attribute("value") == connection["id"]


@pytest.fixture
def kolkata(browser: Browser, console_api: Api, tmp_path: Path) -> Iterator[Console]:
    """A tab whose browser lives in Asia/Calcutta, the name Chromium gives India's zone."""
    context = browser.new_context(timezone_id="Asia/Calcutta")
    tab = Console(console_api, context.new_page(), LocalJwt(tmp_path / "jwt-secret"))
    tab.page.set_default_timeout(10_000)
    yield tab
    context.close()
    assert not tab.errors, tab.errors


def test_the_zone_lists_offer_current_names_only(kolkata: Console) -> None:
    api, page = kolkata.api, kolkata.page
    made = schedule(api, datetime.now(UTC) + timedelta(hours=3))
    kolkata.sign_in("alice", api.workspace_a)
    kolkata.open("#/calendar")
    offered = page.locator("#zone option").all_inner_texts()
    assert {"Asia/Kolkata", "Asia/Kathmandu", "America/New_York", "UTC"} <= set(offered)
    assert not {"Asia/Calcutta", "Asia/Katmandu", "Asia/Saigon", "US/Eastern"} & set(offered)
    # The browser's own zone, by its old name, is picked by its current one
    assert page.locator("#zone").input_value() == "Asia/Kolkata"
    assert page.locator("#new-zone").input_value() == "Asia/Kolkata"
    kolkata.open(f"#/actions/{made['id']}")
    reschedule = page.locator("form[data-draft^=reschedule] [name=timezone]")
    assert reschedule.input_value() == "Asia/Kolkata"
    assert "Asia/Calcutta" not in reschedule.locator("option").all_inner_texts()


def test_a_schedule_months_ahead_shows_on_the_calendar_as_projected(console: Console) -> None:
    # Given a weekly schedule that starts ten weeks from now: no row made yet
    api, page = console.api, console.page
    first = (datetime.now(UTC) + timedelta(weeks=10)).replace(hour=9, minute=0, second=0,
                                                              microsecond=0)  # fmt: skip
    made = api.admin.call("POST", "/v1/recurring", json={
        "action_type": "webhook", "target_key": "primary", "rrule": "FREQ=WEEKLY;COUNT=12",
        "dtstart": first.strftime("%Y-%m-%dT%H:%M:%S"), "timezone": "UTC"})  # fmt: skip
    # When its month is shown (in UTC)
    console.sign_in("alice", api.workspace_a)
    console.open(f"#/calendar?view=month&date={first.date().isoformat()}")
    # Then its first day holds a projected occurrence, marked as not made yet
    cell = page.locator(f'td[data-date="{first.date().isoformat()}"]')
    assert "1 projected" in cell.locator(".counts").inner_text()
    chip = cell.locator('.chip[data-status="projected"]')
    assert chip.get_attribute("data-schedule") == made["id"]
    assert chip.get_attribute("data-id") is None
    assert "projected" in (chip.get_attribute("title") or "")
    assert "projected from recurring schedules" in page.locator("main [role=status]").inner_text()
