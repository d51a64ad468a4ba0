"""The examples (examples/) against the local API: each script runs to its end, every
request answered 2xx (curl --fail-with-body stops a script at the first error), and each
connection body the providers page shows is accepted; so the examples stay true."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Api
from tickwork.platform.db import connect

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# A public address for the example host names (there may be no DNS where the tests run).
PUBLIC = "93.184.215.14"
EXAMPLE_HOSTS = {"hooks.example.com", "mastodon.social", "bsky.social"}


def run(api: Api, script: str) -> str:
    token = api.admin.http.headers["Authorization"].removeprefix("Bearer ")
    env = {**os.environ, "API_URL": api.url, "TOKEN": token, "WS": api.workspace_a}
    done = subprocess.run(
        ["bash", str(EXAMPLES / script)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def answers(output: str) -> list[dict[str, Any]]:
    """The JSON answers a script printed (one a line; its own notes start with ==)."""
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def sources(database_url: str) -> dict[str, int]:
    with connect(database_url) as conn:
        rows = conn.execute(
            "select source, count(*) from scheduled_actions group by source"
        ).fetchall()
    return {str(source): int(count) for source, count in rows}


def test_the_rule_set(api, database_url):
    output = answers(run(api, "rules/run.sh"))
    rules, event, booking, moved, episode, seen = output[:5], *output[5:]
    assert [r["name"] for r in rules] == [
        "confirmation", "reminder", "thank you", "teaser", "announce"]  # fmt: skip
    assert (event["success"], event["executions_created"]) == (True, 1)
    assert len(booking["result"]["created"]) == 2
    assert len(moved["result"]["cancelled"]) == 2
    assert all(c["rescheduled_from"] for c in moved["result"]["created"])
    assert len(episode["result"]["created"]) == 2
    assert seen["entity_id"] == "bk_42"
    assert sources(database_url) == {"rule": 7}


def test_the_drip_and_its_exit(api, database_url):
    output = answers(run(api, "drip/run.sh"))
    recipient, campaign, enrollment, shown = output
    assert recipient["recipient_id"] == "ann"
    assert [s["name"] for s in campaign["steps"]] == ["welcome", "tips", "offer"]
    assert (shown["id"], shown["status"]) == (enrollment["id"], "active")
    assert sources(database_url) == {"sequence": 1}
    [exited] = answers(run(api, "drip/exit.sh"))
    assert exited["success"] is True
    after = api.admin.call("GET", f"/v1/enrollments/{enrollment['id']}")
    assert (after["status"], after["exit_outcome"]) == ("exited", "cancelled")


def test_the_recurring_schedule(api):
    created, preview, edited, once, paused = answers(run(api, "recurring/run.sh"))
    assert created["timezone"] == "America/New_York"
    assert len(preview["next_occurrences"]) == 5
    assert all(o["local"][11:16] == "09:00" for o in preview["next_occurrences"])
    assert edited["rrule"].startswith("FREQ=WEEKLY;BYDAY=WE")
    assert (once["source"], once["recurring_schedule_id"]) == ("run_now", created["id"])
    assert (paused["status"], paused["paused_reason"]) == ("paused", "holiday break")


@pytest.mark.parametrize("body", sorted(p.name for p in (EXAMPLES / "connections").glob("*.json")))
def test_each_providers_connection_body_is_accepted(api, monkeypatch, body):
    real = socket.getaddrinfo

    def resolve(host: str, *args: Any, **kwargs: Any) -> Any:
        if host in EXAMPLE_HOSTS:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (PUBLIC, args[0] if args else 443))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    sent = json.loads((EXAMPLES / "connections" / body).read_text())
    response = api.admin.http.post("/v1/connections", json=sent)
    assert response.status_code == 201, response.text
    connection = response.json()
    assert (connection["provider"], connection["name"]) == (sent["provider"], sent["name"])
    assert "credentials" not in connection
