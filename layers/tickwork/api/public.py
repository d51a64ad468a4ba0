"""The routes anyone may call without a token: the console's files, one-click unsubscribe
links and providers' status callbacks. Each checks what it serves its own way (nothing
private in the console's files, a signed token, the provider's signature).

In AWS they are a function of their own (PublicFunction, `tickwork.lambdas.public`), so
what answers strangers can read only what these routes need: the callback secrets, Twilio
connections' credentials (Twilio signs with the auth token) and the unsubscribe key, never
the other connections' credentials the API reads. The API's handler serves them too, for
the local runtime and the tests that call it with every path.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork import console, runtime
from tickwork.api import callbacks, unsubscribe
from tickwork.api.errors import error_result


def is_public(path: str) -> bool:
    return (
        console.is_console(path) or callbacks.is_callback(path) or unsubscribe.is_unsubscribe(path)
    )


def handle(event: dict[str, Any], context: LambdaContext | None) -> dict[str, Any]:
    """One API Gateway HTTP API (payload v2) event for a public route; any other path is a
    404, so this function never reaches the JSON API whatever API Gateway sends it."""
    http = event.get("requestContext", {}).get("http", {})
    path = str(event.get("rawPath", ""))
    method = str(http.get("method", "GET"))
    if console.is_console(path):
        # The console's files hold no data: the settings only, no database.
        return console.serve(method, path, runtime.current_settings())
    if callbacks.is_callback(path):
        # In the providers' own formats, verified the providers' way (not with a JWT).
        return callbacks.handle(event)
    if unsubscribe.is_unsubscribe(path):
        # Signed by its token; its one-click POST is a form, not JSON (read there, base64 or
        # not).
        headers = {key.lower(): value for key, value in (event.get("headers") or {}).items()}
        body = event.get("body") or ""
        return unsubscribe.serve(
            method, path, headers, body, runtime.current().settings,
            base64_encoded=bool(event.get("isBase64Encoded")),
        )  # fmt: skip
    return error_result(HTTPStatus.NOT_FOUND, "not_found", "no such route")
