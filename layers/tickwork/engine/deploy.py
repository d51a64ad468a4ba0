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
  queue) so a stack that could not send fails its deploy instead of deploying. The resource
  depends on every queue of the template, so a type without one is a typo or a type missing
  from the template's list: it fails at once, by name, with nothing to wait for.

Migrations go to the database instance directly, not through RDS Proxy: the runner holds a
session advisory lock, which would pin a proxy connection.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg

from tickwork.platform import migrate
from tickwork.platform.config import EVENT_ACTION_TYPE, Settings
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
from tickwork.providers.bluesky import BlueskyProvider
from tickwork.providers.postmark import PostmarkProvider
from tickwork.providers.slack import SlackProvider
from tickwork.providers.twilio import TwilioProvider

PHYSICAL_ID = "tickwork-schema"
# Time kept back from the Lambda's remaining time to send the answer.
ANSWER_MARGIN_SECONDS = 15.0
# How long one connection attempt may take, and the pause between attempts.
CONNECT_TIMEOUT_SECONDS = 10
CONNECT_PAUSE_SECONDS = 5.0
REASON_LIMIT = 1000  # CloudFormation keeps the response under 4 KB
_LAYER_VERSION = re.compile(r":(\d+)$")
# The egress check: a TCP connection to each provider's host on 443 from the stack's subnets
# (the migration runs where the dispatchers do). Providers whose host is each connection's
# own (a Mastodon instance, a tenant's webhook) are probed at a host on the internet at
# large; `log` sends nowhere.
EGRESS_TIMEOUT_SECONDS = 3.0
INTERNET_HOST = "checkip.amazonaws.com"
PROVIDER_HOSTS: dict[str, str] = {
    "postmark": PostmarkProvider.default_api_url,
    "twilio": TwilioProvider.default_api_url,
    "slack": SlackProvider.default_api_url,
    "bluesky": BlueskyProvider.default_api_url,
    # (the stack makes no SES endpoint: its API is reached like any other)
    "ses": "https://email.{region}.amazonaws.com",
    "mastodon": INTERNET_HOST,
    "webhook": INTERNET_HOST,
    "event": INTERNET_HOST,
}


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
    # (the outcome events' own type is always there: a stack needs one of the tenants' too)
    if not set(settings.action_types) - {EVENT_ACTION_TYPE}:
        problems.append("no action types are configured (the ActionTypes parameter)")
        return problems
    registry = ProviderRegistry(settings)
    for name in sorted(settings.action_types):
        problems += _unreadable_webhook_secrets(settings, name)
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


def _unreadable_webhook_secrets(settings: Settings, name: str) -> list[str]:
    """Webhook endpoints whose signing secret the dispatcher may not read: IAM grants it only
    this stack's `<secrets prefix>/webhooks/*`, so any other secret would fail every send."""
    config = settings.action_types[name]
    endpoints = config.options.get("endpoints") if config.provider == "webhook" else None
    if not isinstance(endpoints, dict):
        return []
    allowed = f":secret:{settings.secrets_prefix}/webhooks/"
    return [
        f"action type {name!r}, endpoint {target!r}: secret_arn must name a secret"
        f" {settings.secrets_prefix}/webhooks/..., the only webhook secrets this stack's"
        " dispatchers may read"
        for target, spec in sorted(endpoints.items())
        if isinstance(spec, dict) and spec.get("secret_arn") and allowed not in spec["secret_arn"]
    ]


def keep_service_logs(properties: Mapping[str, Any]) -> list[str]:
    """Gives the log groups AWS services create for the stack (RDS's exported logs, the hosted
    rotation functions) the stack's retention: CloudFormation cannot own a group a service
    may make first, and such a group otherwise never expires. Returns the groups set."""
    groups = [str(g) for g in properties.get("LogGroups") or []]
    if not groups:
        return []
    import boto3  # noqa: PLC0415 - lazy: boto3 loads only where AWS is called (cold start)
    from botocore.config import Config  # noqa: PLC0415 - lazy: as boto3

    days = int(properties["LogRetentionDays"])
    # Short timeouts: a stack without a way to CloudWatch Logs fails here in seconds, by name.
    config = Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 2})
    logs = boto3.client("logs", config=config)
    for group in groups:
        with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
            logs.create_log_group(logGroupName=group)
        logs.put_retention_policy(logGroupName=group, retentionInDays=days)
    return groups


def _host_and_port(address: str) -> tuple[str, int]:
    netloc = address.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = netloc.partition(":")
    return host, int(port or 443)


def egress_targets(settings: Settings, region: str) -> dict[str, set[str]]:
    """Hosts each configured action type must reach, by type."""
    targets: dict[str, set[str]] = {}
    for name, config in sorted(settings.action_types.items()):
        hosts = set()
        endpoints = config.options.get("endpoints") if config.provider == "webhook" else None
        if isinstance(endpoints, dict) and endpoints:
            urls = [spec.get("url") for spec in endpoints.values() if isinstance(spec, dict)]
            hosts = {str(url) for url in urls if url}
        elif config.provider in PROVIDER_HOSTS:
            hosts = {PROVIDER_HOSTS[config.provider].format(region=region)}
        if hosts:
            targets[name] = {"{}:{}".format(*_host_and_port(h)) for h in hosts}
    return targets


def tcp_reaches(address: str) -> bool:
    host, port = _host_and_port(address)
    try:
        with socket.create_connection((host, port), timeout=EGRESS_TIMEOUT_SECONDS):
            return True
    except OSError:
        return False


def unreachable_types(targets: Mapping[str, set[str]], reaches: Callable[[str], bool]) -> list[str]:
    """`type (host, ...)` for each type that reaches none of its hosts; probed at once, so
    the check takes one timeout however many types there are."""
    hosts = sorted({h for hs in targets.values() for h in hs})
    reached: dict[str, bool] = {}

    def probe(host: str) -> None:
        reached[host] = reaches(host)

    threads = [threading.Thread(target=probe, args=(h,), daemon=True) for h in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(EGRESS_TIMEOUT_SECONDS + 2)
    return [
        f"{name} ({', '.join(sorted(hs))})"
        for name, hs in sorted(targets.items())
        if not any(reached.get(h) for h in hs)
    ]


def check_egress(
    settings: Settings, mode: str, reaches: Callable[[str], bool] = tcp_reaches
) -> str | None:
    """None when every configured type reaches its provider (or the check is off); a
    warning to report when `mode` is `warn`. Raises DeployError when `mode` is `fail`."""
    if mode not in ("fail", "warn"):
        return None
    region = os.environ.get("AWS_REGION", "us-east-1")
    unreachable = unreachable_types(egress_targets(settings, region), reaches)
    if not unreachable:
        return None
    message = (
        "no way out to the internet for: "
        + "; ".join(unreachable)
        + " (add a NAT gateway or proxy on the private subnets' route tables, drop the types"
        " from ActionTypes, or deploy with EgressCheck=warn)"
    )
    if mode == "fail":
        raise DeployError(message)
    logger.warning("egress check", extra={"unreachable": unreachable})
    return message


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
    problems = validate_configuration(settings, queue_exists)
    if problems:
        raise DeployError("the configuration cannot send: " + "; ".join(problems))
    properties = event.get("ResourceProperties") or {}
    warning = check_egress(settings, str(properties.get("EgressCheck", "off")))
    kept = keep_service_logs(properties)
    applied = run_migrations(settings, deadline)
    reason = f"applied {', '.join(applied)}" if applied else "schema already up to date"
    if kept:
        reason += f"; {len(kept)} service log groups kept for the stack's retention"
    if warning:
        reason += f"; WARNING {warning}"
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
