"""Demo webhooks scheduled through the HTTP API, and a live status table."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TextIO
from urllib.parse import urlencode
from uuid import uuid4

import httpx

from tickwork import workspaces
from tickwork.local.auth import LocalJwt
from tickwork.platform.db import Connection
from tickwork.platform.text import clock, duration, lateness
from tickwork.platform.wallclock import utcnow
from tickwork.providers.catalog import masked_settings

DEMO_WORKSPACE = "Demo"
DEMO_USER = "demo-admin"
TERMINAL = frozenset({"published", "failed", "cancelled"})


class ApiClient:
    """A small client of the Tickwork API, for the demo and the tests."""

    def __init__(self, base_url: str, token: str, workspace_id: str) -> None:
        self.http = httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}", "X-Workspace-Id": workspace_id},
            timeout=10,
        )

    def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = self.http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")
        result: dict[str, Any] = response.json()
        return result


def demo_client(conn: Connection, api_url: str, jwt: LocalJwt) -> ApiClient:
    """A client acting as the demo's admin in the Demo workspace (made if missing)."""
    workspace_id, _ = workspaces.ensure(conn, DEMO_WORKSPACE)
    workspaces.add_member(conn, workspace_id, DEMO_USER, "admin")
    return ApiClient(api_url, jwt.sign(DEMO_USER), str(workspace_id))


# The console link's token lives an hour: long enough to look around, short enough that a
# link left in a terminal's scrollback soon opens nothing. `tickwork console` prints a new one.
CONSOLE_TOKEN_SECONDS = 3600


def console_link(conn: Connection, api_url: str, jwt: LocalJwt, user: str = DEMO_USER,
                 workspace: str = DEMO_WORKSPACE) -> str:  # fmt: skip
    """A link that opens the web console signed in as `user`, an admin of `workspace`
    (made if missing). The token is in the fragment: a browser never sends it to a server,
    so no server log holds it; the page takes it and wipes it from the address."""
    workspace_id, _ = workspaces.ensure(conn, workspace)
    workspaces.add_member(conn, workspace_id, user, "admin")
    token = jwt.sign(user, ttl_seconds=CONSOLE_TOKEN_SECONDS)
    return f"{api_url}/console/#{urlencode({'token': token, 'workspace': str(workspace_id)})}"


@dataclass(frozen=True)
class DemoPlan:
    """Which actions the demo made and what it did to them."""

    ids: list[str]
    cancelled: list[str]
    rescheduled: dict[str, str]  # old id -> new id


def seed_demo(
    client: ApiClient, count: int = 12, first: float = 5, last: float = 40, move_by: float = 7
) -> DemoPlan:
    """`count` webhooks due between `first` and `last` seconds ahead; every fourth one (from
    the third) is cancelled and the second is moved `move_by` seconds later."""
    now = utcnow()
    run = uuid4().hex[:6]
    step = (last - first) / max(1, count - 1)
    ids = []
    for n in range(count):
        created = client.call("POST", "/v1/actions", json={
            "action_type": "webhook", "target_key": "primary", "thing_id": f"demo-{run}-{n + 1}",
            "publish_at": (now + timedelta(seconds=first + n * step)).isoformat(),
            "payload": {"text": f"demo message {n + 1} of {count}"},
        })  # fmt: skip
        ids.append(created["id"])
    cancelled = ids[2::4]
    for action_id in cancelled:
        client.call("POST", f"/v1/actions/{action_id}/cancel")
    rescheduled: dict[str, str] = {}
    if count >= 2:
        moved = client.call("GET", f"/v1/actions/{ids[1]}")
        later = datetime.fromisoformat(moved["publish_at"]) + timedelta(seconds=move_by)
        replacement = client.call(
            "POST", f"/v1/actions/{ids[1]}/reschedule", json={"publish_at": later.isoformat()}
        )
        rescheduled[ids[1]] = replacement["id"]
    return DemoPlan(ids + list(rescheduled.values()), cancelled, rescheduled)


