"""Postmark's outage by the clock, through the local runtime (issue #38's "Postmark's fake
answers 503 for 2 minutes"): an `email` type sends through Postmark (its fake, over
loopback), then SES (moto). Rows are scheduled over the HTTP API at a steady pace before,
during and after the outage, and the runtime's own tick and dispatchers send them.

During the outage rows go out through SES once Postmark's threshold or its circuit says so;
none is sent twice (the fakes' logs); a refusal is not sent elsewhere. When the outage ends
a probe closes the circuit and traffic returns to Postmark. The default suite runs a short
outage with the circuit's settings scaled down; the two-minute one is marked slow."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ses.models import ses_backends

from tests.e2e.conftest import Api, running_api
from tests.fakes.postmark import TOKEN, FakePostmark
from tests.waiting import wait_for
from tickwork.platform.config import (
    ActionTypeConfig,
    FailoverConfig,
    FailoverProvider,
    Settings,
)
from tickwork.platform.db import Connection, connect

REGION = "eu-west-1"
AWS_KEYS = {"access_key_id": "AKIAIOSFODNN7EXAMPLE",
            "secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}  # fmt: skip


@dataclass(frozen=True)
class Outage:
    seconds: float  # how long Postmark answers 503
    pace: float  # one row scheduled every `pace` seconds
    threshold: int  # transient answers of Postmark for one row before it moves on
    failures: int  # the circuit's failures within its window
    window: float
    cooldown: float
    backoff: float  # the engine's backoff base (a transient answer's retry)


SHORT = Outage(seconds=15, pace=0.25, threshold=2, failures=3, window=10, cooldown=3,
               backoff=0.2)  # fmt: skip
TWO_MINUTES = Outage(seconds=120, pace=1.0, threshold=2, failures=5, window=60, cooldown=30,
                     backoff=2.0)  # fmt: skip


@dataclass
class Run:
    """What the test scheduled and saw while the runtime sent it."""

    api: Api
    conn: Connection
    postmark: FakePostmark
    postmark_id: str  # workspace A's Postmark connection
    ids: dict[str, str] = field(default_factory=dict)  # subject -> action id
    circuit_seen: list[tuple[float, str]] = field(default_factory=list)  # (when, state)

    def schedule(self, subject: str, to: str, connection_id: str, client: Any = None) -> str:
        created = (client or self.api.admin).call("POST", "/v1/actions", json={
            "action_type": "email", "target_key": f"{to}:{subject}",
            "publish_at": datetime.now(UTC).isoformat(), "connection_id": connection_id,
            "payload": {"to": to, "subject": subject, "text": f"{subject}, to {to}"},
        })  # fmt: skip
        self.ids[subject] = str(created["id"])
        return str(created["id"])

    def circuit(self) -> str:
        """Postmark's circuit (workspace A's connection), as the dispatchers left it."""
        found = self.conn.execute(
            "select state from provider_circuits where provider = 'postmark'"
            " and connection_id = %s", (self.postmark_id,),
        ).fetchone()  # fmt: skip
        return "closed" if found is None else str(found[0])

    def watch_circuit(self) -> str:
        state = self.circuit()
        if not self.circuit_seen or self.circuit_seen[-1][1] != state:
            self.circuit_seen.append((time.time(), state))
        return state

    def rows(self) -> dict[str, tuple[str, str | None]]:
        """Each scheduled row's status and error code, by subject."""
        found = dict(
            self.conn.execute(
                "select id::text, (status, error_code) from scheduled_actions"
                " where id = any(%s::uuid[])", (list(self.ids.values()),),
            ).fetchall()
        )  # fmt: skip
        return {subject: tuple(found[i]) for subject, i in self.ids.items()}  # type: ignore[misc]

    def attempts(self) -> dict[str, list[tuple[str, str | None, str | None, datetime]]]:
        """Each row's provider calls, oldest first: outcome, provider, why it failed over,
        when it ended (its answer came back)."""
        by_id: dict[str, list[tuple[str, str | None, str | None, datetime]]] = {}
        for action_id, outcome, provider, reason, ended in self.conn.execute(
            "select action_id::text, outcome, provider, failover_reason, finished_at"
            " from action_attempts where action_id = any(%s::uuid[]) order by attempt",
            (list(self.ids.values()),),
        ).fetchall():
            by_id.setdefault(action_id, []).append((outcome, provider, reason, ended))
        return {subject: by_id.get(i, []) for subject, i in self.ids.items()}


