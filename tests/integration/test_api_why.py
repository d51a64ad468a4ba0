"""GET /v1/actions/{id}/why through the API's Lambda handler on a real Postgres: each kind of
step the stored data can produce (the row's times, its change log, its ledger, the
deployment's switches), and the same tenancy and 404s as GET /v1/actions/{id}."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest

from tests.conftest import make_workspace
from tests.handlers import FakeLambdaContext, load_handler
from tickwork import runtime
from tickwork.actions import model, store
from tickwork.actions.model import Action, Attempt, Claimed, NewAction
from tickwork.engine.admission import admit
from tickwork.engine.tick import run_tick
from tickwork.local.api_server import http_api_event
from tickwork.platform.config import ActionTypeConfig, Settings
from tickwork.platform.db import Database, local_api_login
from tickwork.platform.queues.memory import InProcessQueues
from tickwork.providers import ProviderRegistry
from tickwork.providers.base import Found, LookupResult, Outcome, Via
from tickwork.providers.log import LogProvider
from tickwork.workspaces import add_member

TYPES = {
    "log": ActionTypeConfig(provider="log"),
    "webhook": ActionTypeConfig(provider="log"),  # sent by a stub that can be asked (below)
}


class Askable:
    """A provider with a lookup: the resolver may settle its ambiguous rows."""

    idempotent = True
    io_bound = False
    lookup_retention = timedelta(days=1)
    lookup_grace = timedelta(0)

    def __init__(self, have: dict[str, str] | None = None) -> None:
        self.have = have or {}

    def send(self, action: Claimed, via: Via | None = None) -> Outcome:
        raise AssertionError("nothing is sent in these tests")

    def lookup(self, action: Claimed, via: Via | None = None) -> LookupResult:
        return Found(self.have[str(action.id)], "in the provider's log")


@pytest.fixture
def install(database_url) -> Iterator[Callable[..., runtime.Runtime]]:
    """Installs the API's runtime with the given settings (the kill switches among them)."""
    made: list[runtime.Runtime] = []

    def make(**options: Any) -> runtime.Runtime:
        settings = Settings(database_url=database_url, action_types=TYPES, **options)
        engine = runtime.Runtime(
            settings=settings,
            db=Database(database_url),
            queues=InProcessQueues(visibility_timeout=30),
            providers=ProviderRegistry(settings),
            api_db=Database(local_api_login(database_url)),
        )
        engine.providers.register("log", LogProvider({"quiet": True}))
        engine.providers.register("webhook", Askable())
        runtime.install(engine)
        made.append(engine)
        return engine

    yield make
    runtime.install(None)
    for engine in made:
        engine.db.close()
        engine.api_database().close()


@pytest.fixture
def api(install) -> runtime.Runtime:
    return install()


@pytest.fixture
def acme(conn) -> UUID:
    """Workspace A (UTC), where alice is an admin."""
    workspace = make_workspace(conn, "Acme")
    add_member(conn, workspace, "alice", "admin")
    return workspace


def call(method: str, path: str, workspace: UUID, body: dict | None = None,
         user: str = "alice") -> tuple[int, Any]:  # fmt: skip
    headers = {"x-workspace-id": str(workspace), "content-type": "application/json"}
    event = http_api_event(
        method, path, headers, json.dumps(body) if body else None, {"sub": user}, "127.0.0.1"
    )
    answer = load_handler("api").handler(event, FakeLambdaContext())
    return answer["statusCode"], json.loads(answer["body"])


def why(workspace: UUID, action_id: UUID | str, user: str = "alice") -> dict[str, Any]:
    status, body = call("GET", f"/v1/actions/{action_id}/why", workspace, user=user)
    assert status == 200, body
    return body


def codes(answer: dict[str, Any]) -> list[str]:
    return [step["code"] for step in answer["steps"]]


def step(answer: dict[str, Any], code: str) -> dict[str, Any]:
    [found] = [s for s in answer["steps"] if s["code"] == code]
    return found


