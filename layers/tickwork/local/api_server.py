"""The local API server. uvicorn serves HTTP/1.1 (parsed by h11); each request becomes an API
Gateway HTTP API (payload v2) event for the same Lambda handler, after the bearer token is
verified as the JWT authorizer would. What the server answers itself (a malformed request,
a head or body too large, a client too slow) is in the API's error shape, with a code the
docs' error table (docs/api/index.md) lists."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from tickwork.api import OPENAPI_PATH, public
from tickwork.api.errors import error_json, error_result, status_of
from tickwork.local.auth import LocalJwt
from tickwork.local.handlers import LocalContext
from tickwork.platform.errors import AuthenticationError

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
MAX_REQUEST_BYTES = 10 * 1024 * 1024  # API Gateway's payload limit
# API Gateway's limit on the request line and the header values together.
MAX_HEAD_BYTES = 10240
# What h11 buffers of a head still incomplete (names and framing come on top of the above).
MAX_HEAD_BUFFER = 2 * MAX_HEAD_BYTES
SOCKET_TIMEOUT_SECONDS = 10.0
# Threads running the (synchronous) handler; each keeps its own database connection.
WORKERS = 16
# How long a stop waits for requests being answered before it cuts them off.
STOP_GRACE_SECONDS = 5.0
PUBLIC_PATHS = frozenset({OPENAPI_PATH})
JSON_TYPE = (b"content-type", b"application/json")
CLOSE = (b"connection", b"close")

log = logging.getLogger("tickwork.local")
# A malformed request is answered (400 in the error shape), not worth a warning each time.
_protocol_log = logging.getLogger("tickwork.local.http")
_protocol_log.setLevel(logging.ERROR)


def http_api_event(
    method: str, target: str, headers: dict[str, str], body: str | None,
    claims: dict[str, Any] | None, source_ip: str,
) -> dict[str, Any]:  # fmt: skip
    parts = urlsplit(target)
    try:
        parsed = parse_qs(parts.query, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError as exc:
        raise RequestRefused(
            HTTPStatus.BAD_REQUEST, "bad_request",
            "the query string is not valid UTF-8 once percent-decoded",
        ) from exc  # fmt: skip
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
    """The request target as API Gateway hands it over: characters a URL may not hold
    percent-encoded, percent escapes kept as they came. (h11 takes only printable ASCII in
    a request target: raw UTF-8 is refused before this, and must come percent-encoded.)"""
    return quote(target, safe="/%?&=:@!$'()*+,;~[]#")


class RequestRefused(Exception):
    """What the server answers itself, before the API sees the request."""

    def __init__(self, status: HTTPStatus, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class _Disconnected(Exception):
    """The client went away before its request was whole: nobody to answer."""


# ---------------------------------------------------------------------------- the app


@dataclass(frozen=True)
class _Request:
    """A request read whole and checked, as the Lambda event will carry it."""

    method: str
    target: str  # path and query, percent-encoded as API Gateway hands them over
    headers: dict[str, str]
    body: str | None
    client: str


class ApiApp:
    """The ASGI adapter: the request read and checked here (head size, Content-Length,
    body size, UTF-8, a deadline on every read), then the token verified and the Lambda
    handler run in a worker thread (it is synchronous, and the API's resolver keeps its
    request state per thread). Routes the server would serve itself (the console's files)
    belong in `__call__`, before the handler."""

    def __init__(self, handler: Handler, jwt: LocalJwt, workers: ThreadPoolExecutor,
                 server: ApiServer) -> None:  # fmt: skip
        self.handler = handler
        self.jwt = jwt
        self.workers = workers
        self.server = server

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        try:
            request = await self._read(scope, receive)
        except RequestRefused as refused:
            await _reply(send, _refusal(refused), close=True)
            return
        except _Disconnected:
            return
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(self.workers, self._serve, request)
        except asyncio.CancelledError:
            # The server is stopping and gave up waiting for this request: it is answered,
            # and its task (this request's own) ends here.
            await _reply(send, error_result(
                HTTPStatus.SERVICE_UNAVAILABLE, "unavailable",
                "the service is briefly unavailable; retry",
            ), close=True)  # fmt: skip
            return
        await _reply(send, result)

    async def _read(self, scope: Any, receive: Any) -> _Request:
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope["headers"]:
            name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
            # Repeated headers are joined with commas, as API Gateway hands them over.
            headers[name] = f"{headers[name]},{value}" if name in headers else value
        target = scope["raw_path"].decode("ascii")
        if scope["query_string"]:
            target += "?" + scope["query_string"].decode("ascii")
        head = len(scope["method"]) + len(target) + sum(len(v) for _, v in scope["headers"])
        if head > MAX_HEAD_BYTES:
            raise RequestRefused(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "headers_too_large",
                f"the request line and header values are {head} bytes together; the limit"
                f" is {MAX_HEAD_BYTES}",
            )  # fmt: skip
        if "transfer-encoding" in headers:
            raise RequestRefused(
                HTTPStatus.BAD_REQUEST, "bad_request", "send the body with a Content-Length"
            )
        # h11 has refused a Content-Length that is not digits, and conflicting ones.
        length = int(headers.get("content-length") or 0)
        if length > MAX_REQUEST_BYTES:
            raise RequestRefused(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "payload_too_large",
                f"the request is larger than {MAX_REQUEST_BYTES} bytes",
            )  # fmt: skip
        raw = await self._body(receive, length) if length else b""
        try:
            body = raw.decode("utf-8") if raw else None
        except UnicodeDecodeError as exc:
            raise RequestRefused(
                HTTPStatus.BAD_REQUEST, "bad_request",
                f"the request body is not valid UTF-8 (byte {exc.start})",
            ) from exc  # fmt: skip
        client = scope["client"][0] if scope.get("client") else "127.0.0.1"
        return _Request(scope["method"], _path_of(target), headers, body, client)

    async def _body(self, receive: Any, length: int) -> bytes:
        chunks = bytearray()
        more = True
        while more:
            try:
                message = await asyncio.wait_for(receive(), self.server.timeout)
            except TimeoutError as exc:
                raise RequestRefused(
                    HTTPStatus.REQUEST_TIMEOUT, "request_timeout",
                    f"the body stopped after {len(chunks)} of {length} bytes (Content-Length)"
                    f" for {self.server.timeout:g} s",
                ) from exc  # fmt: skip
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunks += message.get("body", b"")
            more = bool(message.get("more_body"))
        return bytes(chunks)

    def _serve(self, request: _Request) -> dict[str, Any]:
        """In a worker thread: the token, the event, the handler."""
        try:
            claims = None
            path = urlsplit(request.target).path
            if path not in PUBLIC_PATHS and not public.is_public(path):
                claims = self.jwt.verify(request.headers.get("authorization"))
            event = http_api_event(
                request.method, request.target, request.headers, request.body, claims,
                request.client,
            )  # fmt: skip
        except RequestRefused as refused:
            return _refusal(refused)
        except AuthenticationError as exc:
            return error_result(status_of(exc), exc.code, exc.message)
        try:
            return self.handler(event, LocalContext("api", 30))
        except Exception:
            log.exception("the API handler failed")
            return error_result(
                HTTPStatus.INTERNAL_SERVER_ERROR, "internal", "something went wrong on our side"
            )


def _refusal(refused: RequestRefused) -> dict[str, Any]:
    return error_result(refused.status, refused.code, refused.message)


async def _reply(send: Any, result: dict[str, Any], *, close: bool = False) -> None:
    body = (result.get("body") or "").encode()
    headers = [
        (name.lower().encode("latin-1"), str(value).encode("latin-1"))
        for name, value in (result.get("headers") or {}).items()
    ]
    for name, values in (result.get("multiValueHeaders") or {}).items():
        headers += [(name.lower().encode("latin-1"), str(v).encode("latin-1")) for v in values]
    headers.append((b"content-length", str(len(body)).encode()))
    if close:
        headers.append(CLOSE)
    await send({"type": "http.response.start", "status": int(result["statusCode"]),
                "headers": headers})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


# ------------------------------------------------------------------------ the protocol


class _Connection(h11.Connection):
    """h11's connection, keeping the reason it refused a request (uvicorn drops it)."""

    refused: h11.RemoteProtocolError | None = None

    def next_event(self) -> Any:
        try:
            return super().next_event()
        except h11.RemoteProtocolError as exc:
            self.refused = exc
            raise


class JsonErrorsH11(H11Protocol):
    """uvicorn's h11 protocol with two changes: what it refuses itself (a request h11 cannot
    read: a garbage request line, conflicting Content-Length headers, a missing Host, a head
    over the buffer) is answered in the API's error shape instead of plain text; and a
    request head must arrive within the timeout (uvicorn bounds only the idle time between
    requests), else 408 and the connection is closed."""

    owner: ApiServer  # set on the subclass each ApiServer makes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = self._h11 = _Connection(h11.SERVER, MAX_HEAD_BUFFER)
        self.logger = _protocol_log
        self._head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # asyncio turns Nagle off only on sockets that say IPPROTO_TCP, which ours (bound
        # by socket.create_server) does not: the body of an answer on a kept-alive
        # connection then waited for the client's delayed ACK of its head, 40 ms.
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            self._disarm()  # answered, or the head is whole: the app's deadlines apply
        elif self._head_deadline is None:
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._head_deadline = self.loop.call_later(self.owner.timeout, self._head_late)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_late(self) -> None:
        self._head_deadline = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if not self.conn.trailing_data[0]:
            self.transport.close()  # nothing was asked: close quietly
            return
        self._refuse(
            HTTPStatus.REQUEST_TIMEOUT, "request_timeout",
            f"the request line and headers did not arrive within {self.owner.timeout:g} s",
        )  # fmt: skip

    def send_400_response(self, msg: str) -> None:
        refused = self._h11.refused
        if refused is not None and refused.error_status_hint == 431:
            self._refuse(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "headers_too_large",
                f"the request line and headers are larger than {MAX_HEAD_BUFFER} bytes",
            )  # fmt: skip
            return
        reason = f": {refused}" if refused is not None else ""
        self._refuse(
            HTTPStatus.BAD_REQUEST, "bad_request", f"the request is not valid HTTP/1.1{reason}"
        )

    def _refuse(self, status: HTTPStatus, code: str, message: str) -> None:
        body = error_json(code, message).encode()
        head = [JSON_TYPE, CLOSE, (b"content-length", str(len(body)).encode())]
        try:
            out = self.conn.send(h11.Response(status_code=status.value, headers=head,
                                              reason=status.phrase.encode()))  # fmt: skip
            out += self.conn.send(h11.Data(data=body))
            out += self.conn.send(h11.EndOfMessage())
            self.transport.write(out)
        except h11.LocalProtocolError:
            pass  # an answer had begun: nothing more can be said on this connection
        self.transport.close()


# -------------------------------------------------------------------------- the server


class _Server(uvicorn.Server):
    """uvicorn's server, stopped at once by `ApiServer.stop` rather than by its 0.1 s poll,
    and shut down without its fixed pauses (tests start and stop many)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.stop_requested = asyncio.Event()

    def request_stop(self) -> None:
        self.should_exit = True
        self.stop_requested.set()

    async def main_loop(self) -> None:
        await self.stop_requested.wait()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        state = self.server_state
        for connection in list(state.connections):
            connection.shutdown()  # idle ones close now; busy ones after their answer
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_GRACE_SECONDS
        while state.tasks and loop.time() < deadline:
            await asyncio.sleep(0.01)
        late = list(state.tasks)
        for task in late:
            task.cancel()  # the app answers each 503
        if late:
            await asyncio.wait(late, timeout=1.0)
        for connection in list(state.connections):
            if isinstance(connection, H11Protocol):
                connection.transport.close()
        await asyncio.sleep(0)


class ApiServer:
    """Binds its port when made (a busy port fails here, for `bind_port` to name), serves
    from `start` to `stop` on an event loop of its own thread. Requests are served
    concurrently (WORKERS at once); every read has a timeout, so a client that stops
    sending is answered 408 after `timeout` seconds."""

    def __init__(
        self, handler: Handler, jwt: LocalJwt, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.timeout = SOCKET_TIMEOUT_SECONDS
        self.socket = socket.create_server((host, port))
        self.url = f"http://{host}:{self.socket.getsockname()[1]}"
        self._workers = ThreadPoolExecutor(WORKERS, thread_name_prefix="tickwork-api")
        protocol = type("Protocol", (JsonErrorsH11,), {"owner": self})
        config = uvicorn.Config(
            ApiApp(handler, jwt, self._workers, self), http=protocol, interface="asgi3",
            lifespan="off", ws="none", log_config=None, access_log=False, proxy_headers=False,
            server_header=False, date_header=False,
            timeout_keep_alive=int(SOCKET_TIMEOUT_SECONDS),
            h11_max_incomplete_event_size=MAX_HEAD_BUFFER,
        )  # fmt: skip
        self._server = _Server(config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="tickwork-api", daemon=True)

    def start(self) -> ApiServer:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._server.serve(sockets=[self.socket]))
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._server.request_stop)
            self._thread.join()
        elif not self._loop.is_closed():
            self._loop.close()
        self.socket.close()
        self._workers.shutdown(wait=True, cancel_futures=True)
