"""Schemathesis against the generated OpenAPI document, with every check it has: whatever
a client sends that the schema allows (and much that it does not), the API answers below
500, in the documented statuses, content types and shapes; invalid data is refused and
valid data accepted. CI runs a small derandomized set; `make fuzz` runs thousands."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import schemathesis
import schemathesis.specs.openapi.checks  # registers the OpenAPI checks in CHECKS
from hypothesis import HealthCheck, settings
from schemathesis.checks import CHECKS
from schemathesis.config import SchemathesisConfig

from tests.e2e.conftest import Api, running_api
from tickwork.api import openapi_document
from tickwork.platform.config import Settings

# Schema-valid values the domain refuses with a reason (an action type not configured, a
# time in the past, a zone that does not exist, a rule with no occurrence) are a 422.
CONFIG = SchemathesisConfig.from_dict(
    {
        "checks": {
            "positive_data_acceptance": {
                "expected-statuses": ["2xx", "401", "403", "404", "409", "413", "422", "429"]
            }
        }
    }
)
schema = schemathesis.openapi.from_dict(json.loads(openapi_document()), config=CONFIG)
ALL_CHECKS = CHECKS.get_all()
# Cases are generated before the server (and its signing key) exist: they carry this
# placeholder, which the test swaps for the admin's token.
PLACEHOLDER = "Bearer fuzz-token"


@schema.auth()
class Bearer:
    """A token on every case, except where a case leaves auth out on purpose (schemathesis
    then skips this and expects a 401)."""

    def get(self, case: Any, ctx: Any) -> str:
        return PLACEHOLDER

    def set(self, case: Any, data: str, ctx: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": data}


EXAMPLES = int(os.environ.get("TICKWORK_FUZZ_EXAMPLES", "25"))
SEEN: Counter[int] = Counter()


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    # The fuzzer calls far faster than any quota allows one workspace: quotas off.
    off = Settings(quota_api_requests_per_minute=0, quota_active_actions=0,
                   quota_recurring_schedules=0, quota_rules=0, quota_recipients=0,
                   quota_actions_per_minute=0, quota_suppressions=0,
                   quota_digests=0)  # fmt: skip
    with running_api(database_url, tmp_path, off) as running:
        yield running


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    if SEEN:
        total = sum(SEEN.values())
        by_status = ", ".join(f"{code}: {n}" for code, n in sorted(SEEN.items()))
        server_errors = sum(n for code, n in SEEN.items() if code >= 500)
        print(f"\nfuzz: {total} cases, {server_errors} answered 5xx; by status: {by_status}")


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    # The same cases every run, so CI is repeatable; raise TICKWORK_FUZZ_EXAMPLES to explore.
    derandomize=os.environ.get("TICKWORK_FUZZ_RANDOM") != "1",
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_check_holds_on_every_operation(case, api):
    # A generated workspace id that is a UUID becomes the caller's workspace (any other
    # UUID is answered 403, which would hide what the route does); a malformed or missing
    # one is sent as generated.
    token = api.admin.http.headers["Authorization"]
    headers = dict(case.headers or {})
    if _is_uuid(headers.get("x-workspace-id")):
        headers["x-workspace-id"] = api.workspace_a
    if headers.get("Authorization") == PLACEHOLDER:
        headers["Authorization"] = token
    case.headers = headers
    response = case.call(base_url=api.url)
    SEEN[response.status_code] += 1
    assert response.status_code < 500, (case.method, case.formatted_path, response.text)
    case.validate_response(response, checks=ALL_CHECKS, headers={"Authorization": token})
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"code", "message", "details"}, response.text
        assert error["message"]


def _is_uuid(value: object) -> bool:
    try:
        UUID(str(value))
    except ValueError:
        return False
    return True
