"""The Lambda handlers, as `functions/<name>/app.py` hands them to Lambda (each re-exports
`tickwork.lambdas.<name>.handler`), so the local runtime calls exactly what Lambda calls."""

from __future__ import annotations

import importlib
import os
import time
import uuid
import warnings
from collections.abc import Callable
from functools import cache
from typing import Any, cast

from tickwork.local.logs import use_readable_lines
from tickwork.platform.errors import ConfigError
from tickwork.platform.observability import logger

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]

LAMBDAS = (
    "api", "dispatcher", "drips", "expander", "migrate", "public", "reconciler", "resolver",
    "retention", "rollup", "tick",
)  # fmt: skip


@cache
def load(name: str) -> Handler:
    if name not in LAMBDAS:
        raise ConfigError(f"no Lambda named {name!r}; the Lambdas: {', '.join(LAMBDAS)}")
    module = importlib.import_module(f"tickwork.lambdas.{name}")
    return cast(Handler, module.handler)


class LocalContext:
    """The parts of a Lambda context that handlers and Powertools read."""

    def __init__(self, function_name: str, timeout_seconds: float = 60.0) -> None:

        self.function_name = f"tickwork-local-{function_name}"
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:local:000000000000:function:{function_name}"
        self.memory_limit_in_mb = 512
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_seconds

    def get_remaining_time_in_millis(self) -> int:

        return max(0, int((self._deadline - time.monotonic()) * 1000))


def quiet_powertools() -> None:
    """Locally, EMF metrics and X-Ray have nowhere to go; logs only above INFO, as readable
    lines if TICKWORK_LOG_FORMAT is `text` (local/logs.py)."""
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    logger.setLevel(os.environ["POWERTOOLS_LOG_LEVEL"])
    # With metrics off, every handler invocation would warn that it had none to publish.
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    use_readable_lines()
