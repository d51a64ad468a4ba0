"""How `tickwork actions` reaches the API: it never has rules of its own.

Locally it calls the running `tickwork dev` over HTTP with a token signed by the data
directory's key (that process holds the queues a new row goes to). Against AWS it runs the
API's own Lambda handler in this process, with a Lambda-shaped event, on the database and
SQS queues of the environment. Either way the validation, the messages and the error codes
are the API's.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlencode

import httpx

from tickwork.api import handle
from tickwork.local.errors import LocalServerError
from tickwork.local.handlers import LocalContext
from tickwork.local.paths import START_HINT


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any

    @property
    def ok(self) -> bool:
        return self.status < 400

    @property
    def error(self) -> dict[str, Any]:
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return dict(self.body["error"])
        return {"code": "error", "message": str(self.body), "details": {}}


class ApiCaller(Protocol):
    def call(
        self, method: str, path: str, *, body: Any = None, params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer: ...  # fmt: skip


class HttpCaller:
    def __init__(self, base_url: str, token: str, workspace_id: str | None) -> None:
        self.base_url = base_url
        headers = {"Authorization": f"Bearer {token}"}
        if workspace_id is not None:  # `tickwork api` without --workspace leaves it out
            headers["X-Workspace-Id"] = workspace_id
        self.http = httpx.Client(base_url=base_url, headers=headers, timeout=30)

    def call(
        self, method: str, path: str, *, body: Any = None, params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:  # fmt: skip
        try:
            response = self.http.request(
                method, path, json=body, params=params, headers=headers or {}
            )
        except httpx.TransportError as exc:
            raise LocalServerError(
                f"no Tickwork API answers at {self.base_url} ({exc}); {START_HINT}"
            ) from exc
        try:
            parsed = response.json()
        except ValueError:
            parsed = response.text
        return Answer(response.status_code, parsed)


class InProcessCaller:
    """The API Lambda handler called in this process, as API Gateway would call it after its
    JWT authorizer accepted a token whose subject is `user`."""

    def __init__(self, user: str, workspace_id: str | None) -> None:

        self.handle = handle
        self.user = user
        self.workspace_id = workspace_id

    def call(
        self, method: str, path: str, *, body: Any = None, params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:  # fmt: skip

        query = urlencode(params or {})
        now = time.time()
        event = {
            "version": "2.0", "routeKey": "$default", "rawPath": path, "rawQueryString": query,
            "headers": {"content-type": "application/json",
                        **({"x-workspace-id": self.workspace_id} if self.workspace_id else {}),
                        **{k.lower(): v for k, v in (headers or {}).items()}},
            "queryStringParameters": dict(params) if params else None,
            "requestContext": {
                "accountId": "cli", "apiId": "cli", "domainName": "cli", "domainPrefix": "cli",
                "requestId": str(uuid.uuid4()), "routeKey": "$default", "stage": "$default",
                "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
                "timeEpoch": int(now * 1000),
                "http": {"method": method, "path": path, "protocol": "HTTP/1.1",
                         "sourceIp": "127.0.0.1", "userAgent": "tickwork-cli"},
                "authorizer": {"jwt": {"claims": {"sub": self.user}, "scopes": None}},
            },
            "body": json.dumps(body) if body is not None else None,
            "isBase64Encoded": False,
        }  # fmt: skip
        result = self.handle(event, LocalContext("api", 30))  # type: ignore[arg-type]
        raw = result.get("body") or ""
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw
        return Answer(int(result["statusCode"]), parsed)
