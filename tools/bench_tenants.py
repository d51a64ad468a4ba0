"""`make bench-tenants`: what one workspace's hostile template or burst does to another's API
answers and deliveries, measured in the same run with and without it.

The local runtime as `tickwork dev` runs it (API server, tick process, dispatchers, the
webhook receiver on loopback). A quiet workspace calls the API five times a second (it
schedules a webhook due two seconds later, and lists its calendar) while each phase lasts,
and every webhook it scheduled is timed where it arrives. Phases, alternating per round:

- alone: the quiet workspace only (the baseline);
- template: a hostile workspace fires, every second, an event whose rule renders a template
  that asks for ever larger numbers from the event's context
  (`{% set x = (((context.n ** 64) ** 64) ** 64) ** 64 %}`, n = 9): nothing a check at rule
  creation can see;
- burst: the hostile workspace fires 8 events at once, each matched by 1,000 webhook rules:
  8,000 webhooks due at once, to the same queue and receiver as the quiet workspace's.

The hostile workspace's caps (rules, actions per event, per minute) are raised by the
operator for the run, so its burst happens: what is measured is the fair share, not the
caps. DATABASE_URL selects a server (a `tickwork_bench_tenants_<pid>` database is made on
it, and dropped at the end); otherwise an embedded Postgres in a temporary directory is
used.
"""

from __future__ import annotations

import argparse
import itertools
import os
import socket
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, NamedTuple
from uuid import uuid4

import httpx

from tickwork import quotas, workspaces
from tickwork.local.auth import LocalJwt
from tickwork.local.embedded import EmbeddedPostgres
from tickwork.local.handlers import quiet_powertools
from tickwork.local.receiver import ReceivedWebhook
from tickwork.local.runner import LocalRuntime
from tickwork.platform.config import Settings
from tickwork.platform.db import connect
from tickwork.platform.wallclock import utcnow
from tools.bench import drop_database, prepare_database

# A database of the run's own: runs side by side (a baseline checkout beside) do not collide.
BENCH_DATABASE = f"tickwork_bench_tenants_{os.getpid()}"
PHASES = ("alone", "template", "burst")
HOSTILE_TEMPLATE = "{% set x = (((context.n ** 64) ** 64) ** 64) ** 64 %}ok"
BURST_RULES = 1000  # webhook rules on the burst's event type
BURST_EVENTS = 8  # events of the burst, fired back to back
QUIET_RATE = 5.0  # quiet workspace's schedule-and-list rounds per second
QUIET_LEAD = 2.0  # seconds between scheduling a quiet webhook and its due time
# Operator limits for the hostile workspace, so its burst is not refused by the caps.
HOSTILE_LIMITS = {
    "rules": 0,
    "actions_per_event": 0,
    "actions_per_minute": 0,
    "api_requests_per_minute": 0,
    "active_actions": 0,
}


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def summary(values: Sequence[float]) -> str:
    if not values:
        return "no samples"
    ms = [percentile(values, p) * 1000 for p in (0.5, 0.99)] + [max(values) * 1000]
    return f"p50 {ms[0]:,.1f} ms, p99 {ms[1]:,.1f} ms, max {ms[2]:,.1f} ms ({len(values):,})"


@dataclass
class PhaseResult:
    phase: str
    api: list[float] = field(default_factory=list)  # quiet API answer times, seconds
    lateness: list[float] = field(default_factory=list)  # quiet webhooks, seconds
    expected: int = 0  # quiet webhooks scheduled
    events: list[HostileEvent] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # anything else worth saying


class HostileEvent(NamedTuple):
    """One of the hostile workspace's events: its answer's status and time, and what it
    came to."""

    kind: str
    status: int
    seconds: float
    number: int | None  # rules failed (template), actions made (burst)

    def __str__(self) -> str:
        what = "rules failed" if self.kind == "template" else "actions made"
        return f"{self.kind} event: {self.status} in {self.seconds:.2f} s, {self.number} {what}"