def fetch(client: ApiClient, ids: list[str]) -> list[dict[str, Any]]:
    rows = [client.call("GET", f"/v1/actions/{action_id}") for action_id in ids]
    return sorted(rows, key=lambda row: (row["publish_at"], row["id"]))


LEGEND = (
    "claimed: when a dispatcher took the action, against its due time (the arrival at the"
    " receiver is printed by `make dev`, as 'late by'); times in UTC"
)


def render(rows: list[dict[str, Any]], now: datetime, *, countdown: bool = True) -> str:
    lines = [f"{'action':<10}{'thing':<16}{'due (UTC)':<14}{'status':<11}{'claimed':<16}note"]
    for row in rows:
        publish_at = datetime.fromisoformat(row["publish_at"])
        if row["submitted_at"]:
            claimed_at = datetime.fromisoformat(row["submitted_at"])
            claimed = lateness((claimed_at - publish_at).total_seconds())
        elif row["status"] == "queued" and countdown:
            claimed = f"due in {duration(max(0.0, (publish_at - now).total_seconds()))}"
        else:
            claimed = "-"
        moved = row["rescheduled_from"]
        note = f"rescheduled from {moved[:8]}" if moved else ""
        lines.append(
            f"{row['id'][:8]:<10}{row['thing_id']!s:<16}{clock(publish_at)[:11]:<14}"
            f"{row['status']:<11}{claimed:<16}{note}"
        )
    return "\n".join(lines)


