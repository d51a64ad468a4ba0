"""The variable cost of a million actions, from template.yaml's settings: Lambda, SQS, NAT,
CloudWatch Logs and X-Ray, for a message per row and for the batching the stack ships.
Fixed monthly costs (the database, its proxy, endpoints, the NAT gateway's hours, the
crons' invocations, alarms and custom metrics) are apart: they do not grow with actions.

    .venv/bin/python -m tools.cost            # the Markdown table of docs/cost.md
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cfnlint.decode.cfn_yaml import load as load_yaml  # type: ignore[import-untyped]

from tickwork.platform.config import ActionTypeConfig

ROOT = Path(__file__).resolve().parents[1]
ACTIONS = 1_000_000

# Prices in us-east-1 (USD), as published when this was written.
LAMBDA_PER_REQUEST = 0.20 / 1_000_000
LAMBDA_ARM64_PER_GB_SECOND = 0.0000133334
SQS_PER_REQUEST = 0.40 / 1_000_000
NAT_PER_GB = 0.045
LOGS_INGEST_PER_GB = 0.50
XRAY_PER_TRACE = 5.00 / 1_000_000

# Stated, not read from the template:
# - an invocation under sustained load lasts about a second (docs/deploy.md, "Rows per
#   message and sustained load": SQS delays are whole seconds, so a batch waits out its rows'
#   instants; the claims, provider calls and finalizes take milliseconds of it);
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
#   to 10 messages (the pollers' empty receives are fixed).
MESSAGES_PER_SQS_REQUEST = 10


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


def template_settings(path: Path = ROOT / "template.yaml") -> Settings:
    template: dict[str, Any] = load_yaml(str(path))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    settings = template_settings()
    print(
        f"dispatchers: {settings.memory_mb} MB arm64, BatchSize {settings.batch_size},"
        f" tracing {'on' if settings.tracing else 'off'},"
        f" rows_per_message {settings.default_rows_per_message} by default"
    )
    print(table(settings))


if __name__ == "__main__":
    main()
