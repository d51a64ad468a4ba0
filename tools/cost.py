"""What the stack costs, from template.yaml's settings: per million actions sent (Lambda,
SQS, NAT, CloudWatch Logs and X-Ray of the dispatchers), per million created through the
API (an HTTP API request and an API Lambda call each), and a month of what does not grow
with actions (the database, its proxy, endpoints, secrets, the key, alarms, metrics, the
crons, the queues' pollers), totalled at the template's defaults.

    .venv/bin/python -m tools.cost            # the Markdown tables of docs/cost.md
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cfnlint.decode.cfn_yaml import load as load_yaml  # type: ignore[import-untyped]

from tickwork.platform.config import ActionTypeConfig

ROOT = Path(__file__).resolve().parents[1]
ACTIONS = 1_000_000
HOURS_A_MONTH = 730
MINUTES_A_MONTH = HOURS_A_MONTH * 60

# Prices in us-east-1 (USD), as published when this was written.
LAMBDA_PER_REQUEST = 0.20 / 1_000_000
LAMBDA_ARM64_PER_GB_SECOND = 0.0000133334
SQS_PER_REQUEST = 0.40 / 1_000_000
NAT_PER_GB = 0.045
NAT_PER_HOUR = 0.045
LOGS_INGEST_PER_GB = 0.50
XRAY_PER_TRACE = 5.00 / 1_000_000
HTTP_API_PER_REQUEST = 1.00 / 1_000_000  # the first 300 million a month
RDS_PER_HOUR = {"db.t4g.small": 0.032}  # single-AZ; Multi-AZ is twice
RDS_VCPUS = {"db.t4g.small": 2}
RDS_GP3_PER_GB_MONTH = 0.115  # single-AZ; Multi-AZ stores twice and bills twice
RDS_PROXY_PER_VCPU_HOUR = 0.015  # at least 2 vCPUs
INTERFACE_ENDPOINT_PER_HOUR = 0.01  # per endpoint and availability zone
SECRET_PER_MONTH = 0.40
KMS_KEY_PER_MONTH = 1.00
ALARM_METRIC_PER_MONTH = 0.10  # a standard alarm; one with metric math, per metric it reads
CUSTOM_METRIC_PER_MONTH = 0.30
DASHBOARD_PER_MONTH = 3.00  # beyond the account's first three
S3_PER_GB_MONTH = 0.023

# Stated, not read from the template:
# - a dispatcher invocation under sustained load lasts about a second (docs/deploy.md, "Rows
#   per message and sustained load": SQS delays are whole seconds, so a batch waits out its
#   rows' instants; the claims, provider calls and finalizes take milliseconds of it);
INVOCATION_SECONDS = 1.0
# - a provider call moves about 6 KB through the NAT gateway (request, response and TLS
#   records on a kept-alive connection); calls to AWS APIs go through the stack's endpoints;
NAT_BYTES_PER_CALL = 6_000
# - an invocation writes about 2.5 KB of logs: its metrics record (EMF) and Lambda's
#   START/END/REPORT lines; a row that goes well writes no line of its own;
LOG_BYTES_PER_INVOCATION = 2_500
# - X-Ray's default sampling records 5 % of invocations (beyond one a second, a fixed cost).
XRAY_SAMPLED = 0.05
# - SQS: SendMessageBatch, the poller's ReceiveMessage and DeleteMessageBatch each carry up
#   to 10 messages;
MESSAGES_PER_SQS_REQUEST = 10
# - creating an action (POST /v1/actions) bills about 50 ms of the API function: the
#   request's checks and one transaction through RDS Proxy (the JWT is checked by API
#   Gateway); it writes its access log line (about 0.4 KB) and Lambda's lines and metrics
#   record (about 1.1 KB). A row due within the look-ahead is also sent to its queue by the
#   API (a SendMessage): left out, as most actions are scheduled further ahead;
API_SECONDS_PER_REQUEST = 0.05
API_LOG_BYTES_PER_REQUEST = 1_500
# - a cron run with little to do takes about 0.2 s;
CRON_SECONDS = 0.2
# - Lambda polls each queue with five pollers, each a 20-second long poll: about 15
#   receives a minute per queue when it is empty;
POLLER_RECEIVES_A_MINUTE = 15
# - one NAT gateway in one zone: yours, not the stack's, but the default action types send
#   to the internet (the deploy's egress check fails without a way out);
NAT_GATEWAYS = 1
# - the functions' two subnets, in two zones (interface endpoints bill per zone);
ZONES = 2
# - an archived action takes about 0.25 KB of gzip JSON Lines in the archive bucket.
ARCHIVE_BYTES_PER_ACTION = 250


@dataclass(frozen=True)
class Settings:
    memory_mb: int
    batch_size: int
    tracing: bool
    default_rows_per_message: int


@dataclass(frozen=True)
class Cost:
    rows_per_message: int
    messages: float
    invocations: float
    lambda_usd: float
    sqs_usd: float
    nat_usd: float
    logs_usd: float
    xray_usd: float

    @property
    def total(self) -> float:
        return self.lambda_usd + self.sqs_usd + self.nat_usd + self.logs_usd + self.xray_usd


@dataclass(frozen=True)
class ApiCost:
    requests_usd: float
    lambda_usd: float
    logs_usd: float
    xray_usd: float

    @property
    def total(self) -> float:
        return self.requests_usd + self.lambda_usd + self.logs_usd + self.xray_usd


@dataclass(frozen=True)
class Line:
    """One fixed monthly cost: what, how much at the defaults, and how it is reckoned."""

    what: str
    usd: float
    basis: str


def load(path: Path = ROOT / "template.yaml") -> dict[str, Any]:
    template: dict[str, Any] = load_yaml(str(path))
    return template


def template_settings(template: dict[str, Any] | None = None) -> Settings:
    template = template or load()
    function = template["Globals"]["Function"]
    assert function["Architectures"] == ["arm64"], "the prices here are arm64's"
    loop = template["Resources"]["Fn::ForEach::PerActionType"][2]
    dispatcher = loop["${ActionType}Dispatcher"]["Properties"]
    memory = int(dispatcher.get("MemorySize", function["MemorySize"]))
    batch_size = int(dispatcher["Events"]["Queue"]["Properties"]["BatchSize"])
    rows = ActionTypeConfig.model_fields["rows_per_message"].default
    return Settings(memory, batch_size, function.get("Tracing") == "Active", int(rows))


def cost(settings: Settings, rows_per_message: int) -> Cost:
    messages = ACTIONS / rows_per_message
    invocations = messages / settings.batch_size
    gb_seconds = invocations * INVOCATION_SECONDS * settings.memory_mb / 1024
    sqs_requests = 3 * messages / MESSAGES_PER_SQS_REQUEST
    return Cost(
        rows_per_message=rows_per_message,
        messages=messages,
        invocations=invocations,
        lambda_usd=invocations * LAMBDA_PER_REQUEST + gb_seconds * LAMBDA_ARM64_PER_GB_SECOND,
        sqs_usd=sqs_requests * SQS_PER_REQUEST,
        nat_usd=ACTIONS * NAT_BYTES_PER_CALL / 1e9 * NAT_PER_GB,
        logs_usd=invocations * LOG_BYTES_PER_INVOCATION / 1e9 * LOGS_INGEST_PER_GB,
        xray_usd=invocations * XRAY_SAMPLED * XRAY_PER_TRACE if settings.tracing else 0.0,
    )


def api_memory_mb(template: dict[str, Any]) -> int:
    api = template["Resources"]["ApiFunction"]["Properties"]
    return int(api.get("MemorySize", template["Globals"]["Function"]["MemorySize"]))


def api_cost(template: dict[str, Any]) -> ApiCost:
    """A million actions created one request each (POST /v1/actions)."""
    gb_seconds = ACTIONS * API_SECONDS_PER_REQUEST * api_memory_mb(template) / 1024
    tracing = template["Globals"]["Function"].get("Tracing") == "Active"
    return ApiCost(
        requests_usd=ACTIONS * HTTP_API_PER_REQUEST,
        lambda_usd=ACTIONS * LAMBDA_PER_REQUEST + gb_seconds * LAMBDA_ARM64_PER_GB_SECOND,
        logs_usd=ACTIONS * API_LOG_BYTES_PER_REQUEST / 1e9 * LOGS_INGEST_PER_GB,
        xray_usd=ACTIONS * XRAY_SAMPLED * XRAY_PER_TRACE if tracing else 0.0,
    )


def _default(template: dict[str, Any], parameter: str) -> Any:
    return template["Parameters"][parameter]["Default"]


def resources(template: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every resource, those of Fn::ForEach once per action type (named by type)."""
    found: list[tuple[str, dict[str, Any]]] = []
    for name, resource in template["Resources"].items():
        if name.startswith("Fn::ForEach"):
            var, types, body = resource
            found += [
                (key.replace("${" + var + "}", t), r) for t in types for key, r in body.items()
            ]
        else:
            found.append((name, resource))
    return found


