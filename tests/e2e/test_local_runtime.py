"""The local runtime end to end: `tickwork dev` and `tickwork demo` as a user runs them."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.waiting import wait_for
from tickwork import workspaces
from tickwork.local.auth import LocalJwt
from tickwork.local.demo import demo_client, seed_demo, watch
from tickwork.local.paths import data_dir, dev_record_file
from tickwork.local.runner import LocalRuntime
from tickwork.platform.config import Settings
from tickwork.platform.db import connect
from tickwork.providers.log import LogProvider

TICKWORK = [sys.executable, "-m", "tickwork.cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_demo_actions_arrive_signed_and_on_time(database_url, tmp_path):
    jwt = LocalJwt(tmp_path / "jwt-secret")
    with LocalRuntime(database_url, Settings(), tick_interval=60, jwt=jwt) as local:
        client = demo_client(local.runtime.db.connection(), local.api.url, jwt)
        # Given a demo plan made through the API: 10 webhooks 1-4 s ahead, 2 cancelled,
        # 1 rescheduled 1 s later
        plan = seed_demo(client, count=10, first=1, last=4, move_by=1)
        # When they settle
        with open(os.devnull, "w") as quiet:
            assert watch(client, plan.ids, timeout=30, out=quiet)
        # Then exactly the live ones arrived, once each, signed, within 300 ms of their time
        expected = set(plan.ids) - set(plan.cancelled) - set(plan.rescheduled)
        arrived = [d.body["data"]["id"] for d in local.receiver.deliveries]
        assert sorted(arrived) == sorted(expected)
        assert all(d.verified for d in local.receiver.deliveries)
        lags = [d.lag_seconds for d in local.receiver.deliveries]
        assert all(lag is not None and 0 <= lag < 1.0 for lag in lags), lags


@pytest.fixture
def dev_process(database_url) -> Iterator[tuple[subprocess.Popen[str], list[str], str]]:
    env = os.environ | {"DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"}
    env.pop("TICKWORK_ACTION_TYPES", None)
    api_port = free_port()
    # Ports of their own: a `make dev` on this machine holds the defaults.
    ports = ["--api-port", str(api_port), "--receiver-port", str(free_port())]
    ports += ["--sandbox-port", str(free_port())]
    process = subprocess.Popen(
        [*TICKWORK, "dev", *ports],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    lines: list[str] = []
    yield process, lines, f"http://127.0.0.1:{api_port}"
    if process.poll() is None:
        process.kill()
        process.wait()


def read_until(
    process: subprocess.Popen[str], lines: list[str], pattern: str, count: int, timeout: float
) -> list[str]:
    assert process.stdout is not None
    stdout = process.stdout
    wanted = f"wanted {count} lines matching {pattern!r}"

    def matched() -> list[str] | None:
        matching = [line for line in lines if re.search(pattern, line)]
        if len(matching) >= count:
            return matching
        line = stdout.readline()  # waits for the next line itself
        if not line:
            raise AssertionError(f"{wanted}; the output ended:\n{''.join(lines)}")
        lines.append(line)
        return None

    return wait_for(
        matched, timeout, interval=0, message=lambda: f"{wanted}; got:\n{''.join(lines)}"
    )


def test_tickwork_dev_and_demo_as_a_user_runs_them(dev_process, database_url, tmp_path):
    process, lines, api_url = dev_process
    # `tickwork dev` starts, schedules its few demo webhooks and prints them arriving
    read_until(process, lines, r"tickwork is running", 1, timeout=30)
    arrivals = read_until(process, lines, r"webhook .* arrived", 3, timeout=30)
    for line in arrivals:
        # Times in UTC and lateness in human units, measured at the receiver
        assert re.search(r"due \d\d:\d\d:\d\d\.\d{3}  arrived late by \d+ ms", line), line
    # `tickwork demo` in another process schedules more; they arrive in the dev process
    demo = subprocess.run(
        [
            *TICKWORK,
            "demo",
            "--database-url",
            database_url,
            "--api-url",
            api_url,
            "--count",
            "10",
            "--first",
            "2",
            "--last",
            "6",
            "--timeout",
            "30",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "all settled" in demo.stdout
    read_until(process, lines, r"webhook .* thing=demo-.* arrived", 3 + 8, timeout=15)
    # `tickwork status` from another folder, with no DATABASE_URL, finds the running process
    # and its database through the data directory
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    status = subprocess.run(
        [*TICKWORK, "status", "--json", "--workspace", "Demo"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env=env,
    )
    assert status.returncode == 0, status.stderr
    found = json.loads(status.stdout)
    assert found["queues_from"] == f"in-process, tickwork dev pid {process.pid}"
    assert {o["status"] for o in found["outcomes"]} == {"published"}
    # 3 demo webhooks and the demo's email, SMS, Slack message and Mastodon post, then 8
    assert sum(o["count"] for o in found["outcomes"]) == 3 + 4 + 8
    # Ctrl-C stops everything cleanly, and the record of the running process goes with it
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) == 0
    assert not dev_record_file(data_dir()).exists()


def insert_due(database_url: str, count: int, seconds_from_now: float) -> None:
    """`count` log rows due together, written behind the API's back (the API would hand a
    row due this soon to its queue itself): only a tick can send them."""
    with connect(database_url) as conn:
        workspace, _ = workspaces.ensure(conn, "Ticks")
        conn.execute(
            "insert into scheduled_actions (workspace_id, action_type, target_key, publish_at)"
            " select %s, 'log', 't' || g, now() + make_interval(secs => %s)"
            " from generate_series(1, %s) g",
            (workspace, seconds_from_now, count),
        )


@pytest.mark.parametrize("tick_process", [False, True], ids=["tick_thread", "tick_process"])
def test_a_triggered_tick_sends_due_rows_once_each(database_url, tmp_path, tick_process):
    jwt = LocalJwt(tmp_path / "jwt-secret")
    provider = LogProvider({"quiet": True})
    local = LocalRuntime(
        database_url, Settings(), tick_interval=3600, jwt=jwt, batch_size=50,
        tick_process=tick_process,
    )  # fmt: skip
    local.runtime.providers.register("log", provider)
    with local:
        # Given a runtime whose first tick found nothing, and whose next is an hour away
        wait_for(lambda: len(local.ticks) == 1, timeout=30)
        assert local.ticks[0]["enqueued"] == 0
        if tick_process:
            assert local.tick_pid not in (None, os.getpid())
        # When 300 rows fall due and the tick is triggered
        insert_due(database_url, 300, 0.5)
        local.trigger_tick()
        wait_for(lambda: len(local.ticks) == 2, timeout=30)
        # Then that tick sent them all, through the runtime's own queue, and each fired once
        assert local.ticks[1]["enqueued"] == 300
        # (a duplicate would come from a message still on the queue: wait until none is)
        queue = local.queues.queue("log")
        wait_for(lambda: len(provider.deliveries) >= 300 and len(queue) == 0, timeout=30)
        assert len({d.action_id for d in provider.deliveries}) == len(provider.deliveries) == 300
        assert local.queues.queue("log").depth()["in_flight"] == 0
        pid = local.tick_pid
    # And stopping the runtime stops its tick process
    if tick_process:
        assert pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def spawned_children(pid: int) -> list[int]:
    """Processes `pid` started with multiprocessing's spawn (the tick's), not its
    resource tracker."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == pid and "spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    """Alive, and not a zombie no one has reaped yet."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_tick_process_ends_when_tickwork_dev_is_killed(dev_process):
    process, lines, _ = dev_process
    # Given `tickwork dev` and its tick's process, idle between ticks (its first ran at
    # start, before the demo's webhooks, due 2 s and more after it, arrived)
    read_until(process, lines, r"webhook .* arrived", 3, timeout=30)
    children = spawned_children(process.pid)
    assert len(children) == 1, children
    # When `tickwork dev` is killed, with no chance to stop its tick
    process.kill()
    process.wait()
    # Then the tick's process notices and ends too, instead of ticking on alone (its next
    # tick is a minute away)
    wait_for(lambda: not running(children[0]), timeout=15)
