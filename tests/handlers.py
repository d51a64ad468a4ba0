"""Loads `functions/<name>/app.py` under a unique module name (every handler file is app.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

FUNCTIONS = Path(__file__).resolve().parents[1] / "functions"


def load_handler(name: str) -> ModuleType:
    path = FUNCTIONS / name / "app.py"
    spec = importlib.util.spec_from_file_location(f"tickwork_function_{name}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeLambdaContext:
    function_name = "tickwork-test"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:tickwork-test"
    memory_limit_in_mb = 512
    aws_request_id = "00000000-0000-0000-0000-000000000000"
    log_group_name = "/aws/lambda/tickwork-test"
    log_stream_name = "test"

    def __init__(self, remaining_ms: int = 60_000) -> None:
        self._remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self._remaining_ms