def settings_for(outage: Outage, postmark: FakePostmark) -> Settings:
    email = ActionTypeConfig(
        provider="postmark",
        options={"api_url": postmark.url},
        failover=FailoverConfig(
            providers=(FailoverProvider(provider="ses"),),
            threshold=outage.threshold,
            circuit_failures=outage.failures,
            circuit_window_seconds=outage.window,
            circuit_cooldown_seconds=outage.cooldown,
        ),
    )
    return Settings(
        action_types={"email": email},
        backoff_base_seconds=outage.backoff,
        backoff_cap_seconds=outage.cooldown,
        provider_timeout_seconds=2.0,
        max_attempts=20,
    )


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws():
        # SES sends from a verified domain only: workspace A's is, workspace B's is not.
        boto3.client("sesv2", region_name=REGION).create_email_identity(EmailIdentity="example.com")
        yield


def sent_by_ses() -> list[str]:
    return [m.subject for m in ses_backends[DEFAULT_ACCOUNT_ID][REGION].sent_messages]


def connect_both(client: Any, sender: str) -> str:
    """A workspace's Postmark connection (returned) and its SES one (the fallback's), both
    sending as `sender`."""
    postmark = client.call("POST", "/v1/connections", json={
        "name": "Postmark", "provider": "postmark", "settings": {"from": sender},
        "credentials": {"server_token": TOKEN}})  # fmt: skip
    client.call("POST", "/v1/connections", json={
        "name": "SES", "provider": "ses", "settings": {"region": REGION, "from": sender},
        "credentials": AWS_KEYS})  # fmt: skip
    return str(postmark["id"])


def run_outage(outage: Outage, database_url: str, tmp_path: Path) -> None:
    postmark = FakePostmark()
    stop = threading.Event()  # paces the rows scheduled (never set: waits its timeout)
    try:
        with running_api(database_url, tmp_path, settings_for(outage, postmark),
                         tick_interval=1) as api, connect(database_url) as conn:  # fmt: skip
            a_postmark = connect_both(api.admin, "news@example.com")
            b_postmark = connect_both(api.outsider, "news@unverified.example")
            run = Run(api, conn, postmark, a_postmark)
            # Given Postmark down by the clock, rows scheduled at a steady pace through it
            until = postmark.outage(outage.seconds)
            run.schedule("refused by SES", "bob@example.com", b_postmark, api.outsider)
            during = 0
            while time.time() < until:
                run.schedule(f"during {during}", f"ann{during}@example.com", a_postmark)
                during += 1
                run.watch_circuit()
                stop.wait(outage.pace)
            # When it ends, rows keep coming: a probe closes the circuit
            after = 0

            def closed() -> bool:
                nonlocal after
                run.schedule(f"after {after}", f"cy{after}@example.com", a_postmark)
                after += 1
                stop.wait(outage.pace)
                return run.watch_circuit() == "closed"

            wait_for(closed, outage.cooldown + 15, interval=0,
                     message=lambda: f"circuit {run.circuit()}")  # fmt: skip
            closed_at = time.time()
            # And what comes after goes to Postmark: the refusal too, which SES never sees
            postmark.inactive.add("gone@example.com")
            run.schedule("refused by Postmark", "gone@example.com", a_postmark)
            for n in range(10):
                run.schedule(f"returned {n}", f"dee{n}@example.com", a_postmark)
            wait_for(
                lambda: all(status in ("published", "failed") for status, _ in
                            run.rows().values()),
                60, interval=0.2,
                message=lambda: str(Counter(s for s, _ in run.rows().values())),
            )  # fmt: skip
            check(run, outage, until, closed_at)
    finally:
        postmark.close()