@dataclass(frozen=True)
class Plan:
    seconds: float = 20.0  # each phase
    rounds: int = 3
    phases: tuple[str, ...] = PHASES
    burst_rules: int = BURST_RULES
    burst_events: int = BURST_EVENTS
    timeout: float = 60.0  # the API clients'


class Client:
    """A workspace's API client: `call` answers (status, seconds, json body)."""

    def __init__(self, base_url: str, token: str, workspace_id: str, timeout: float) -> None:
        # Without TCP_NODELAY a request's body waits for the server to acknowledge its
        # headers (Nagle), which a server delays up to 40 ms: the client's time, not ours.
        nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
        self.http = httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}", "X-Workspace-Id": workspace_id},
            timeout=timeout,
            transport=httpx.HTTPTransport(socket_options=nodelay),
        )

    def call(self, method: str, path: str, **kwargs: Any) -> tuple[int, float, Any]:
        started = time.perf_counter()
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TimeoutException:
            return 0, time.perf_counter() - started, None
        took = time.perf_counter() - started
        try:
            body = response.json()
        except ValueError:
            body = None
        return response.status_code, took, body


class Arrivals:
    """The quiet workspace's webhooks as the receiver sees them, by action id."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lateness: dict[str, float] = {}
        self.hostile = 0

    def __call__(self, delivery: ReceivedWebhook) -> None:
        data = delivery.body.get("data") or {}
        thing = str(data.get("thing_id") or "")
        with self.lock:
            if thing.startswith("quiet-") and delivery.lag_seconds is not None:
                self.lateness.setdefault(str(data.get("id")), delivery.lag_seconds)
            else:
                self.hostile += 1


def raise_limits(url: str, workspace_id: Any, settings: Settings) -> str:
    """Lift the hostile workspace's caps, as an operator would; says what it did."""
    with connect(url) as conn:
        limits = quotas.set_limits(conn, workspace_id, settings, HOSTILE_LIMITS)
    lifted = ", ".join(name for name, value in limits.as_dict().items() if value == 0)
    return f"the hostile workspace's limits are off: {lifted}"


def quiet_load(client: Client, stop: threading.Event, result: PhaseResult) -> None:
    """Schedule a webhook due QUIET_LEAD s ahead and list the calendar, QUIET_RATE a second."""
    interval = 1.0 / QUIET_RATE
    next_at = time.monotonic()
    while not stop.is_set():
        due = utcnow() + timedelta(seconds=QUIET_LEAD)
        status, took, body = client.call("POST", "/v1/actions", json={
            "action_type": "webhook", "target_key": "primary",
            "thing_id": f"quiet-{uuid4().hex[:12]}", "publish_at": due.isoformat(),
            "payload": {"n": result.expected},
        })  # fmt: skip
        result.api.append(took)
        if status == 201:
            result.expected += 1
        else:
            result.notes.append(f"quiet schedule answered {status}: {body}")
        _, took, _ = client.call("GET", "/v1/actions", params={"limit": 20})
        result.api.append(took)
        next_at += interval
        stop.wait(max(0.0, next_at - time.monotonic()))


def template_attack(client: Client, stop: threading.Event, result: PhaseResult, plan: Plan) -> None:
    """An event whose rule renders the hostile template, every second."""
    for n in itertools.count():
        if stop.is_set():
            return
        status, took, body = client.call("POST", "/v1/events", json={
            "type": "hostile.template", "entities": {"probe": f"t-{uuid4().hex[:8]}-{n}"},
            "context": {"n": 9},
        })  # fmt: skip
        failed = len(body.get("failed", [])) if isinstance(body, dict) else None
        result.events.append(HostileEvent("template", status, took, failed))
        stop.wait(1.0)


