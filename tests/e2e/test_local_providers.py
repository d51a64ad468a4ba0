"""`tickwork dev`'s providers: the demo's email, SMS, chat message and Mastodon post go out
through the Demo workspace's connections and arrive at the local provider sandbox."""

from __future__ import annotations

import os

from tickwork.local.auth import LocalJwt
from tickwork.local.demo import demo_client, seed_provider_demo, watch
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