def later(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def schedule(workspace: UUID, action_type: str = "log", **fields: Any) -> dict[str, Any]:
    body = {"action_type": action_type, "target_key": "t", "publish_at": later(3600),
            "payload": {}} | fields  # fmt: skip
    status, created = call("POST", "/v1/actions", workspace, body)
    assert status == 201, created
    return created


def stored(conn, action_id: UUID | str) -> Action:
    row = conn.execute(
        "select workspace_id from scheduled_actions where id = %s", (action_id,)
    ).fetchone()
    found = store.get(conn, row[0], UUID(str(action_id)))
    assert found is not None
    return found


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


def claimed(conn, action_id: str, action_type: str = "log") -> Claimed:
    """The row claimed by a dispatcher (ahead of its time, as a batch's sibling may be)."""
    [row] = store.claim(conn, action_type, [UUID(action_id)], early_tolerance=7200)
    return row


def finished(conn, outcome: model.Finalization) -> None:
    assert store.finalize(conn, [outcome])


def call_of(number: int, outcome: str, **fields: Any) -> Attempt:
    now = time.time()
    return Attempt(number, now - 0.2, now, outcome, **fields)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ steps


def test_a_row_due_later_says_who_made_it_and_when_it_is_due(api, acme):
    created = schedule(acme, thing_id="post-1")
    answer = why(acme, created["id"])
    assert (answer["id"], answer["status"]) == (created["id"], "queued")
    assert codes(answer) == ["created", "due_later"]
    made = step(answer, "created")
    assert made["details"] == {"source": "api", "created_by": "alice"}
    assert made["text"].startswith("Created through the API by alice, for ")
    due = step(answer, "due_later")
    assert instant(due["at"]) == instant(created["publish_at"])
    assert due["text"].startswith("Due at ")
    assert " UTC, in 59 min." in due["text"] or " UTC, in 1 h." in due["text"]


def test_quiet_hours_moving_a_row_are_told_with_both_times(api, acme):
    nights = [{"start": "21:00", "end": "08:00"}]
    status, body = call(
        "PUT", "/v1/recipients/ann", acme, {"timezone": "UTC", "quiet_hours": nights}
    )
    assert status in (200, 201), body
    day = (datetime.now(UTC) + timedelta(days=2)).date()
    asked = datetime(day.year, day.month, day.day, 23, 30, tzinfo=UTC)
    created = schedule(acme, recipient_id="ann", publish_at=asked.isoformat())
    moved = step(why(acme, created["id"]), "quiet_hours")
    goes = asked + timedelta(hours=8, minutes=30)
    assert moved["text"] == (
        f"Moved by the recipient's quiet hours from {asked:%Y-%m-%d} 23:30:00 UTC to"
        f" {goes:%Y-%m-%d} 08:00:00 UTC."
    )
    assert instant(moved["details"]["old_at"]) == asked
    assert instant(moved["details"]["new_at"]) == goes
    assert instant(step(why(acme, created["id"]), "due_later")["at"]) == goes


def test_a_due_row_waits_for_the_tick_then_in_its_queue(api, acme, conn):
    row = store.insert(conn, acme, NewAction(
        action_type="log", target_key="t", publish_at=datetime.now(UTC) - timedelta(seconds=5),
    )).action  # fmt: skip
    waiting = step(why(acme, row.id), "waiting_for_tick")
    assert instant(waiting["at"]) == row.publish_at
    assert "the next tick (every minute) sends it to its queue" in waiting["text"]
    run_tick(conn, api.queues, api.settings)
    # (the tick's pass writes no time on the row: the pass that reached it is noted)
    passed = conn.execute(
        "select tickwork_passed_at(action_type, due_at, id) from action_queue where id = %s",
        (row.id,),
    ).fetchone()
    assert passed is not None
    enqueued = passed[0]
    assert enqueued is not None
    answer = why(acme, row.id)
    assert codes(answer) == ["created", "in_queue"]
    queued = step(answer, "in_queue")
    assert instant(queued["at"]) == enqueued
    assert "in the log queue since" in queued["text"]
    assert "waiting for a dispatcher to claim it" in queued["text"]


def test_a_claimed_row_waits_for_its_provider(api, acme, conn):
    created = schedule(acme)
    claimed(conn, created["id"])
    answer = why(acme, created["id"])
    assert (answer["status"], codes(answer)) == ("submitted", ["created", "claimed"])
    claim = step(answer, "claimed")
    assert instant(claim["at"]) == stored(conn, created["id"]).submitted_at
    assert claim["text"].endswith("(attempt 1): waiting for the provider's answer.")
    # a claim older than the stuck timeout (its dispatcher is gone): the tick will fail it
    conn.execute(
        "update scheduled_actions set submitted_at = now() - interval '20 minutes' where id = %s",
        (created["id"],),
    )
    stuck = step(why(acme, created["id"]), "stuck_soon")
    assert "the next tick fails it as stuck, and it is not sent again" in stuck["text"]


def test_a_row_backing_off_names_its_attempt_error_and_next_time(api, acme, conn):
    created = schedule(acme)
    row = claimed(conn, created["id"])
    next_at = datetime.now(UTC) + timedelta(seconds=90)
    call = call_of(
        1, "transient", code="service_unavailable", excerpt="HTTP 503 from https://x.example"
    )
    finished(conn, model.requeued(row.id, next_at, "HTTP 503 from https://x.example")._replace(
        attempt=call))  # fmt: skip
    answer = why(acme, created["id"])
    assert codes(answer) == ["created", "attempt", "backing_off", "due_later"]
    attempt = step(answer, "attempt")
    assert attempt["text"] == (
        "Attempt 1 did not go through (the provider provably did not take it):"
        " service_unavailable; HTTP 503 from https://x.example."
    )
    backing = step(answer, "backing_off")
    assert instant(backing["at"]) == next_at
    assert backing["details"]["attempt_count"] == 1
    assert backing["details"]["error_code"] == "service_unavailable"
    assert backing["text"].startswith(
        "Backing off after attempt 1: HTTP 503 from https://x.example; the next attempt is due at"
    )


def test_a_published_row_gives_its_provider_id_and_time(api, acme, conn):
    created = schedule(acme)
    row = claimed(conn, created["id"])
    finished(conn, model.published(row.id, "msg-42"))
    answer = why(acme, created["id"])
    assert (answer["status"], codes(answer)) == ("published", ["created", "published"])
    done = step(answer, "published")
    assert instant(done["at"]) == stored(conn, created["id"]).finished_at
    assert done["details"]["provider_id"] == "msg-42"
    assert done["text"].endswith("by attempt 1 (provider id msg-42).")


def ambiguous(conn, created: dict[str, Any], action_type: str) -> None:
    row = claimed(conn, created["id"], action_type)
    outcome = model.failed(row.id, "ambiguous", "read timeout from the endpoint")
    finished(conn, outcome._replace(attempt=call_of(1, "ambiguous", excerpt="read timeout")))


def test_a_failed_ambiguous_row_waits_for_the_resolver_or_a_person(api, acme, conn):
    askable = schedule(acme, "webhook")
    ambiguous(conn, askable, "webhook")
    answer = why(acme, askable["id"])
    assert (answer["status"], codes(answer)) == (
        "failed", ["created", "attempt", "failed", "awaiting_resolver"])  # fmt: skip
    assert step(answer, "failed")["details"]["error_code"] == "ambiguous"
    assert step(answer, "attempt")["details"]["excerpt"] == "read timeout"
    assert "Waiting for the resolver" in step(answer, "awaiting_resolver")["text"]
    # a provider with no lookup: a person decides
    silent = schedule(acme, "log")
    ambiguous(conn, silent, "log")
    person = step(why(acme, silent["id"]), "needs_person")
    assert "offers no lookup" in person["text"]


def test_an_ambiguous_row_the_resolver_settled_says_so(api, acme, conn):
    created = schedule(acme, "webhook")
    ambiguous(conn, created, "webhook")
    api.providers.register("webhook", Askable({created["id"]: "p-7"}))
    status, resolved = call("POST", f"/v1/actions/{created['id']}/resolve", acme)
    assert (status, resolved["verdict"]) == (200, "delivered"), resolved
    answer = why(acme, created["id"])
    assert codes(answer) == ["created", "attempt", "resolved_delivered", "published"]
    assert step(answer, "resolved_delivered")["text"].startswith(
        "The resolver found it at the provider: the provider has it"
    )
    done = step(answer, "published")
    assert "by the resolver, which found it at the provider (provider id p-7)" in done["text"]


def test_a_refused_row_can_be_retried_and_then_says_so(api, acme, conn):
    created = schedule(acme)
    row = claimed(conn, created["id"])
    refused = model.failed(row.id, "provider_rejected", "Postmark HTTP 422: inactive recipient")
    finished(conn, refused._replace(attempt=call_of(1, "rejected", code="406")))
    answer = why(acme, created["id"])
    assert codes(answer) == ["created", "attempt", "failed", "retry_possible"]
    assert step(answer, "failed")["text"].endswith(
        "after attempt 1 (provider_rejected): Postmark HTTP 422: inactive recipient."
    )
    assert "0 of 5 retries used" in step(answer, "retry_possible")["text"]
    status, _ = call("POST", f"/v1/actions/{created['id']}/retry", acme)
    assert status == 200
    again = why(acme, created["id"])
    assert again["status"] == "queued"
    assert codes(again)[:3] == ["created", "attempt", "retried"]
    assert len(codes(again)) == 4  # the retry is told once, in the history
    assert codes(again)[3] in ("waiting_for_tick", "in_queue")  # due now


def test_an_admins_retry_is_a_step_between_the_attempts_with_who_and_when(api, acme, conn):
    # Given an action refused by attempt 1, then retried by alice
    created = schedule(acme)
    row = claimed(conn, created["id"])
    refused = model.failed(row.id, "provider_rejected", "HTTP 422: inactive recipient")
    finished(conn, refused._replace(attempt=call_of(1, "rejected", code="406")))
    before = datetime.now(UTC)
    status, retried = call("POST", f"/v1/actions/{created['id']}/retry", acme)
    assert status == 200, retried
    # When attempt 2 publishes it
    finished(conn, model.published(claimed(conn, created["id"]).id, "msg-2"))
    # Then the steps read in order, the retry with who and when between the attempts
    answer = why(acme, created["id"])
    assert codes(answer) == ["created", "attempt", "retried", "published"]
    retry = step(answer, "retried")
    assert before <= instant(retry["at"]) <= datetime.now(UTC)
    assert retry["details"]["actor"] == "alice"
    assert retry["text"].startswith(
        "Retried by alice (retry 1 of 5 after provider_rejected): due again at "
    )
    assert step(answer, "published")["text"].endswith("by attempt 2 (provider id msg-2).")
    # And the change log shows it too
    status, detail = call("GET", f"/v1/actions/{created['id']}", acme)
    assert [(c["kind"], c["actor"]) for c in detail["changes"]] == [("retry", "alice")]


def test_a_bulk_retry_is_told_as_a_step_too(api, acme, conn):
    created = schedule(acme)
    row = claimed(conn, created["id"])
    finished(conn, model.failed(row.id, "provider_rejected", "no")._replace(
        attempt=call_of(1, "rejected")))  # fmt: skip
    status, body = call("POST", "/v1/actions/bulk-retry", acme, {"error_code": "provider_rejected"})
    assert (status, body["changed"]) == (200, 1), body
    retry = step(why(acme, created["id"]), "retried")
    assert retry["text"].startswith("Retried by alice (retry 1 of 5 after provider_rejected)")


def test_the_answer_names_the_one_zone_its_sentences_use(api, acme):
    # The workspace's zone by default (UTC here)
    plain = schedule(acme)
    answer = why(acme, plain["id"])
    assert answer["timezone"] == "UTC"
    assert step(answer, "due_later")["text"].startswith("Due at ")
    assert " UTC, in " in step(answer, "due_later")["text"]
    # The zone the action was scheduled in, when it was given a wall time in one
    day = (datetime.now(UTC) + timedelta(days=3)).date().isoformat()
    body = {"action_type": "log", "target_key": "t", "payload": {}, "date": day,
            "time": "09:00", "timezone": "Europe/Paris"}  # fmt: skip
    status, paris = call("POST", "/v1/actions", acme, body)
    assert status == 201, paris
    there = datetime.fromisoformat(f"{day}T09:00").replace(tzinfo=ZoneInfo("Europe/Paris"))
    answer = why(acme, paris["id"])
    assert answer["timezone"] == "Europe/Paris"
    assert f"Due at {there:%Y-%m-%d %H:%M:%S %Z}, in " in step(answer, "due_later")["text"]
    # The viewer's, when asked: every sentence's times in it
    status, tokyo = call("GET", f"/v1/actions/{paris['id']}/why?timezone=Asia/Tokyo", acme)
    assert (status, tokyo["timezone"]) == (200, "Asia/Tokyo")
    seen = there.astimezone(ZoneInfo("Asia/Tokyo"))
    assert f"Due at {seen:%Y-%m-%d %H:%M:%S} JST, in " in step(tokyo, "due_later")["text"]
    assert f"{there:%Z}" not in json.dumps(tokyo["steps"])
    # An unknown zone is the documented 422
    status, refused = call("GET", f"/v1/actions/{paris['id']}/why?timezone=Mars/Olympus", acme)
    assert (status, refused["error"]["code"]) == (422, "invalid_timezone")


def test_a_cancelled_row_names_who_cancelled_it(api, acme, conn):
    add_member(conn, acme, "bob", "member")
    created = schedule(acme)
    status, _ = call("POST", f"/v1/actions/{created['id']}/cancel", acme, user="bob")
    assert status == 200
    answer = why(acme, created["id"], user="alice")
    assert (answer["status"], codes(answer)) == ("cancelled", ["created", "cancelled"])
    cancelled = step(answer, "cancelled")
    assert cancelled["text"] == "Cancelled by bob."
    assert cancelled["details"]["actor"] == "bob"


def test_a_reschedule_links_both_rows(api, acme):
    old = schedule(acme)
    new_time = later(7200)
    status, new = call(
        "POST", f"/v1/actions/{old['id']}/reschedule", acme, {"publish_at": new_time}
    )
    assert status == 200, new
    before = why(acme, old["id"])
    assert (before["status"], codes(before)) == ("cancelled", ["created", "rescheduled"])
    moved = step(before, "rescheduled")
    assert moved["details"]["rescheduled_to"] == new["id"]
    assert moved["text"].startswith("Rescheduled by alice to ")
    assert moved["text"].endswith(f": replaced by action {new['id']}.")
    after = why(acme, new["id"])
    assert codes(after) == ["created", "rescheduled_from", "due_later"]
    lineage = step(after, "rescheduled_from")
    assert lineage["details"]["rescheduled_from"] == old["id"]
    assert lineage["details"]["actor"] == "alice"
    assert instant(lineage["details"]["old_at"]) == instant(old["publish_at"])
    assert instant(lineage["details"]["new_at"]) == instant(new["publish_at"])
    assert lineage["text"].startswith(f"It replaces action {old['id']}, which alice rescheduled")


def test_a_paused_type_and_the_kill_switch_hold_a_row(install, acme):
    install(paused_action_types=frozenset({"log"}))
    created = schedule(acme)
    held = why(acme, created["id"])
    assert codes(held)[-1] == "held_paused_type"
    assert "Its action type 'log' is paused" in held["steps"][-1]["text"]
    install(dispatch_enabled=False)
    off = why(acme, created["id"])
    assert codes(off) == ["created", "due_later", "held_kill_switch"]
    assert off["steps"][-1]["at"] is None
    install()
    assert codes(why(acme, created["id"])) == ["created", "due_later"]


def test_a_recipients_cap_defers_a_row_and_says_until_when(api, acme, conn):
    status, body = call("PUT", "/v1/recipients/ann", acme, {"timezone": "UTC", "caps": {"log": 1}})
    assert status in (200, 201), body
    first, second = (schedule(acme, recipient_id="ann", thing_id=f"t{n}") for n in (1, 2))
    for created in (first, second):  # one at a time: the first takes the day's only slot
        [row] = store.claim(conn, "log", [UUID(created["id"])], early_tolerance=7200)
        if admit(conn, [row]):  # the dispatcher's admission, as after its claim
            finished(conn, model.published(row.id, "ok"))
    answer = why(acme, second["id"])
    assert codes(answer) == ["created", "deferred_cap", "due_later"]
    deferred = step(answer, "deferred_cap")
    assert "the recipient's cap of 1 log a day is reached" in deferred["text"]
    assert instant(step(answer, "due_later")["at"]) == instant(deferred["details"]["new_at"])
    assert instant(deferred["details"]["new_at"]) > datetime.now(UTC)


# ---------------------------------------------------------------------------- tenancy


def test_another_workspace_gets_the_same_404_as_for_the_action(api, acme, conn):
    created = schedule(acme)
    globex = make_workspace(conn, "Globex")
    add_member(conn, globex, "bob", "admin")
    get_status, get_body = call("GET", f"/v1/actions/{created['id']}", globex, user="bob")
    why_status, why_body = call("GET", f"/v1/actions/{created['id']}/why", globex, user="bob")
    assert (get_status, why_status) == (404, 404)
    assert why_body["error"]["code"] == get_body["error"]["code"] == "not_found"
    for unknown in (str(UUID(int=7)), "not-a-uuid"):
        assert call("GET", f"/v1/actions/{unknown}/why", acme)[0] == 404
        assert call("GET", f"/v1/actions/{unknown}", acme)[0] == 404
    # a caller who is no member of the workspace is refused as for GET
    assert call("GET", f"/v1/actions/{created['id']}/why", acme, user="eve")[0] == 403