def burst_attack(client: Client, stop: threading.Event, result: PhaseResult, plan: Plan) -> None:
    """After a second (half the phase, when shorter), `plan.burst_events` events, each
    matched by the burst's rules."""
    if stop.wait(min(1.0, plan.seconds / 2)):
        return
    run = uuid4().hex[:8]
    for n in range(plan.burst_events):
        status, took, body = client.call("POST", "/v1/events", json={
            "type": "hostile.burst", "entities": {"booking": f"{run}-{n}"}, "context": {},
        })  # fmt: skip
        made = body.get("executions_created") if isinstance(body, dict) else None
        result.events.append(HostileEvent("burst", status, took, made))


ATTACKS: dict[str, Callable[[Client, threading.Event, PhaseResult, Plan], None] | None] = {
    "alone": None,
    "template": template_attack,
    "burst": burst_attack,
}


def wait_drained(local: LocalRuntime, url: str, timeout: float) -> bool:
    """Until no webhook row is queued or in flight (the hostile backlog is gone)."""
    deadline = time.monotonic() + timeout
    with connect(url) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "select count(*) from scheduled_actions where finished_at is null"
                " and action_type = 'webhook' and publish_at <= now()"
            ).fetchone()
            if row is not None and row[0] == 0:
                return True
            time.sleep(0.2)
    return False


def run_phase(
    phase: str, plan: Plan, local: LocalRuntime, url: str, quiet: Client, hostile: Client,
    arrivals: Arrivals,
) -> PhaseResult:  # fmt: skip
    result = PhaseResult(phase)
    with arrivals.lock:
        arrivals.lateness.clear()
    stop = threading.Event()
    threads = [threading.Thread(target=quiet_load, args=(quiet, stop, result), daemon=True)]
    attack = ATTACKS[phase]
    if attack is not None:
        threads.append(
            threading.Thread(target=attack, args=(hostile, stop, result, plan), daemon=True)
        )
    for thread in threads:
        thread.start()
    time.sleep(plan.seconds)
    stop.set()
    for thread in threads:
        thread.join()
    # Every quiet webhook is due QUIET_LEAD s after it was scheduled; wait for them all
    # (late ones included) and for the hostile backlog to drain before the next phase.
    deadline = time.monotonic() + QUIET_LEAD + 120
    while time.monotonic() < deadline:
        with arrivals.lock:
            if len(arrivals.lateness) >= result.expected:
                break
        time.sleep(0.1)
    with arrivals.lock:
        result.lateness = list(arrivals.lateness.values())
    if not wait_drained(local, url, 300):
        result.notes.append("the hostile backlog had not drained after 300 s")
    return result


def setup(local: LocalRuntime, jwt: LocalJwt, url: str, plan: Plan) -> tuple[Client, Client]:
    conn = local.runtime.db.connection()
    quiet_id, _ = workspaces.ensure(conn, "Quiet")
    hostile_id, _ = workspaces.ensure(conn, "Hostile")
    workspaces.add_member(conn, quiet_id, "quinn", "admin")
    workspaces.add_member(conn, hostile_id, "mallory", "admin")
    print(raise_limits(url, hostile_id, local.settings))
    base = local.api.url
    quiet = Client(base, jwt.sign("quinn"), str(quiet_id), plan.timeout)
    hostile = Client(base, jwt.sign("mallory"), str(hostile_id), plan.timeout)
    status, _, body = hostile.call("POST", "/v1/rules", json={
        "name": "hostile template", "trigger": {"type": "event", "event": "hostile.template"},
        "action": {"action_type": "webhook", "target_key": "primary",
                   "payload": {"text": HOSTILE_TEMPLATE}},
    })  # fmt: skip
    print(f"hostile template rule: {status}" + ("" if status == 201 else f" {body}"))
    made = 0
    for n in range(plan.burst_rules):
        status, _, body = hostile.call("POST", "/v1/rules", json={
            "name": f"burst {n}", "trigger": {"type": "event", "event": "hostile.burst"},
            "action": {"action_type": "webhook", "target_key": "primary",
                       "payload": {"rule": n}},
        })  # fmt: skip
        if status != 201:
            print(f"burst rule {n}: {status} {body}")
            break
        made += 1
    print(f"hostile burst rules: {made:,} made")
    return quiet, hostile


