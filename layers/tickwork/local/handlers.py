"""The Lambda handlers of `functions/<name>/app.py`, loaded from the repository so the local
runtime calls exactly what Lambda calls."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, cast

from tickwork.errors import ConfigError

FUNCTIONS_DIR = Path(__file__).resolve().parents[3] / "functions"

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


@cache
def load(name: str) -> Handler:
    path = FUNCTIONS_DIR / name / "app.py"
    if not path.is_file():
        raise ConfigError(f"no handler at {path}; run from a Tickwork checkout")
    module_name = f"tickwork_function_{name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return cast(Handler, module.handler)


class LocalContext:
    """The parts of a Lambda context that handlers and Powertools read."""

    def __init__(self, function_name: str, timeout_seconds: float = 60.0) -> None:
        import time
        import uuid

        self.function_name = f"tickwork-local-{function_name}"
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:local:000000000000:function:{function_name}"
        self.memory_limit_in_mb = 512
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        import time

        return max(0, int((self._deadline - time.monotonic()) * 1000))
