"""The operator commands against a running local runtime, as a user runs them: `tickwork
actions`, `status` and `redrive` find `tickwork dev` through the data directory, answer with
the API's rules, and say how to start it when it is not there."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.waiting import wait_for
from tickwork import cli
from tickwork.local.auth import LocalJwt
from tickwork.local.errors import PortInUseError
from tickwork.local.paths import DevServer, data_dir, jwt_key_file, pgdata
from tickwork.local.runner import LocalRuntime
from tickwork.platform.config import Settings
from tickwork.platform.queues.memory import Message


@pytest.fixture
def dev(database_url, monkeypatch) -> Iterator[LocalRuntime]:
    """A local runtime recorded in the data directory, as `tickwork dev` records itself."""
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("TICKWORK_QUEUE_URLS", raising=False)
    root = data_dir()
    with LocalRuntime(database_url, Settings(), jwt=LocalJwt(jwt_key_file(root))) as local:
        DevServer(
            os.getpid(), local.api.url, local.receiver.url, database_url, True, [],
            sandbox_url=local.sandbox.url,
        ).write(root)  # fmt: skip
        yield local
    DevServer.clear(root, os.getpid())


def run(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys, *args: str) -> Any:
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def wait_for_status(capsys, action_id: str, status: str, timeout: float = 15) -> dict[str, Any]:
    shown: dict[str, Any] = {}

    def reached() -> dict[str, Any] | None:
        shown.update(run_json(capsys, "actions", "show", action_id, "--workspace", "Acme"))
        return dict(shown) if shown["status"] == status else None

    return wait_for(reached, timeout, interval=0.2, message=lambda: f"not {status}: {shown}")


def test_actions_schedule_list_show_cancel_retry_with_the_apis_rules(dev, conn, capsys):
    # Given a workspace and an admin made as the docs say
    assert (
        run(
            capsys,
            "token",
            "--workspace",
            "Acme",
            "--create",
            "--admin",
            "--timezone",
            "America/New_York",
        )[0]
        == 0
    )
    acme = ["--workspace", "Acme"]
    # When one action is scheduled 1 s ahead and one at a wall time New York skips
    soon = run_json(
        capsys,
        "actions",
        "schedule",
        *acme,
        "--type",
        "webhook",
        "--target",
        "primary",
        "--in",
        "1s",
        "--payload",
        '{"text": "hi"}',
    )
    skipped = run_json(
        capsys,
        "actions",
        "schedule",
        *acme,
        "--type",
        "webhook",
        "--target",
        "primary",
        "--thing",
        "dst",
        "--date",
        "2027-03-14",
        "--time",
        "02:30",
    )
    # Then the API's answers come back, saying how the wall time was read
    assert soon["resolved"] is None
    assert skipped["resolved"]["rule"] == "skipped_moved_forward"
    assert skipped["resolved"]["local"] == "2027-03-14T03:30:00-04:00"
    assert "moved forward by the 1 h gap" in skipped["resolved"]["note"]
    # And the first fires: published, found by the first 8 characters of its id
    assert wait_for_status(capsys, soon["id"][:8], "published")["id"] == soon["id"]
    # The calendar with no range says what it used: the next 31 days hold only the first
    page = run_json(capsys, "actions", "list", *acme)
    assert [a["id"] for a in page["items"]] == [soon["id"]]
    assert set(page["range"]) == {"from", "to"}
    page = run_json(capsys, "actions", "list", *acme, "--to", "2028-01-01T00:00:00Z")
    assert [a["id"] for a in page["items"]] == [soon["id"], skipped["id"]]
    code, out, _ = run(capsys, "actions", "list", *acme, "--status", "published")
    assert code == 0
    assert f"{soon['id'][:8]}  webhook" in out
    assert skipped["id"][:8] not in out
    # Cancel, twice (a no-op the second time), as the API does
    for _ in range(2):
        code, out, _ = run(capsys, "actions", "cancel", skipped["id"], *acme)
        assert (code, out.strip()) == (0, f"{skipped['id']} is now cancelled")
    # Retry: a failed one goes back to queued; a published one is refused with the API's words
    conn.execute(
        "update scheduled_actions set status = 'failed', error_code = 'provider_rejected',"
        " finished_at = now() where id = %s",
        (skipped["id"],),
    )
    code, out, _ = run(capsys, "actions", "retry", skipped["id"][:8], *acme)
    assert (code, out.strip()) == (0, f"{skipped['id']} is now queued")
    code, _, err = run(capsys, "actions", "retry", soon["id"], *acme)
    assert code == 1
    assert "HTTP 409 conflict: only failed actions can be retried; this one is published" in err


def test_refusals_are_the_apis_code_and_message(dev, capsys):
    assert run(capsys, "token", "--workspace", "Acme", "--create", "--admin")[0] == 0
    body = {"action_type": "webhook", "target_key": "nowhere", "publish_at": "2030-01-01T00:00:00Z"}
    token = LocalJwt(jwt_key_file(data_dir())).sign("local-user")
    ws = run_json(capsys, "actions", "list", "--workspace", "Acme")  # resolves the name
    assert ws["items"] == []
    workspace_id = (
        dev.runtime.db.connection()
        .execute("select id from workspaces where name = 'Acme'")
        .fetchone()[0]
    )
    direct = httpx.post(
        f"{dev.api.url}/v1/actions",
        json=body,
        headers={"Authorization": f"Bearer {token}", "X-Workspace-Id": str(workspace_id)},
    ).json()
    code, out, err = run(
        capsys,
        "actions",
        "schedule",
        "--workspace",
        "Acme",
        "--type",
        "webhook",
        "--target",
        "nowhere",
        "--at",
        "2030-01-01T00:00:00Z",
        "--json",
    )
    assert code == 1
    assert json.loads(out) == direct
    # the API's code and message, its field names read as the command's flags
    message = direct["error"]["message"].replace("target_key", "--target")
    assert "target_key" in direct["error"]["message"]
    assert f"HTTP 422 {direct['error']['code']}: {message}" in err
    # An id that is no action's
    code, _, err = run(capsys, "actions", "show", "00000000", "--workspace", "Acme")
    assert (code, "HTTP 404 not_found") == (1, err.split(":")[1].strip())


def test_cancel_all_and_retry_all_loop_over_the_cursor_and_print_the_counts(dev, conn, capsys):
    # Given an admin, a member, and five actions in a week, one of another type
    assert run(capsys, "token", "--workspace", "Acme", "--create", "--admin")[0] == 0
    assert run(capsys, "token", "--workspace", "Acme", "--user", "mel", "--create")[0] == 0
    acme = ["--workspace", "Acme"]
    for i in range(5):
        run_json(
            capsys, "actions", "schedule", *acme, "--type", "log" if i == 4 else "webhook",
            "--target", "primary", "--thing", f"t{i}", "--at", f"2030-01-0{i + 1}T09:00:00Z",
        )  # fmt: skip
    # When the webhooks are cancelled two at a time
    totals = run_json(capsys, "actions", "cancel-all", *acme, "--type", "webhook", "--limit", "2")
    # Then every call was made and the counts add up; the other type is left
    assert totals == {
        "matched": 4, "changed": 4, "skipped": 0, "refused": {}, "exited": 0,
        "paused_schedules": [], "calls": 2,
    }  # fmt: skip
    rows = conn.execute("select thing_id, status from scheduled_actions order by thing_id")
    assert rows.fetchall() == [(f"t{i}", "cancelled") for i in range(4)] + [("t4", "queued")]
    # Retry in bulk: failed rows in a range, as the API's admins only
    conn.execute(
        "update scheduled_actions set status = 'failed', error_code = 'provider_rejected',"
        " finished_at = now() where thing_id in ('t0', 't1', 't2')"
    )
    retry = ["actions", "retry-all", *acme, "--error-code", "provider_rejected",
             "--due-from", "2030-01-01T00:00:00Z", "--due-to", "2030-01-03T00:00:00Z"]  # fmt: skip
    code, _, err = run(capsys, *retry, "--user", "mel")
    assert code == 1
    assert "HTTP 403 forbidden: only a workspace admin can retry actions" in err
    code, out, _ = run(capsys, *retry)
    assert (code, out.strip()) == (0, "retried 2 of 2 matching; 0 skipped (moved on meanwhile)")
    # An empty filter is the API's refusal
    code, _, err = run(capsys, "actions", "cancel-all", *acme)
    assert code == 1
    assert "HTTP 422 invalid_input: a bulk cancel must name at least one criterion" in err


def test_cancel_with_a_parent_cancels_everything_pending_of_it_and_counts(dev, conn, capsys):
    # Given 12 pending actions of a tag, one sent, and one of another tag
    assert run(capsys, "token", "--workspace", "Acme", "--create", "--admin")[0] == 0
    acme = ["--workspace", "Acme"]
    ids = [
        run_json(capsys, "actions", "schedule", *acme, "--type", "webhook", "--target",
                 "primary", "--thing", f"t{i}", "--at", "2030-01-01T09:00:00Z")["id"]
        for i in range(14)
    ]  # fmt: skip
    conn.execute("update scheduled_actions set tags = '{podcast:42}' where id = any(%s::uuid[])",
                 (ids[:13],))  # fmt: skip
    conn.execute(
        "update scheduled_actions set status = 'published', finished_at = now()"
        " where id = %s::uuid",
        (ids[12],),
    )
    conn.execute("update scheduled_actions set tags = '{podcast:43}' where id = %s", (ids[13],))
    # When they are cancelled by tag, five a call
    code, out, err = run(capsys, "actions", "cancel", *acme, "--tag", "podcast:42",
                         "--limit", "5")  # fmt: skip
    # Then the totals add up, with a running count on stderr; the others are left
    assert (code, out.strip()) == (0, "cancelled 12 of 12 matching; 0 skipped (moved on meanwhile)")
    assert "... cancelled 5 of 5 matching" in err
    assert "... cancelled 10 of 10 matching" in err
    rows = conn.execute(
        "select status, count(*)::int from scheduled_actions group by status order by 1"
    )
    assert rows.fetchall() == [("cancelled", 12), ("published", 1), ("queued", 1)]
    # An id and a parent at once, or neither, is refused
    code, _, err = run(capsys, "actions", "cancel", *acme, ids[13], "--tag", "podcast:43")
    assert code == 2
    assert "give an action id, or a parent" in err
    # cancel-all takes the parents too, and the API's refusals come through
    code, _, err = run(capsys, "actions", "cancel-all", *acme, "--entity", "booking")
    assert code == 1
    assert "entity_type and entity_id together" in err


def test_status_and_redrive_reach_the_dev_process_queues(dev, capsys):
    # Given a dead letter in the running process's log queue
    queue = dev.queues.queue("log")
    body = json.dumps(
        {
            "id": "00000000-0000-0000-0000-000000000000",
            "type": "log",
            "due_at": "2026-01-01T00:00:00+00:00",
        }
    )
    queue.dead_letters.append(Message("dead-1", body, 0.0, 0.0, receive_count=5))
    # When status is asked, it shows it, from the dev process
    found = run_json(capsys, "status")
    assert found["queues_from"] == f"in-process, tickwork dev pid {os.getpid()}"
    assert found["queues"]["log"]["dead_letters"] == 1
    assert found["dispatch"]["from"] == f"the running tickwork dev, pid {os.getpid()}"
    # And where the running process listens, its provider sandbox included
    assert found["dev"] == {
        "pid": os.getpid(), "api_url": dev.api.url, "receiver_url": dev.receiver.url,
        "sandbox_url": dev.sandbox.url, "data_dir": str(data_dir()),
    }  # fmt: skip
    code, out, _ = run(capsys, "status")
    assert f"provider sandbox at {dev.sandbox.url}; data in {data_dir()}" in out
    # And redrive puts it back on its queue, where a dispatcher takes it (and drops it: no row)
    moved = run_json(capsys, "redrive")
    assert {r["action_type"]: r["moved"] for r in moved}["log"] == 1
    assert queue.dead_letters == []
    wait_for(lambda: len(queue) == 0, timeout=5)
    code, out, _ = run(capsys, "redrive")
    assert code == 0
    assert "log: 0 dead letter(s) back to the queue (in-process queue)" in out
    # A type with no queue is refused, naming the queues there are
    code, out, err = run(capsys, "redrive", "--type", "nosuch")
    assert (code, out) == (2, "")
    assert "tickwork: --type nosuch: no queue for that action type; the queues: " in err
    assert "log, " in err


def test_without_a_dev_process_the_commands_say_how_to_start_it(capsys, monkeypatch):
    monkeypatch.delenv("TICKWORK_QUEUE_URLS", raising=False)
    for args in (["actions", "list", "--workspace", "Acme"], ["redrive"], ["demo"]):
        code, _, err = run(capsys, *args)
        assert code == 2, args
        assert "no `tickwork dev` is running for data directory" in err
        assert "start it with `make dev`" in err
    # A record left by a process that died is called stale, with the same advice
    gone = subprocess.Popen(["true"])
    gone.wait()
    DevServer(gone.pid, "http://127.0.0.1:9", "", "postgresql://x", True, []).write(data_dir())
    code, _, err = run(capsys, "redrive")
    assert code == 2
    assert f"(pid {gone.pid}) is no longer running; start it with `make dev`" in err


def busy_port() -> socket.socket:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder


PORT_FLAGS = [
    ("--api-port", "the HTTP API"),
    ("--receiver-port", "the webhook receiver"),
    ("--sandbox-port", "the provider sandbox"),
]


@pytest.mark.parametrize(("flag", "what"), PORT_FLAGS)
def test_a_busy_port_names_itself_and_its_flag(flag, what, database_url, capsys):
    with busy_port() as holder:
        port = holder.getsockname()[1]
        options = {
            "--api-port": "0",
            "--receiver-port": "0",
            "--sandbox-port": "0",
            flag: str(port),
        }
        args = ["dev", "--database-url", database_url, "--no-demo"]
        code, _, err = run(capsys, *args, *[x for kv in options.items() for x in kv])
        assert code == 2
        assert f"port {port} for {what} is already in use" in err
        assert f"choose another port with {flag} PORT" in err
        assert "Traceback" not in err
        with pytest.raises(PortInUseError):
            LocalRuntime(database_url, Settings(), **{flag[2:].replace("-", "_"): port})


def test_a_second_dev_on_the_same_data_dir_is_refused(database_url, capsys):
    DevServer(os.getpid(), "http://127.0.0.1:8788", "", database_url, True, []).write(data_dir())
    code, _, err = run(capsys, "dev", "--database-url", database_url)
    assert code == 2
    assert f"`tickwork dev` is already running for {data_dir()} (pid {os.getpid()}" in err


@pytest.mark.parametrize(("flag", "what"), PORT_FLAGS)
def test_a_second_dev_checks_its_ports_before_it_makes_a_database(
    flag, what, tmp_path, capsys, monkeypatch
):
    # Given a port held (by the first `tickwork dev`, say) and a data directory of its own
    monkeypatch.delenv("DATABASE_URL", raising=False)
    root = tmp_path / "second"
    with busy_port() as holder:
        port = holder.getsockname()[1]
        options = {
            "--api-port": "0",
            "--receiver-port": "0",
            "--sandbox-port": "0",
            flag: str(port),
        }
        # When a second one starts with no database of its own yet
        args = ["dev", "--data-dir", str(root), "--no-demo"]
        code, _, err = run(capsys, *args, *[x for kv in options.items() for x in kv])
    # Then it stops at once, naming the port and the flag, and has made no database
    assert code == 2
    assert f"port {port} for {what} is already in use" in err
    assert f"choose another port with {flag} PORT" in err
    assert "embedded Postgres" not in err
    assert not pgdata(root).exists()


def test_schedule_an_email_through_a_connection_for_a_recipient(dev, capsys, tmp_path):
    # Given an admin, a connection to the sandbox and a recipient, made with `tickwork api`
    assert run(capsys, "token", "--workspace", "Acme", "--create", "--admin")[0] == 0
    acme = ["--workspace", "Acme"]
    spec = tmp_path / "postmark.json"
    spec.write_text(json.dumps({
        "name": "Mail", "provider": "postmark", "settings": {"from": "a@example.com"},
        "credentials": {"server_token": "local-sandbox-token"},
    }))  # fmt: skip
    connection = run_json(capsys, "api", "POST", "/v1/connections", *acme, "--data", f"@{spec}")
    quiet_all_day = {"timezone": "Asia/Tokyo", "quiet_hours": [{"start": "00:00", "end": "23:59"}]}
    run_json(capsys, "api", "PUT", "/v1/recipients/ann", *acme, "--data", json.dumps(quiet_all_day))
    message = {"to": "ann@example.com", "subject": "Hi", "text": "Hello"}
    email = ["actions", "schedule", *acme, "--type", "email", "--target", "ann", "--in", "1s",
             "--payload", json.dumps(message)]  # fmt: skip
    # When an email is scheduled without a connection, the refusal names the flag
    code, _, err = run(capsys, *email)
    assert code == 1
    assert "name the postmark connection to send through (--connection)" in err
    assert "connection_id" not in err
    # And a connection nobody has is named with the ones there are
    code, _, err = run(capsys, *email, "--connection", "Nope")
    assert code == 2
    assert "--connection Nope: no connection of this workspace has that name or id" in err
    assert "'Mail'" in err
    # When it names the connection (by name) and the recipient, transactional
    sent = run_json(capsys, *email, "--connection", "Mail", "--recipient", "ann",
                    "--transactional")  # fmt: skip
    # Then the action carries them, and the quiet hours did not move it
    assert (sent["connection_id"], sent["recipient_id"], sent["transactional"]) == (
        connection["id"], "ann", True)  # fmt: skip
    assert sent["original_publish_at"] is None
    assert wait_for_status(capsys, sent["id"], "published")["connection_id"] == connection["id"]
    assert [a.provider for a in dev.sandbox.arrivals] == ["email"]
    # --quiet prints the id alone, for `ID=$(...)`
    code, out, _ = run(capsys, *email, "--connection", connection["id"], "--quiet")
    assert code == 0
    assert re.fullmatch(r"[0-9a-f-]{36}\n", out)


def test_api_calls_any_route_with_the_token_and_the_workspace(dev, capsys, tmp_path):
    assert run(capsys, "token", "--workspace", "Acme", "--create", "--admin")[0] == 0
    acme = ["--workspace", "Acme"]
    # A route that needs no workspace, and a query string
    assert run_json(capsys, "api", "get", "/v1/openapi.json")["openapi"].startswith("3.")
    # A body from a file, then stdin-free JSON; the answer is the API's JSON
    body = tmp_path / "schedule.json"
    body.write_text(json.dumps({"action_type": "webhook", "target_key": "primary",
                                "rrule": "FREQ=DAILY;BYHOUR=9",
                                "timezone": "Europe/Paris"}))  # fmt: skip
    code, out, _ = run(capsys, "api", "POST", "/v1/recurring", *acme, "--data", f"@{body}")
    assert code == 0
    created = json.loads(out)
    assert created["status"] == "active"
    found = run_json(capsys, "api", "GET", "/v1/recurring?status=active", *acme)
    assert [s["id"] for s in found["items"]] == [created["id"]]
    # A refusal: the body on stdout, its code and message on stderr, exit 1
    code, out, err = run(capsys, "api", "POST", "/v1/recurring", *acme, "--data", "{}")
    assert code == 1
    assert json.loads(out)["error"]["code"] == "invalid_input"
    assert "tickwork: HTTP 422 invalid_input: " in err
    # Without the workspace header, the API says so
    code, _, err = run(capsys, "api", "GET", "/v1/recurring")
    assert code == 1
    assert "HTTP 4" in err
    # Bad input is refused before any call
    code, _, err = run(capsys, "api", "POST", "/v1/recurring", *acme, "--data", "{x")
    assert (code, err.split(":")[1].strip()) == (2, "--data is not JSON")
    code, _, err = run(capsys, "api", "POST", "/v1/recurring", *acme, "--data", "@/nope.json")
    assert code == 2
    assert "--data @/nope.json: cannot read /nope.json" in err


def test_recurring_rules_recipients_and_connections_have_verbs(dev, capsys):
    assert run(capsys, "token", "--workspace", "Acme", "--create", "--admin")[0] == 0
    acme = ["--workspace", "Acme"]
    daily = "FREQ=DAILY;BYHOUR=9;BYMINUTE=0"
    schedule = run_json(capsys, "api", "POST", "/v1/recurring", *acme, "--data", json.dumps({
        "action_type": "webhook", "target_key": "primary", "rrule": daily,
        "timezone": "Europe/Paris"}))  # fmt: skip
    rule = run_json(capsys, "api", "POST", "/v1/rules", *acme, "--data", json.dumps({
        "name": "Welcome", "trigger": {"type": "event", "event": "user.signed_up"},
        "action": {"action_type": "webhook", "target_key": "primary"}}))  # fmt: skip
    run_json(capsys, "api", "PUT", "/v1/recipients/ann", *acme, "--data",
             '{"timezone": "Asia/Tokyo", "caps": {"sms": 2}}')  # fmt: skip
    run_json(capsys, "api", "POST", "/v1/connections", *acme, "--data", json.dumps({
        "name": "Chat", "provider": "slack", "settings": {"default_channel": "#general"},
        "credentials": {"bot_token": "xoxb-local-sandbox-token"}}))  # fmt: skip
    short = schedule["id"][:8]
    # Lists, as tables and as the API's JSON
    code, out, _ = run(capsys, "recurring", "list", *acme)
    assert code == 0
    assert out.splitlines()[0].split()[:4] == ["id", "type", "target", "status"]
    assert out.splitlines()[1].split()[:5] == [short, "webhook", "primary", "active", daily]
    assert [s["id"] for s in run_json(capsys, "recurring", "list", *acme)["items"]] == [
        schedule["id"]]  # fmt: skip
    # Pause and resume by the first 8 characters of the id
    code, out, _ = run(capsys, "recurring", "pause", short, *acme, "--reason", "holiday")
    assert (code, out.strip()) == (0, f"schedule {schedule['id']} is now paused")
    assert run_json(capsys, "recurring", "show", short, *acme)["paused_reason"] == "holiday"
    assert run_json(capsys, "recurring", "list", *acme, "--status", "paused")["items"]
    code, out, _ = run(capsys, "recurring", "resume", schedule["id"], *acme)
    assert (code, out.strip()) == (0, f"schedule {schedule['id']} is now active")
    code, out, _ = run(capsys, "recurring", "show", short, *acme)
    assert "next occurrences (local):" in out
    assert "T09:00:00+01:00" in out or "T09:00:00+02:00" in out
    code, out, _ = run(capsys, "rules", "list", *acme)
    assert f"{rule['id'][:8]}  Welcome" in out
    assert "event user.signed_up" in out
    assert run_json(capsys, "rules", "show", rule["id"][:8], *acme)["name"] == "Welcome"
    code, out, _ = run(capsys, "recipients", "list", *acme)
    assert out.splitlines()[1].split() == ["ann", "Asia/Tokyo", "-", "sms", "2", "0"]
    code, out, _ = run(capsys, "recipients", "show", "ann", *acme)
    assert 'caps                  {"sms": 2}' in out
    code, out, _ = run(capsys, "connections", "list", *acme)
    assert "Chat" in out
    assert "slack" in out
    # Not verified yet: the list prints the command that verifies it, which works as printed
    assert "not yet" in out
    [verify] = [line.strip() for line in out.splitlines() if line.strip().startswith("tickwork")]
    assert verify.endswith("/verify --workspace Acme --user local-user")
    code, answer, err = run(capsys, *shlex.split(verify)[1:])
    assert (code, json.loads(answer)["ok"]) == (0, True), err
    assert "not yet" not in run(capsys, "connections", "list", *acme)[1]
    code, out, _ = run(capsys, "connections", "show", "Chat", *acme)
    assert 'settings              {"default_channel": "#general"}' in out
    # No command prints a Python repr
    for args in (["recurring", "show", short], ["rules", "show", rule["id"]],
                 ["recipients", "show", "ann"], ["connections", "show", "Chat"],
                 ["actions", "list"]):  # fmt: skip
        code, out, _ = run(capsys, *args, *acme)
        assert code == 0, args
        assert "{'" not in out
        assert "True" not in out
        assert "None" not in out


def test_tags_on_the_command_line_schedule_list_show_and_cancel(dev, capsys):
    # Given an admin, and actions scheduled with tags from the command line
    assert run(capsys, "token", "--workspace", "Acme", "--create", "--admin")[0] == 0
    acme = ["--workspace", "Acme"]
    at = ["--type", "webhook", "--target", "primary", "--at", "2030-01-01T09:00:00Z"]
    tagged = run_json(capsys, "actions", "schedule", *acme, *at, "--thing", "a",
                      "--tag", "podcast:42", "--tag", "season-3")  # fmt: skip
    other = run_json(capsys, "actions", "schedule", *acme, *at, "--thing", "b",
                     "--tag", "podcast:43")  # fmt: skip
    assert tagged["tags"] == ["podcast:42", "season-3"]
    # When the calendar is listed by tag, and whole
    until = ["--to", "2031-01-01T00:00:00Z"]
    page = run_json(capsys, "actions", "list", *acme, *until, "--tag", "podcast:42")
    assert [a["id"] for a in page["items"]] == [tagged["id"]]
    code, out, _ = run(capsys, "actions", "list", *acme, *until)
    # Then each line shows its tags
    assert code == 0
    assert out.splitlines()[1].split() == [
        "id", "type", "target", "thing", "due", "(UTC)", "status", "tags", "error"]  # fmt: skip
    lines = {line[:8]: line for line in out.splitlines()[2:]}
    assert "podcast:42,season-3" in lines[tagged["id"][:8]]
    assert "podcast:43" in lines[other["id"][:8]]
    # A bad tag is the API's refusal
    code, _, err = run(capsys, "actions", "schedule", *acme, *at, "--tag", "has space")
    assert code == 1
    assert "HTTP 422 invalid_input" in err
    # A tagged recurring schedule shows its tags, and a cancel by tag pauses it, saying so
    schedule = run_json(capsys, "api", "POST", "/v1/recurring", *acme, "--data", json.dumps({
        "action_type": "webhook", "target_key": "primary", "rrule": "FREQ=DAILY;BYHOUR=9",
        "timezone": "Europe/Paris", "tags": ["podcast:42"]}))  # fmt: skip
    code, out, _ = run(capsys, "recurring", "list", *acme)
    assert out.splitlines()[0].split()[-1] == "tags"
    assert out.splitlines()[1].split()[-1] == "podcast:42"
    code, out, _ = run(capsys, "actions", "cancel", *acme, "--tag", "podcast:42")
    assert code == 0
    assert out.strip().endswith(
        f"; paused 1 recurring schedule ({schedule['id']}): they would have made more"
    )
    shown = run_json(capsys, "recurring", "show", schedule["id"][:8], *acme)
    assert (shown["status"], shown["paused_reason"]) == (
        "paused", "a bulk cancel by local-user of everything tagged podcast:42")  # fmt: skip


def test_why_prints_every_time_in_one_named_zone(dev, capsys):
    assert run(capsys, "token", "--workspace", "Acme", "--create", "--admin")[0] == 0
    acme = ["--workspace", "Acme"]
    created = run_json(capsys, "actions", "schedule", *acme, "--type", "webhook", "--target",
                       "primary", "--at", "2030-01-01T09:00:00Z")  # fmt: skip
    # By default the workspace's zone (UTC here), named
    code, out, _ = run(capsys, "actions", "why", created["id"][:8], *acme)
    assert code == 0
    assert out.splitlines()[0].endswith("; times in UTC:")
    # --timezone: the header, the left column and the sentences in it
    code, out, _ = run(capsys, "actions", "why", created["id"], *acme, "--timezone", "Asia/Tokyo")
    first, *steps = out.splitlines()
    assert first.endswith("JST); times in Asia/Tokyo:")
    due = next(line for line in steps if "Due at" in line)
    assert due.split()[:3] == ["2030-01-01", "18:00:00", "JST"]
    assert "Due at 2030-01-01 18:00:00 JST, in " in due
    assert "UTC" not in out
    # An unknown zone is the API's refusal, named as the flag
    code, _, err = run(capsys, "actions", "why", created["id"], *acme, "--timezone", "Mars/X")
    assert code == 1
    assert "HTTP 422 invalid_timezone" in err