def check(run: Run, outage: Outage, until: float, closed_at: float) -> None:
    rows = run.rows()
    attempts = run.attempts()
    # Then every row was sent, once, by one provider, except the two refusals
    failed = {s: r for s, r in rows.items() if r[0] != "published"}
    assert failed == {"refused by SES": ("failed", "message_rejected"),
                      "refused by Postmark": ("failed", "inactive_recipient")}  # fmt: skip
    by_postmark = Counter(m["Subject"] for m in run.postmark.sent)
    by_ses = Counter(sent_by_ses())
    assert max((by_postmark + by_ses).values()) == 1, "a row was sent twice"
    assert set(by_postmark) | set(by_ses) == set(rows) - set(failed)
    assert not set(by_postmark) & set(by_ses)
    # Postmark accepted nothing while it was down; SES sent during the outage
    accepted_at = [datetime.fromisoformat(m["ReceivedAt"]).timestamp() for m in run.postmark.sent]
    assert min(accepted_at) >= until
    during_outage = [
        s
        for s, calls in attempts.items()
        if calls and calls[-1][1] == "ses" and calls[-1][3].timestamp() < until
    ]
    assert len(during_outage) >= outage.seconds / outage.pace / 2, during_outage
    # A refusal is final where it happened: SES's was not sent back to Postmark, and
    # Postmark's (after the outage) never reached SES
    ses_refused = attempts["refused by SES"]
    assert [c[:2] for c in ses_refused][-1] == ("rejected", "ses")
    assert {c[:2] for c in ses_refused[:-1]} == {("transient", "postmark")}
    assert [c[:3] for c in attempts["refused by Postmark"]] == [("rejected", "postmark", None)]
    # Each row delivered by SES got there after Postmark's threshold for it, or because its
    # circuit was open; none delivered after an unknown outcome (none is ambiguous)
    for subject, calls in attempts.items():
        if subject in failed:
            continue
        *before, (outcome, provider, reason, ended) = calls
        assert outcome == "delivered", (subject, calls)
        assert {c[:2] for c in before} <= {("transient", "postmark")}, (subject, calls)
        if provider == "ses":
            assert reason == ("threshold" if len(before) == outage.threshold
                              else "circuit_open"), (subject, calls)  # fmt: skip
        else:
            assert (provider, reason) == ("postmark", None), (subject, calls)
            assert ended.timestamp() >= until
    # The circuit opened during the outage and closed after it, by a probe, within a
    # cool-down of the end (and some slack for the probe's row to come)
    states = [state for _, state in run.circuit_seen]
    assert "open" in states, run.circuit_seen
    assert states[-1] == "closed", run.circuit_seen
    assert closed_at - until <= outage.cooldown + 10
    # While it was open Postmark saw probes only, about one a cool-down
    first_open = min(at for at, state in run.circuit_seen if state == "open")
    probes = [at for at, _ in run.postmark.outage_answers if at > first_open + 1.0]
    assert len(probes) <= (until - first_open) / outage.cooldown + 3, len(probes)
    # And traffic returned: every row scheduled once it closed went through Postmark
    returned = [s for s in rows if s.startswith("returned")]
    assert len(returned) == 10
    assert all(s in by_postmark for s in returned)
    assert all([c[:3] for c in attempts[s]] == [("delivered", "postmark", None)]
               for s in returned)  # fmt: skip


def test_a_short_outage_fails_over_to_ses_and_traffic_returns(aws, database_url, tmp_path):
    run_outage(SHORT, database_url, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_postmark_down_for_two_minutes(aws, database_url, tmp_path):
    run_outage(TWO_MINUTES, database_url, tmp_path)
