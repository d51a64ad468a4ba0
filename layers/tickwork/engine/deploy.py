"""Deploy-time work: the migration function, invoked directly or as a CloudFormation custom
resource (so a stack update migrates the schema before the functions that need it).

As a custom resource it always answers, before its own timeout: every failure becomes
FAILED with a reason a person can act on, because a custom resource that never answers
holds the stack for as long as its ServiceTimeout, and one that fails during a rollback
leaves the stack in UPDATE_ROLLBACK_FAILED. So:
- nothing runs before the `try` (not even reading the configuration);
- the work runs on a thread with a deadline, and the answer goes out when it passes;
- the first connection is retried while the RDS Proxy target or the instance warms up;
- an update that goes back to an older layer (a rollback) is answered SUCCESS at once:
  migrations only add, so the older code runs on the newer schema;
- the configuration is checked (every action type's provider builds, every type has its
  queue) so a stack that could not send fails its deploy instead of deploying.

Migrations go to the database instance directly, not through RDS Proxy: the runner holds a
session advisory lock, which would pin a proxy connection.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg

from tickwork.platform import migrate
from tickwork.platform.config import Settings
from tickwork.platform.db import (
    connect,
    local_api_login,
    provision_api_login,
    read_secret,
    resolve_url,
)
from tickwork.platform.errors import TickworkError
from tickwork.platform.observability import logger
from tickwork.providers import ProviderRegistry

PHYSICAL_ID = "tickwork-schema"
# Time kept back from the Lambda's remaining time to send the answer.
ANSWER_MARGIN_SECONDS = 15.0
# How long one connection attempt may take, and the pause between attempts.
CONNECT_TIMEOUT_SECONDS = 10
CONNECT_PAUSE_SECONDS = 5.0
REASON_LIMIT = 1000  # CloudFormation keeps the response under 4 KB
# A queue added in the same deploy is created beside this resource, not before it: wait
# this long for one to appear before calling it missing.
QUEUE_WAIT_SECONDS = 120.0
QUEUE_POLL_SECONDS = 5.0
_LAYER_VERSION = re.compile(r":(\d+)$")


class DeployError(TickworkError):
    """The deploy cannot go on; the message says what to fix."""


class RemainingTime(Protocol):
    def get_remaining_time_in_millis(self) -> int: ...


QueueCheck = Callable[[str], bool]


@dataclass
class Answer:
    status: str
    reason: str
    data: dict[str, str] = field(default_factory=dict)


# ------------------------------------------------------------------------- the work


def validate_configuration(settings: Settings, queue_exists: QueueCheck) -> list[str]:
    """Problems that would make the stack unable to send (empty when there are none)."""
    problems: list[str] = []
    if not settings.action_types:
        problems.append("no action types are configured (the ActionTypes parameter)")
    registry = ProviderRegistry(settings)
    for name in sorted(settings.action_types):
        try:
            registry.for_action_type(name)
        except Exception as exc:
            problems.append(f"action type {name!r}: its provider cannot be built: {exc}")
        url = settings.queue_url(name)
        if url is None:
            problems.append(f"action type {name!r} has no queue URL (TICKWORK_QUEUE_URL_PREFIX)")
        elif not queue_exists(url):
            problems.append(
                f"action type {name!r} has no queue at {url}: add {name!r} to the template's"
                " list of action types (Fn::ForEach::PerActionType) and deploy again"
            )
    return problems


def sqs_queue_exists(url: str) -> bool:
    import boto3  # noqa: PLC0415 - lazy: boto3 loads only where AWS is called (cold start)
    from botocore.exceptions import ClientError  # noqa: PLC0415 - lazy: botocore loads only where AWS is called (cold start)

    try:
        boto3.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if "NonExistentQueue" in code or code == "QueueDoesNotExist":
            return False
        raise
    return True


def waiting_for_queues(queue_exists: QueueCheck, deadline: float) -> QueueCheck:
    """`queue_exists`, asked again until the queue appears, QUEUE_WAIT_SECONDS pass or the
    deadline nears (the answer must still go out in time)."""

    def check(url: str) -> bool:
        until = min(time.monotonic() + QUEUE_WAIT_SECONDS, deadline - QUEUE_POLL_SECONDS)
        while not queue_exists(url):
            if time.monotonic() + QUEUE_POLL_SECONDS > until:
                return False
            logger.info("waiting for a queue", extra={"queue_url": url})
            time.sleep(QUEUE_POLL_SECONDS)
        return True

    return check


def connect_with_retry(url: str, deadline: float) -> psycopg.Connection[Any]:
    """The first connection, retried until `deadline` (the proxy target or the instance may
    still be warming up right after it was created)."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return connect(url, connect_timeout=CONNECT_TIMEOUT_SECONDS)
        except psycopg.OperationalError as exc:
            left = deadline - time.monotonic()
            if left < CONNECT_TIMEOUT_SECONDS + CONNECT_PAUSE_SECONDS:
                raise DeployError(
                    f"the database is unreachable after {attempt} attempts: {_first_line(exc)}."
                    " Check that the instance is available, that the function's security group"
                    " reaches it on 5432 and that the secret's credentials are current"
                ) from exc
            logger.warning("database not reachable yet", extra={"attempt": attempt})
            time.sleep(CONNECT_PAUSE_SECONDS)


