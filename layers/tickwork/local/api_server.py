"""The local API server: HTTP requests become API Gateway HTTP API (payload v2) events for
the same Lambda handler, after the bearer token is verified as the JWT authorizer would."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from tickwork.api import OPENAPI_PATH
from tickwork.api.errors import error_result, status_of
from tickwork.errors import AuthenticationError
from tickwork.local.auth import LocalJwt
from tickwork.local.handlers import LocalContext

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
MAX_REQUEST_BYTES = 10 * 1024 * 1024  # API Gateway's own limit
SOCKET_TIMEOUT_SECONDS = 10.0
PUBLIC_PATHS = frozenset({OPENAPI_PATH})


def http_api_event(
    method: str, target: str, headers: dict[str, str], body: str | None,
    claims: dict[str, Any] | None, source_ip: str,
) -> dict[str, Any]:  # fmt: skip
    parts = urlsplit(target)
    try:
        parsed = parse_qs(parts.query, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError as exc:
        raise RequestRefused(
            HTTPStatus.BAD_REQUEST, "the query string is not valid UTF-8 once percent-decoded"
        ) from exc
    query: dict[str, str] = {key: ",".join(values) for key, values in parsed.items()}
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


def _path_of(target: str) -> str:
    """The request target as API Gateway hands it over: non-ASCII bytes percent-encoded
    (http.server decoded the request line as Latin-1), percent escapes kept as they came."""
    return quote(target.encode("latin-1", "replace"), safe="/%?&=:@!$'()*+,;~[]#")


class RequestRefused(Exception):
    """What the server answers itself, before the API sees the request."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _content_length(headers: dict[str, str]) -> int:
    if "transfer-encoding" in headers:
        raise RequestRefused(HTTPStatus.BAD_REQUEST, "send the body with a Content-Length")
    raw = headers.get("content-length")
    if raw is None or raw.strip() == "":
        return 0
    if not raw.strip().isdigit():
        raise RequestRefused(
            HTTPStatus.BAD_REQUEST, f"Content-Length {raw[:40]!r} is not a number of bytes"
        )
    length = int(raw)
    if length > MAX_REQUEST_BYTES:
        raise RequestRefused(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            f"the request is larger than {MAX_REQUEST_BYTES} bytes",
        )
    return length


class ApiServer:
    """Serves requests concurrently, a thread each (the API's resolver keeps its request
    state per thread); every socket read has a timeout, so a client that stops sending
    costs a thread for SOCKET_TIMEOUT_SECONDS at most."""

    def __init__(
        self, handler: Handler, jwt: LocalJwt, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        class Http(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = SOCKET_TIMEOUT_SECONDS

            def _serve(self) -> None:
                headers = {key.lower(): value for key, value in self.headers.items()}
                try:
                    event = self._event(headers)
                except RequestRefused as refused:
                    self.close_connection = True
                    code = "payload_too_large" if refused.status == 413 else "bad_request"
                    self._reply(error_result(refused.status, code, refused.message))
                    return
                except AuthenticationError as exc:
                    self._reply(error_result(status_of(exc), exc.code, exc.message))
                    return
                except TimeoutError:
                    self.close_connection = True
                    return
                self._reply(handler(event, LocalContext("api", 30)))

            def _event(self, headers: dict[str, str]) -> dict[str, Any]:
                length = _content_length(headers)
                raw = self.rfile.read(length) if length else b""
                if len(raw) < length:
                    raise RequestRefused(
                        HTTPStatus.BAD_REQUEST,
                        f"the body ended after {len(raw)} of {length} bytes (Content-Length)",
                    )
                try:
                    body = raw.decode("utf-8") if raw else None
                except UnicodeDecodeError as exc:
                    raise RequestRefused(
                        HTTPStatus.BAD_REQUEST,
                        f"the request body is not valid UTF-8 (byte {exc.start})",
                    ) from exc
                target = _path_of(self.path)
                claims = None
                if urlsplit(target).path not in PUBLIC_PATHS:
                    claims = jwt.verify(headers.get("authorization"))
                return http_api_event(
                    self.command, target, headers, body, claims, self.client_address[0]
                )

            def _reply(self, result: dict[str, Any]) -> None:
                body = (result.get("body") or "").encode()
                self.send_response(int(result["statusCode"]))
                for name, value in (result.get("headers") or {}).items():
                    self.send_header(name, str(value))
                for name, values in (result.get("multiValueHeaders") or {}).items():
                    for value in values:
                        self.send_header(name, str(value))
                self.send_header("Content-Length", str(len(body)))
                if self.close_connection:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)

            def __getattr__(self, name: str) -> Any:
                # Every method (do_GET, do_QUERY, ...) reaches the resolver, which answers
                # 405 or 404 where there is no route, as API Gateway would.
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