def run(url: str, plan: Plan) -> dict[str, list[PhaseResult]]:
    """The plan's rounds of phases on the migrated database at `url`."""
    jwt = LocalJwt(Path(tempfile.mkdtemp()) / "jwt-secret")
    arrivals = Arrivals()
    local = LocalRuntime(url, Settings(), jwt=jwt, on_delivery=arrivals, tick_process=True)
    results: dict[str, list[PhaseResult]] = defaultdict(list)
    with local:
        quiet, hostile = setup(local, jwt, url, plan)
        for round_number in range(1, plan.rounds + 1):
            for phase in plan.phases:
                result = run_phase(phase, plan, local, url, quiet, hostile, arrivals)
                results[phase].append(result)
                print(f"round {round_number}, {phase}: quiet API {summary(result.api)};"
                      f" quiet webhooks late {summary(result.lateness)},"
                      f" {len(result.lateness)} of {result.expected} arrived")  # fmt: skip
                for line in [*map(str, result.events), *result.notes]:
                    print(f"    {line}")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tickwork-bench-tenants", description=__doc__)
    parser.add_argument("--seconds", type=float, default=Plan.seconds, help="each phase")
    parser.add_argument("--rounds", type=int, default=Plan.rounds, help="rounds of the phases")
    parser.add_argument(
        "--phases",
        default=",".join(PHASES),
        help=f"comma-separated, in order each round: {', '.join(PHASES)}",
    )
    parser.add_argument("--burst-rules", type=int, default=BURST_RULES)
    parser.add_argument("--burst-events", type=int, default=BURST_EVENTS)
    parser.add_argument("--timeout", type=float, default=Plan.timeout, help="API clients'")
    args = parser.parse_args(argv)
    phases = tuple(p.strip() for p in args.phases.split(",") if p.strip())
    unknown = sorted(set(phases) - set(PHASES))
    if unknown:
        parser.error(f"unknown phases: {', '.join(unknown)}")
    plan = Plan(args.seconds, args.rounds, phases, args.burst_rules, args.burst_events,
                args.timeout)  # fmt: skip
    quiet_powertools()
    admin_url = os.environ.get("DATABASE_URL")
    server = None
    if not admin_url:
        server = EmbeddedPostgres(Path(tempfile.mkdtemp()) / "pgdata", delete_on_exit=True)
        admin_url = server.url()
    url = prepare_database(admin_url, BENCH_DATABASE)
    print(f"tickwork bench-tenants, {os.cpu_count()} CPUs, {plan.rounds} rounds of"
          f" {', '.join(phases)}, {plan.seconds:g} s each;"
          f" load {os.getloadavg()[0]:.2f}")  # fmt: skip
    results = run(url, plan)
    print("\nall rounds, the quiet workspace:")
    print("| phase | API answer p50 / p99 / max | webhook lateness p50 / p99 / max |")
    print("|---|---|---|")
    for phase in phases:
        api = [v for r in results[phase] for v in r.api]
        late = [v for r in results[phase] for v in r.lateness]
        arrived = sum(len(r.lateness) for r in results[phase])
        expected = sum(r.expected for r in results[phase])
        print(f"| {phase} | {triple(api)} | {triple(late)} ({arrived:,} of {expected:,}) |")
    drop_database(admin_url, BENCH_DATABASE)
    if server is not None:
        server.stop()
    return 0


def triple(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return (
        " / ".join(
            f"{v * 1000:,.1f}"
            for v in (percentile(values, 0.5), percentile(values, 0.99), max(values))
        )
        + " ms"
    )


if __name__ == "__main__":
    raise SystemExit(main())
