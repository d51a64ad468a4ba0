"""`tickwork dev`'s providers: the demo's email, SMS, chat message and Mastodon post go out
through the Demo workspace's connections and arrive at the local provider sandbox."""

from __future__ import annotations

import os
import socket
from typing import Any

from tests.waiting import wait_for
from tickwork.connections.secrets import FileSecretStore
from tickwork.local.auth import LocalJwt
from tickwork.local.demo import ApiClient, demo_client, seed_provider_demo, watch
from tickwork.local.runner import LocalRuntime
from tickwork.platform.config import Settings


def test_an_email_an_sms_a_message_and_a_post_arrive_at_the_sandbox(database_url, tmp_path):
    jwt = LocalJwt(tmp_path / "jwt-secret")
    with LocalRuntime(database_url, Settings(), tick_interval=60, jwt=jwt) as local:
        client = demo_client(local.runtime.db.connection(), local.api.url, jwt)
        ids = seed_provider_demo(client, local.sandbox.url, after=1)
        with open(os.devnull, "w") as quiet:
            assert watch(client, ids, timeout=30, out=quiet)
        rows = [client.call("GET", f"/v1/actions/{action_id}") for action_id in ids]
        assert [row["status"] for row in rows] == ["published"] * 4
        assert sorted(a.provider for a in local.sandbox.arrivals) == [
            "email", "mastodon", "slack", "sms"]  # fmt: skip
        # Running the demo again reuses its connections rather than failing on the names
        again = seed_provider_demo(client, local.sandbox.url, after=60)
        assert len(again) == 4
        assert len(client.call("GET", "/v1/connections")["items"]) == 4


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_sandbox_keeps_its_port_so_the_demo_connections_work_after_a_restart(
    database_url, tmp_path
):
    jwt = LocalJwt(tmp_path / "jwt-secret")
    kept = {"jwt": jwt, "secrets": FileSecretStore(tmp_path / "secrets.json")}  # as dev keeps them
    port = free_port()
    for start in range(2):
        # Given `tickwork dev` started (again) with its sandbox port
        with LocalRuntime(database_url, Settings(), sandbox_port=port, **kept) as local:
            assert local.sandbox.url == f"http://127.0.0.1:{port}"
            client = demo_client(local.runtime.db.connection(), local.api.url, jwt)
            # When the demo posts through the Mastodon connection made at the first start
            ids = seed_provider_demo(client, local.sandbox.url, after=0)
            # Then the post arrives at this run's sandbox, not at a port nobody holds
            published(client, ids)
            assert "mastodon" in [a.provider for a in local.sandbox.arrivals], start
    # And a sandbox moved to another port (--sandbox-port) brings the connection along
    with LocalRuntime(database_url, Settings(), sandbox_port=free_port(), **kept) as local:
        client = demo_client(local.runtime.db.connection(), local.api.url, jwt)
        ids = seed_provider_demo(client, local.sandbox.url, after=0)
        published(client, ids)
        assert len(client.call("GET", "/v1/connections")["items"]) == 4


def published(client: ApiClient, ids: list[str]) -> None:
    def rows() -> list[dict[str, Any]]:
        return [client.call("GET", f"/v1/actions/{action_id}") for action_id in ids]

    wait_for(lambda: [r["status"] for r in rows()] == ["published"] * 4, timeout=30,
             message=lambda: str([(r["action_type"], r["status"], r["last_error"])
                                  for r in rows()]))  # fmt: skip
