"""The public routes' function serves what anyone may call without a token (the console's
files, unsubscribe links, providers' callbacks) and nothing of the JSON API, whatever
API Gateway hands it."""

from __future__ import annotations

from typing import Any

import pytest

from tickwork.api import OPENAPI_PATH, public


def event(method: str, path: str) -> dict[str, Any]:
    return {
        "version": "2.0", "rawPath": path, "headers": {},
        "requestContext": {"http": {"method": method, "path": path}},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("path", "served"),
    [
        ("/console", True),
        ("/console/app.js", True),
        ("/v1/unsubscribe/abc", True),
        ("/v1/callbacks/6f1c2d3e-0000-4000-8000-000000000000", True),
        ("/v1/actions", False),
        (OPENAPI_PATH, False),
        ("/v1/connections/6f1c2d3e-0000-4000-8000-000000000000/callback-secret", False),
    ],
)
def test_what_is_public(path: str, served: bool) -> None:
    assert public.is_public(path) is served


def test_the_console_is_served_without_a_database() -> None:
    page = public.handle(event("GET", "/console/"), None)
    assert page["statusCode"] == 200
    assert page["headers"]["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("path", ["/v1/actions", OPENAPI_PATH, "/v1/workspace", "/"])
def test_a_path_of_the_api_is_not_found_here(path: str) -> None:
    answer = public.handle(event("GET", path), None)
    assert answer["statusCode"] == 404
    assert '"not_found"' in answer["body"]