def watch(
    client: ApiClient,
    ids: list[str],
    *,
    timeout: float = 90,
    out: TextIO = sys.stdout,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Print the table whenever it changes, until every action settles. True if all did."""
    live = out.isatty()  # redraw in place on a terminal; otherwise print each change
    last = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = fetch(client, ids)
        table = render(rows, utcnow(), countdown=live)
        if table != last:
            out.write(("\x1b[H\x1b[J" if live else "\n") + table + "\n")
            out.flush()
            last = table
        if all(row["status"] in TERMINAL for row in rows):
            return True
        sleep(0.5)
    return False


# Connections of the Demo workspace, sending to the local provider sandbox (which accepts any
# credentials): an email account, an SMS account and a chat bot.
DEMO_CONNECTIONS: dict[str, dict[str, Any]] = {
    "email": {"name": "Demo email", "provider": "postmark",
                   "settings": {"from": "Tickwork demo <demo@example.com>"},
                   "credentials": {"server_token": "local-sandbox-token"}},
    "sms": {"name": "Demo SMS", "provider": "twilio",
                 "settings": {"account_sid": "AC" + "0" * 32, "from": "+15005550006"},
                 "credentials": {"auth_token": "local-sandbox-token"}},
    "slack": {"name": "Demo Slack", "provider": "slack",
                      "settings": {"default_channel": "#general"},
                      "credentials": {"bot_token": "xoxb-local-sandbox-token"}},
}  # fmt: skip
DEMO_PAYLOADS: dict[str, dict[str, Any]] = {
    "email": {"to": "ann@example.com", "subject": "Your weekly digest", "text": "Hi Ann!"},
    "sms": {"to": "+14155550100", "body": "Your table is ready"},
    "slack": {"text": "Standup in 5 minutes"},
    "mastodon": {"status": "Scheduled with Tickwork", "visibility": "unlisted"},
}


def demo_connection(client: ApiClient, spec: dict[str, Any]) -> str:
    """The id of the demo's connection named `spec['name']`, made if missing, its settings
    brought up to date if they changed (the sandbox's URL, after `--sandbox-port`)."""
    found = client.call("GET", "/v1/connections", params={"provider": spec["provider"]})
    for item in found["items"]:
        if item["name"] == spec["name"]:
            if item["settings"] != masked_settings(spec["provider"], spec["settings"]):
                client.call("PATCH", f"/v1/connections/{item['id']}",
                            json={"settings": spec["settings"]})  # fmt: skip
            return str(item["id"])
    return str(client.call("POST", "/v1/connections", json=spec)["id"])


def seed_provider_demo(client: ApiClient, sandbox_url: str, after: float = 3) -> list[str]:
    """An email, an SMS, a chat message and a Mastodon post, each through a connection, due
    `after` seconds ahead."""
    when = (utcnow() + timedelta(seconds=after)).isoformat()
    specs = DEMO_CONNECTIONS | {"mastodon": {
        "name": "Demo Mastodon", "provider": "mastodon",
        "settings": {"instance_url": f"{sandbox_url}/mastodon"},
        "credentials": {"access_token": "local-sandbox-token"},
    }}  # fmt: skip
    ids = []
    for action_type, spec in specs.items():
        created = client.call("POST", "/v1/actions", json={
            "action_type": action_type, "target_key": "demo", "publish_at": when,
            "connection_id": demo_connection(client, spec), "payload": DEMO_PAYLOADS[action_type],
        })  # fmt: skip
        ids.append(created["id"])
    return ids


def seed_console_demo(client: ApiClient, hours: int = 84) -> list[str]:
    """Something for the web console to show: webhooks and log lines spread over the next
    `hours` (each at its own time), a recipient with quiet hours, a daily schedule at 09:00
    in Tokyo, a rule and a two-step campaign with one enrollment. Made once per workspace:
    a second call adds only the spread actions."""
    now = utcnow().replace(second=0, microsecond=0)
    ids = []
    for n in range(12):
        action_type = "webhook" if n % 3 else "log"
        created = client.call("POST", "/v1/actions", json={
            "action_type": action_type, "target_key": "primary" if n % 3 else "demo",
            "thing_id": f"order-{1001 + n}",
            "publish_at": (now + timedelta(hours=3 + n * (hours - 3) / 12, minutes=15 * (n % 4)))
            .isoformat(),
            "payload": {"text": f"order {1001 + n} reminder"},
        })  # fmt: skip
        ids.append(created["id"])
    client.call("PUT", "/v1/recipients/ann", json={
        "timezone": "Europe/Paris", "quiet_hours": [{"start": "22:00", "end": "08:00"}],
        "caps": {"webhook": 5},
    })  # fmt: skip
    if not any(
        s["thing_id"] == "daily-report" for s in client.call("GET", "/v1/recurring")["items"]
    ):
        client.call("POST", "/v1/recurring", json={
            "action_type": "webhook", "target_key": "primary", "thing_id": "daily-report",
            "rrule": "FREQ=DAILY;BYHOUR=9;BYMINUTE=0", "timezone": "Asia/Tokyo",
            "payload": {"text": "daily report"},
        })  # fmt: skip
    if not client.call("GET", "/v1/rules")["items"]:
        client.call("POST", "/v1/rules", json={
            "name": "booking confirmation",
            "trigger": {"type": "event", "event": "booking.confirmed"},
            "action": {"action_type": "log", "target_key": "demo",
                       "payload": {"text": "Hi {{ context.guest.name }}"}},
        })  # fmt: skip
    if not client.call("GET", "/v1/campaigns")["items"]:
        campaign = client.call("POST", "/v1/campaigns", json={
            "name": "welcome",
            "steps": [{"wait": {"delay_seconds": 3600}, "action": {
                           "action_type": "webhook", "target_key": "primary",
                           "payload": {"text": "welcome, {{ recipient.id }}"}}},
                      {"wait": {"delay_seconds": 86400}, "action": {
                           "action_type": "webhook", "target_key": "primary",
                           "payload": {"text": "a day in: tips"}}}],
        })  # fmt: skip
        client.call(
            "POST", f"/v1/campaigns/{campaign['id']}/enrollments", json={"recipient_id": "ann"}
        )
    return ids