def of_type(template: dict[str, Any], kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [(name, r) for name, r in resources(template) if r["Type"] == kind]


def alarm_metrics(template: dict[str, Any]) -> int:
    """What the alarms are billed for: one metric each, or each metric a math alarm reads."""
    count = 0
    for _, alarm in of_type(template, "AWS::CloudWatch::Alarm"):
        metrics = alarm["Properties"].get("Metrics")
        count += sum(1 for m in metrics if "MetricStat" in m) if metrics else 1
    return count


def action_types(template: dict[str, Any]) -> list[str]:
    types: list[str] = template["Resources"]["Fn::ForEach::PerActionType"][1]
    return types


def custom_metrics(template: dict[str, Any]) -> int:
    """The Tickwork metrics the alarms and the dashboard read, each dimension set one
    metric: per action type, per provider of the default types, or per service. The code
    emits a few more (callbacks by provider and outcome), left out."""
    types = len(action_types(template))
    providers = len({c["provider"] for c in _default_action_types(template).values()})
    per_service: set[str] = set()
    per_type: set[str] = set()
    for _, alarm in of_type(template, "AWS::CloudWatch::Alarm"):
        props = alarm["Properties"]
        stats = [m["MetricStat"]["Metric"] for m in props.get("Metrics", []) if "MetricStat" in m]
        for metric in stats or [props]:
            if metric.get("Namespace") == "Tickwork":
                names = {d["Name"] for d in metric.get("Dimensions", [])}
                (per_type if "action_type" in names else per_service).add(metric["MetricName"])
    body = str(template["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"])
    per_service |= set(re.findall(r'"Tickwork", "(\w+)", "service"', body))
    per_type |= set(re.findall(r'\{Tickwork,action_type,service\} MetricName=\\"(\w+)', body))
    per_provider = set(re.findall(r'\{Tickwork,provider\} MetricName=\\"(\w+)', body))
    return len(per_service) + types * len(per_type) + providers * len(per_provider)


def _default_action_types(template: dict[str, Any]) -> dict[str, Any]:
    types: dict[str, Any] = json.loads(_default(template, "ActionTypes"))
    return types


def cron_invocations(template: dict[str, Any]) -> int:
    """A month of the scheduled functions' runs, from their schedules (the tick's by
    TickIntervalSeconds' default)."""
    every = {"minute": 1, "minutes": 1, "hour": 60, "hours": 60}
    total = 0.0
    for _, resource in of_type(template, "AWS::Serverless::Function"):
        for event in resource["Properties"].get("Events", {}).values():
            if event["Type"] != "Schedule":
                continue
            schedule = event["Properties"]["Schedule"]
            if isinstance(schedule, dict):  # the tick: !FindInMap by TickIntervalSeconds
                mapping, _, key = schedule["Fn::FindInMap"]
                interval = str(_default(template, "TickIntervalSeconds"))
                schedule = template["Mappings"][mapping][interval][key]
            found = re.fullmatch(r"rate\((\d+) (\w+)\)", schedule)
            assert found, schedule
            total += MINUTES_A_MONTH / (int(found.group(1)) * every[found.group(2)])
    return round(total)


def fixed_costs(template: dict[str, Any]) -> list[Line]:
    """A month of what does not grow with actions, at the template's defaults."""
    instance = str(_default(template, "DatabaseInstanceClass"))
    copies = 2 if _default(template, "DatabaseMultiAz") == "true" else 1
    az = "Multi-AZ" if copies == 2 else "single-AZ"
    storage = int(_default(template, "DatabaseAllocatedStorage"))
    vcpus = max(2, RDS_VCPUS[instance])
    endpoints = sum(
        1
        for _, r in of_type(template, "AWS::EC2::VPCEndpoint")
        if r["Properties"]["VpcEndpointType"] == "Interface"
    )
    secrets = len(of_type(template, "AWS::SecretsManager::Secret"))
    keys = len(of_type(template, "AWS::KMS::Key"))
    alarms = alarm_metrics(template)
    metrics = custom_metrics(template)
    dashboards = len(of_type(template, "AWS::CloudWatch::Dashboard"))
    runs = cron_invocations(template)
    memory = int(template["Globals"]["Function"]["MemorySize"])
    gb_seconds = runs * CRON_SECONDS * memory / 1024
    crons = runs * LAMBDA_PER_REQUEST + gb_seconds * LAMBDA_ARM64_PER_GB_SECOND
    crons += runs * LOG_BYTES_PER_INVOCATION / 1e9 * LOGS_INGEST_PER_GB
    crons += runs * XRAY_SAMPLED * XRAY_PER_TRACE
    queues = sum(
        1
        for name, _ in of_type(template, "AWS::SQS::Queue")
        if not name.endswith("DeadLetterQueue")
    )
    receives = queues * POLLER_RECEIVES_A_MINUTE * MINUTES_A_MONTH
    rds_hour = RDS_PER_HOUR[instance]
    return [
        Line(
            f"database instance ({instance}, {az})",
            copies * rds_hour * HOURS_A_MONTH,
            f"{copies} x ${rds_hour:.3f} an hour",
        ),
        Line(
            f"database storage ({storage} GB gp3, {az})",
            copies * storage * RDS_GP3_PER_GB_MONTH,
            f"{copies} x {storage} GB x ${RDS_GP3_PER_GB_MONTH} per GB-month",
        ),
        Line(
            "RDS Proxy",
            vcpus * RDS_PROXY_PER_VCPU_HOUR * HOURS_A_MONTH,
            f"{vcpus} vCPUs x ${RDS_PROXY_PER_VCPU_HOUR} an hour",
        ),
        Line(
            f"interface endpoints ({endpoints})",
            endpoints * ZONES * INTERFACE_ENDPOINT_PER_HOUR * HOURS_A_MONTH,
            f"{endpoints} x {ZONES} zones x ${INTERFACE_ENDPOINT_PER_HOUR} an hour",
        ),
        Line(
            "NAT gateway (yours: the default types need a way out)",
            NAT_GATEWAYS * NAT_PER_HOUR * HOURS_A_MONTH,
            f"{NAT_GATEWAYS} x ${NAT_PER_HOUR} an hour, and its data per action",
        ),
        Line(
            f"the stack's secrets ({secrets})",
            secrets * SECRET_PER_MONTH,
            f"${SECRET_PER_MONTH:.2f} each, and as much per connection",
        ),
        Line(f"KMS key ({keys})", keys * KMS_KEY_PER_MONTH, f"${KMS_KEY_PER_MONTH:.2f} each"),
        Line(
            f"alarms ({alarms} metrics)",
            alarms * ALARM_METRIC_PER_MONTH,
            f"${ALARM_METRIC_PER_MONTH:.2f} per metric an alarm reads",
        ),
        Line(
            f"custom metrics (about {metrics})",
            metrics * CUSTOM_METRIC_PER_MONTH,
            f"${CUSTOM_METRIC_PER_MONTH:.2f} each",
        ),
        Line(
            f"dashboard ({dashboards})",
            dashboards * DASHBOARD_PER_MONTH,
            f"${DASHBOARD_PER_MONTH:.2f} each beyond the account's first three",
        ),
        Line(
            f"crons ({runs:,} runs)",
            crons,
            f"{CRON_SECONDS:g} s each at {memory} MB, their logs and traces",
        ),
        Line(
            f"queue pollers ({queues} queues)",
            receives * SQS_PER_REQUEST,
            f"{POLLER_RECEIVES_A_MINUTE} empty receives a minute each",
        ),
        Line(
            "archive bucket",
            0.0,
            f"${S3_PER_GB_MONTH} per GB-month: about"
            f" {ACTIONS * ARCHIVE_BYTES_PER_ACTION / 1e9:g} GB a million actions archived",
        ),
    ]


def table(settings: Settings) -> str:
    rows = sorted({1, settings.default_rows_per_message, 100})
    lines = [
        "| `rows_per_message` | messages | dispatcher invocations | Lambda | SQS | NAT | logs | X-Ray | per million actions |",  # noqa: E501
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        c = cost(settings, r)
        label = f"{r} (shipped default)" if r == settings.default_rows_per_message else str(r)
        lines.append(
            f"| {label} | {c.messages:,.0f} | {c.invocations:,.0f} | ${c.lambda_usd:.3f} |"
            f" ${c.sqs_usd:.3f} | ${c.nat_usd:.3f} | ${c.logs_usd:.3f} | ${c.xray_usd:.4f} |"
            f" **${c.total:.2f}** |"
        )
    return "\n".join(lines)


def created_through_the_api(template: dict[str, Any], settings: Settings) -> float:
    """A million actions created through the API and sent, at the defaults."""
    return api_cost(template).total + cost(settings, settings.default_rows_per_message).total


def api_table(template: dict[str, Any], settings: Settings) -> str:
    api = api_cost(template)
    sent = cost(settings, settings.default_rows_per_message).total
    return "\n".join([
        "| HTTP API requests | API Lambda | logs | X-Ray | created | sent (shipped default) | created and sent, per million |",  # noqa: E501
        "|---|---|---|---|---|---|---|",
        f"| ${api.requests_usd:.2f} | ${api.lambda_usd:.3f} | ${api.logs_usd:.3f} |"
        f" ${api.xray_usd:.3f} | ${api.total:.2f} | ${sent:.2f} |"
        f" **${created_through_the_api(template, settings):.2f}** |",
    ])  # fmt: skip


def fixed_total(template: dict[str, Any]) -> float:
    return sum(line.usd for line in fixed_costs(template))


def fixed_table(template: dict[str, Any]) -> str:
    lines = ["| a month of | at the defaults | reckoned as |", "|---|---|---|"]
    lines += [f"| {c.what} | ${c.usd:,.2f} | {c.basis} |" for c in fixed_costs(template)]
    lines.append(f"| **total** | **${fixed_total(template):,.2f}** | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    template = load()
    settings = template_settings(template)
    print(
        f"dispatchers: {settings.memory_mb} MB arm64, BatchSize {settings.batch_size},"
        f" tracing {'on' if settings.tracing else 'off'},"
        f" rows_per_message {settings.default_rows_per_message} by default;"
        f" API: {api_memory_mb(template)} MB arm64"
    )
    print("\nA million actions sent:\n")
    print(table(settings))
    print("\nA million actions created through the API (POST /v1/actions), and sent:\n")
    print(api_table(template, settings))
    print("\nA month at the defaults, whatever the volume:\n")
    print(fixed_table(template))


if __name__ == "__main__":
    main()
