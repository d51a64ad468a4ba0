"""The engine's log lines as `tickwork dev` prints them: one readable line each, not JSON.

In AWS every handler logs JSON through Powertools' Logger, for CloudWatch to index. In the
dev terminal (`tickwork dev` sets TICKWORK_LOG_FORMAT=text unless it is set) a warning reads
as a line beside the deliveries: its time in UTC, its level, its message and its keys
(`12:00:01.250  WARNING  provider call did not succeed action_id=3f2a9c1e status=503`).
`TICKWORK_LOG_FORMAT=json` keeps the JSON.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

from tickwork.platform.observability import logger

FORMAT_VAR = "TICKWORK_LOG_FORMAT"

# What every Powertools record carries and a person in a terminal does not need.
_NOISE = frozenset({
    "level", "location", "message", "timestamp", "service", "cold_start", "function_name",
    "function_memory_size", "function_arn", "function_request_id", "sampling_rate",
    "xray_trace_id", "exception", "exception_name", "exception_notes", "stack_trace",
    "correlation_id",
})  # fmt: skip
VALUE_LIMIT = 80


def _value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = " ".join(text.split())
    return text if len(text) <= VALUE_LIMIT else text[: VALUE_LIMIT - 1] + "…"


class ReadableFormatter(LambdaPowertoolsFormatter):
    """Powertools' formatter (so appended keys still work), writing a line for people:
    time (UTC), level, message, then the record's own keys."""

    def __init__(self) -> None:
        super().__init__(datefmt="%H:%M:%S.%F", utc=True)

    def serialize(self, log: dict[str, Any]) -> str:  # type: ignore[override]
        parts = [str(log.get("timestamp", "")), f"{log.get('level', ''):<7}", str(log["message"])]
        for key, value in log.items():
            if key in _NOISE:
                continue
            # An action's id as the delivery lines show it: its first 8 characters, which
            # `tickwork actions why` takes.
            shown = str(value)[:8] if key == "action_id" and isinstance(value, str) else value
            parts.append(f"{key}={_value(shown)}")
        line = "  ".join(part for part in parts[:3]) + "".join(f" {p}" for p in parts[3:])
        trace = str(log.get("exception") or "").strip()
        if trace and logging.getLevelName(str(log.get("level"))) >= logging.ERROR:
            line += "\n" + "\n".join("    " + row for row in trace.splitlines())
        elif trace:
            line += f"  ({_value(trace.splitlines()[-1])})"
        return line


def use_readable_lines() -> None:
    """The engine's logger (and the `tickwork.*` loggers under it) writes readable lines
    when TICKWORK_LOG_FORMAT is `text` (the tick's process, started with this environment,
    does the same)."""
    if os.environ.get(FORMAT_VAR) != "text":
        return
    handler = logger.registered_handler
    if handler is not None and not isinstance(handler.formatter, ReadableFormatter):
        handler.setFormatter(ReadableFormatter())
