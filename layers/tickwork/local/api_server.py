"""The local API server: HTTP requests become API Gateway HTTP API (payload v2) events for
the same Lambda handler, after the bearer token is verified as the JWT authorizer would."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tickwork.api import OPENAPI_PATH
from tickwork.api.errors import error_result, status_of
from tickwork.errors import AuthenticationError
from tickwork.local.auth import LocalJwt
from tickwork.local.handlers import LocalContext

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
MAX_REQUEST_BYTES = 10 * 1024 * 1024  # API Gateway's own limit
PUBLIC_PATHS = frozenset({OPENAPI_PATH})


def http_api_event(
    method: str, target: str, headers: dict[str, str], body: str | None,
    claims: dict[str, Any] | None, source_ip: str,
) -> dict[str, Any]:  # fmt: skip
    parts = urlsplit(target)
    query: dict[str, str] = {
        key: ",".join(values)
        for key, values in parse_qs(parts.query, keep_blank_values=True).items()
    }
    now = time.time()
    context: dict[str, Any] = {
        "accountId": "000000000000", "apiId": "local", "domainName": "127.0.0.1",
        "domainPrefix": "local", "requestId": str(uuid.uuid4()), "routeKey": "$default",
        "stage": "$default", "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
        "timeEpoch": int(now * 1000),
        "http": {"method": method, "path": parts.path, "protocol": "HTTP/1.1",
                 "sourceIp": source_ip, "userAgent": headers.get("user-agent", "")},
    }  # fmt: skip
    if claims is not None:
        # API Gateway hands claims over as strings.
        context["authorizer"] = {
            "jwt": {"claims": {k: str(v) for k, v in claims.items()}, "scopes": None}
        }
    return {
        "version": "2.0", "routeKey": "$default", "rawPath": parts.path,
        "rawQueryString": parts.query, "headers": headers,
        "queryStringParameters": query or None, "requestContext": context,
        "body": body, "isBase64Encoded": False,
    }  # fmt: skip


class ApiServer:
    def __init__(
        self, handler: Handler, jwt: LocalJwt, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        # One request at a time: like one warm Lambda, and Powertools' resolver keeps the
        # current event in shared state.
        lock = threading.Lock()

        class Http(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                headers = {key.lower(): value for key, value in self.headers.items()}
                length = int(headers.get("content-length") or 0)
                if length > MAX_REQUEST_BYTES:
                    self._reply({"statusCode": 413, "headers": {}, "body": ""})
                    self.close_connection = True
                    return
                raw = self.rfile.read(length) if length else b""
                path = urlsplit(self.path).path
                claims = None
                if path not in PUBLIC_PATHS:
                    try:
                        claims = jwt.verify(headers.get("authorization"))
                    except AuthenticationError as exc:
                        self._reply(error_result(status_of(exc), exc.code, exc.message))
                        return
                event = http_api_event(
                    self.command, self.path, headers,
                    raw.decode("utf-8", errors="replace") if raw else None,
                    claims, self.client_address[0],
                )  # fmt: skip
                with lock:
                    result = handler(event, LocalContext("api", 30))
                self._reply(result)

            def _reply(self, result: dict[str, Any]) -> None:
                body = (result.get("body") or "").encode()
                self.send_response(int(result["statusCode"]))
                for name, value in (result.get("headers") or {}).items():
                    self.send_header(name, str(value))
                for name, values in (result.get("multiValueHeaders") or {}).items():
                    for value in values:
                        self.send_header(name, str(value))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def __getattr__(self, name: str) -> Any:
                # Every method (do_GET, do_QUERY, ...) reaches the resolver, which answers
                # 404 where there is no route, as API Gateway would.
                if name.startswith("do_"):
                    return self._serve
                raise AttributeError(name)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Http)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_port}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def start(self) -> ApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