def run_migrations(settings: Settings, deadline: float | None = None) -> list[str]:
    """Apply pending migrations as the owner, then give the API login its password."""
    deadline = deadline if deadline is not None else time.monotonic() + 120
    url = resolve_url(settings)
    with connect_with_retry(url, deadline) as conn:
        applied = migrate.apply(conn, migrate.load(migrate.default_directory()))
        if settings.api_database_secret_arn:
            secret = read_secret(settings.api_database_secret_arn)
            provision_api_login(conn, str(secret["password"]))
    if not settings.api_database_secret_arn and settings.database_url:
        local_api_login(settings.database_url)
    logger.info("migrations applied", extra={"applied": applied})
    return applied


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _layer_number(properties: Mapping[str, Any] | None) -> int | None:
    match = _LAYER_VERSION.search(str((properties or {}).get("LayerVersion", "")))
    return int(match.group(1)) if match else None


def is_rollback(event: Mapping[str, Any]) -> bool:
    """An Update back to an older layer version: CloudFormation rolling back an update (layer
    versions only grow; a forward deploy always publishes a newer one)."""
    if event.get("RequestType") != "Update":
        return False
    new = _layer_number(event.get("ResourceProperties"))
    old = _layer_number(event.get("OldResourceProperties"))
    return new is not None and old is not None and new < old


def decide(
    event: Mapping[str, Any],
    deadline: float,
    env: Mapping[str, str] | None = None,
    queue_exists: QueueCheck = sqs_queue_exists,
) -> Answer:
    """What the custom resource answers. Raises on failure; the caller turns that into FAILED."""
    request = event.get("RequestType")
    if request == "Delete":
        # The schema outlives the stack's resources; the instance keeps its data (snapshot).
        return Answer("SUCCESS", "delete: the database is left as it is")
    if is_rollback(event):
        return Answer(
            "SUCCESS",
            "rollback to an older layer: not migrating (migrations only add; the older code"
            " runs on this schema)",
        )
    if request not in ("Create", "Update"):
        raise DeployError(f"unknown RequestType {request!r}")
    # A warm function may hold the previous deploy's action types in Powertools' cache.
    from aws_lambda_powertools.utilities import parameters  # noqa: PLC0415 - lazy: Parameters builds boto3 clients (cold start)

    parameters.clear_caches()  # type: ignore[no-untyped-call]
    settings = Settings.from_env(env)
    problems = validate_configuration(settings, waiting_for_queues(queue_exists, deadline))
    if problems:
        raise DeployError("the configuration cannot send: " + "; ".join(problems))
    applied = run_migrations(settings, deadline)
    reason = f"applied {', '.join(applied)}" if applied else "schema already up to date"
    return Answer("SUCCESS", reason, {"Applied": ",".join(applied)})


# ----------------------------------------------------------- the custom resource protocol


def respond(event: Mapping[str, Any], answer: Answer, timeout: float = 10.0) -> None:
    body = json.dumps(
        {
            "Status": answer.status,
            "Reason": answer.reason[:REASON_LIMIT],
            "PhysicalResourceId": event.get("PhysicalResourceId") or PHYSICAL_ID,
            "StackId": event.get("StackId"),
            "RequestId": event.get("RequestId"),
            "LogicalResourceId": event.get("LogicalResourceId"),
            "Data": answer.data,
        }
    ).encode()
    # The presigned URL was signed with an empty Content-Type.
    request = urllib.request.Request(
        str(event["ResponseURL"]), data=body, method="PUT", headers={"Content-Type": ""}
    )
    with urllib.request.urlopen(request, timeout=timeout):
        pass


def answer_custom_resource(
    event: Mapping[str, Any],
    context: RemainingTime,
    env: Mapping[str, str] | None = None,
    queue_exists: QueueCheck = sqs_queue_exists,
) -> Answer:
    """Work out the answer within the time the Lambda has, send it, return it."""
    budget = context.get_remaining_time_in_millis() / 1000 - ANSWER_MARGIN_SECONDS
    deadline = time.monotonic() + max(1.0, budget)
    outcome: list[Answer] = []

    def work() -> None:
        try:
            outcome.append(decide(event, deadline, env, queue_exists))
        except Exception as exc:
            logger.exception("schema migration failed")
            outcome.append(Answer("FAILED", f"{type(exc).__name__}: {exc}"))

    worker = threading.Thread(target=work, name="migrate", daemon=True)
    worker.start()
    worker.join(timeout=max(0.0, deadline - time.monotonic()))
    if outcome:
        answer = outcome[0]
    else:
        answer = Answer(
            "FAILED",
            f"the migration did not finish within {budget:.0f} s (it may still hold its lock);"
            " see the migrate function's log, then retry the deploy",
        )
    try:
        respond(event, answer)
    except Exception:
        # Nothing more can be done from here: CloudFormation gives up at ServiceTimeout.
        logger.exception("could not answer CloudFormation", extra={"status": answer.status})
    return answer


def handle_migration_event(event: dict[str, Any], context: RemainingTime) -> dict[str, Any]:
    """A custom resource event (with a ResponseURL), or a direct invoke that just migrates."""
    if "ResponseURL" not in event:
        budget = context.get_remaining_time_in_millis() / 1000 - 5
        return {"applied": run_migrations(Settings.from_env(), time.monotonic() + budget)}
    answer = answer_custom_resource(event, context)
    return {"status": answer.status, "reason": answer.reason}
