"""Schemathesis against the generated OpenAPI document: whatever a client sends that the
schema allows (and much that it does not), the API answers below 500, and every 4xx has
the one error shape."""

from __future__ import annotations

import json
import os

import schemathesis
from hypothesis import HealthCheck, settings

from tickwork.api import openapi_document

schema = schemathesis.openapi.from_dict(json.loads(openapi_document()))


@schema.parametrize()
@settings(
    max_examples=int(os.environ.get("TICKWORK_FUZZ_EXAMPLES", "40")),
    # The same cases every run, so CI is repeatable; raise TICKWORK_FUZZ_EXAMPLES to explore.
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_no_5xx_and_every_4xx_has_the_error_shape(case, api):
    headers = {
        "Authorization": api.admin.http.headers["Authorization"],
        "X-Workspace-Id": api.workspace_a,
    }
    response = case.call(base_url=api.url, headers=headers)
    assert response.status_code < 500, (case.method, case.formatted_path, response.text)
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"code", "message", "details"}, response.text
        assert error["message"]
