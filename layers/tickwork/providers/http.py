"""Outbound HTTP for every provider: one place for the rules a call out must keep.

- A total deadline per call, not per read: every socket operation (connect, TLS, each write
  and read) gets at most the time left, so a receiver trickling a byte at a time cannot hold
  a call past it.
- A bounded read: at most `max_body_bytes` of the response body are kept; the rest is never
  read.
- Name resolution is bounded too: it runs in a worker thread given at most what is left of
  the deadline (the system resolver has no timeout of its own); one that runs out is a
  Transient outcome, as nothing was sent.
- Destinations are checked: http(s) only, and every address a host resolves to must be public
  (not private, loopback, link-local, shared, reserved or a cloud metadata address) unless the
  operator allow-listed its network. The check runs when a URL is configured *and* when the
  socket connects, on the very address connected to, so DNS rebinding cannot slip past it.
- Nothing secret leaves: a URL is shown only masked (`redact.mask_url`), an answer only as
  its status and what the provider documents (`redact`); never a receiver's body, not even
  in the operator's log.
"""

from __future__ import annotations

import contextvars
import ipaddress
import json
import re
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from http import HTTPStatus
from typing import Any

import httpcore
import httpx

from tickwork.platform.errors import InputError
from tickwork.platform.observability import logger
from tickwork.providers.addresses import METADATA_ADDRESSES, IPAddress, IPNetwork, refusal
from tickwork.providers.base import Ambiguous, Outcome, Rejected, Transient
from tickwork.providers.redact import Redactor, mask_url, sanitize

__all__ = ["METADATA_ADDRESSES", "IPAddress", "IPNetwork", "Redactor", "mask_url", "sanitize"]

DEFAULT_MAX_BODY_BYTES = 64 * 1024
# No provider's Retry-After is honoured beyond this; the dispatcher caps backoff further.
RETRY_AFTER_CAP_SECONDS = 86400.0
# A URL being configured (an API request) waits at most this long for its host to resolve.
CONFIGURE_RESOLVE_SECONDS = 5.0


class UnsafeDestinationError(InputError):
    """A URL that may not be called: not http(s), or resolving to a non-public address."""

    code = "unsafe_url"


class ResolutionTimeoutError(Exception):
    """The host name did not resolve within the time left; no connection was attempted."""


# (host, port) -> getaddrinfo's answer; socket.getaddrinfo unless injected.
Resolver = Callable[[str, int], list[Any]]


def system_resolver(host: str, port: int) -> list[Any]:
    # Looked up at call time, so a patched socket.getaddrinfo is the one used.
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)


def _resolve_within(resolver: Resolver, host: str, port: int, seconds: float) -> list[Any]:
    """The resolver's answer, or ResolutionTimeoutError after `seconds`. A resolver that
    hangs keeps only its own daemon thread, until the system resolver gives up."""
    done = threading.Event()
    answer: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            answer.extend(resolver(host, port))
        except Exception as exc:  # handed to the caller's thread
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name="tickwork-resolve", daemon=True).start()
    if not done.wait(max(seconds, 0.0)):
        raise ResolutionTimeoutError(
            f"resolving {host!r} took longer than the {seconds:.1f} s left of the call"
        )
    if failure:
        raise failure[0]
    return answer


# ------------------------------------------------------------------------------ policy


@dataclass(frozen=True)
class OutboundPolicy:
    """Which destinations calls may reach: public addresses, plus the operator's allow-list
    (the local runtime's own receiver, local fake servers)."""

    allowed_networks: tuple[IPNetwork, ...] = ()
    resolver: Resolver = field(default=system_resolver, compare=False, repr=False)

    @classmethod
    def allowing(cls, networks: Iterable[str]) -> OutboundPolicy:
        try:
            parsed = tuple(ipaddress.ip_network(n.strip(), strict=False) for n in networks)
        except ValueError as exc:
            raise UnsafeDestinationError(f"not a network: {exc}") from exc
        return cls(parsed)

    def refuses(self, address: IPAddress) -> str | None:
        """Why `address` may not be called, or None when it may (`addresses.refusal`)."""
        return refusal(address, self.allowed_networks)

    def resolve(self, host: str, port: int, timeout: float | None = None) -> list[IPAddress]:
        """Every address `host` resolves to, each checked; refused if any is not allowed.
        With `timeout`, resolution that takes longer raises ResolutionTimeoutError."""
        try:
            literal = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            literal = None
        if literal is not None:
            addresses = [literal]
        else:
            try:
                if timeout is None:
                    infos = self.resolver(host, port)
                else:
                    infos = _resolve_within(self.resolver, host, port, timeout)
            except (OSError, UnicodeError) as exc:
                raise UnsafeDestinationError(f"host {host!r} does not resolve") from exc
            addresses = list(
                dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos)
            )
        if not addresses:
            raise UnsafeDestinationError(f"host {host!r} does not resolve")
        for address in addresses:
            reason = self.refuses(address)
            if reason is not None:
                raise UnsafeDestinationError(
                    f"host {host!r} resolves to {reason}; only public addresses may be called"
                )
        return addresses


def check_url(url: str, policy: OutboundPolicy, *, resolve: bool = True) -> httpx.URL:
    """A URL that may be configured: http(s), a host, and (resolving it) public addresses."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise UnsafeDestinationError("not a valid URL", field="url") from exc
    if parsed.scheme not in ("http", "https"):
        raise UnsafeDestinationError("only http and https URLs may be called", field="url")
    if not parsed.host:
        raise UnsafeDestinationError("the URL has no host", field="url")
    if resolve:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            policy.resolve(parsed.host, port, CONFIGURE_RESOLVE_SECONDS)
        except UnsafeDestinationError as exc:
            raise UnsafeDestinationError(exc.message, field="url") from exc
        except ResolutionTimeoutError as exc:
            raise UnsafeDestinationError(
                f"host {parsed.host!r} did not resolve within {CONFIGURE_RESOLVE_SECONDS:g} s",
                field="url",
            ) from exc
    return parsed


# -------------------------------------------------------------------- deadline + guard

# When the current call must be over (time.monotonic()); None outside a call.
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "tickwork_http_deadline", default=None
)


def _bounded(timeout: float | None, error: type[Exception]) -> float | None:
    deadline = _deadline.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the call's total deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self.inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        tls = self.inner.start_tls(
            ssl_context, server_hostname, _bounded(timeout, httpcore.ConnectTimeout)
        )
        return _DeadlineStream(tls)

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class _GuardedBackend(httpcore.NetworkBackend):
    """Resolves the host itself, refuses what the policy refuses, connects to the checked
    address (TLS still verifies the host name), and bounds every operation by the deadline."""

    def __init__(self, policy: OutboundPolicy) -> None:
        self.policy = policy
        self.inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = _bounded(timeout, httpcore.ConnectTimeout)
        addresses = self.policy.resolve(host, port, left)
        last: Exception | None = None
        for address in addresses:
            try:
                stream = self.inner.connect_tcp(
                    str(address), port, _bounded(timeout, httpcore.ConnectTimeout),
                    local_address, socket_options,
                )  # fmt: skip
            except httpcore.ConnectError as exc:
                last = exc
                continue
            return _DeadlineStream(stream)
        raise last or httpcore.ConnectError(f"could not connect to {host}")

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise UnsafeDestinationError("unix sockets may not be called")

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class GuardedTransport(httpx.HTTPTransport):
    def __init__(self, policy: OutboundPolicy) -> None:
        super().__init__(retries=0)
        # The same pool httpx builds, on a backend that checks every address it connects to.
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=_GuardedBackend(policy),
        )


def client(policy: OutboundPolicy, timeout: float) -> httpx.Client:
    """An httpx client that keeps the rules: no proxies from the environment (the address
    check must see the real destination), no redirects, uncompressed answers asked for."""
    return httpx.Client(
        transport=GuardedTransport(policy),
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
        headers={"accept-encoding": "identity", "user-agent": "Tickwork"},
    )


# ------------------------------------------------------------------------------- calls


@dataclass(frozen=True)
class Reply:
    status: int
    headers: httpx.Headers
    body: bytes  # at most max_body_bytes; read for documented fields, never shown or logged
    truncated: bool = False

    def json(self) -> Any:
        """The body as JSON, or None when it is not (or was cut)."""

        try:
            return json.loads(self.body)
        except ValueError:
            return None


def _decoded(raw: bytes, encoding: str, limit: int) -> bytes:
    """Undo gzip/deflate if a server compressed anyway, never expanding past `limit`."""
    if encoding in ("gzip", "x-gzip", "deflate"):
        try:
            return zlib.decompressobj(wbits=47).decompress(raw, limit)
        except zlib.error:
            return b""
    return raw[:limit]


def call(
    http: httpx.Client,
    method: str,
    url: str,
    *,
    total_seconds: float,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    **kwargs: Any,
) -> Reply:
    """One request, over within `total_seconds` from now, keeping a bounded body prefix.
    Raises httpx errors and UnsafeDestinationError; `outcome_of_error` classifies them."""
    token = _deadline.set(time.monotonic() + total_seconds)
    try:
        with http.stream(method, url, **kwargs) as response:
            raw = bytearray()
            truncated = False
            for chunk in response.iter_raw():
                raw.extend(chunk)
                if len(raw) > max_body_bytes:
                    truncated = True
                    break
            encoding = response.headers.get("content-encoding", "").strip().lower()
            body = _decoded(bytes(raw), encoding, max_body_bytes)
            return Reply(response.status_code, response.headers, body, truncated)
    finally:
        _deadline.reset(token)


def outcome_of_error(exc: Exception, where: str, redactor: Redactor | None = None) -> Outcome:
    """What a failed call means. `where` is the shown form of the destination (masked);
    `redactor` holds the call's secrets (a refusal's message names the host)."""
    if isinstance(exc, UnsafeDestinationError):
        return Rejected("unsafe_url", f"{where}: {(redactor or Redactor()).tenant(exc.message)}")
    if isinstance(exc, ResolutionTimeoutError):
        # Nothing was sent: the host name never resolved, so no connection was made.
        return Transient(f"could not connect to {where}: its host name did not resolve"
                         " within the call's deadline")  # fmt: skip
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        # Nothing was sent: no connection was made.
        return Transient(f"could not connect to {where} ({type(exc).__name__})")
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
        return Rejected("invalid_url", f"{where}: not a callable URL")
    return Ambiguous(f"request to {where} may have arrived ({type(exc).__name__})")


def status_text(status: int) -> str:
    """`HTTP 400 Bad Request`: the status and its standard reason phrase (never the one the
    server sent, which is free text)."""
    try:
        return f"HTTP {status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


# ------------------------------------------------------------------------- retry-after


def retry_after_seconds(
    value: str | None, now: datetime | None = None, cap: float = RETRY_AFTER_CAP_SECONDS
) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP-date), within [0, cap]; None when
    absent or unreadable. Never raises, whatever the header holds."""
    if not value:
        return None
    value = value.strip()
    if re.fullmatch(r"[0-9]+", value, re.ASCII):
        # A long digit string is beyond the cap anyway (and int() refuses > 4300 digits).
        return cap if len(value) > 12 else min(float(int(value)), cap)
    try:
        when = parsedate_to_datetime(value)
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return min(max(0.0, seconds), cap)


def reset_after_seconds(
    value: str | None, now: datetime | None = None, cap: float = RETRY_AFTER_CAP_SECONDS
) -> float | None:
    """A rate-limit reset header: Unix seconds, or an ISO 8601 time; as seconds from now."""
    if not value:
        return None
    value = value.strip()
    current = now or datetime.now(UTC)
    try:
        if re.fullmatch(r"[0-9]{1,12}(\.[0-9]+)?", value, re.ASCII):
            seconds = float(value) - current.timestamp()
        else:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            seconds = (when - current).total_seconds()
    except (ValueError, OverflowError):
        return None
    return min(max(0.0, seconds), cap)


# ---------------------------------------------------------------------------- logging


def log_answer(
    provider: str, action_id: object, url: str, reply: Reply | None, redactor: Redactor,
    error: Exception | None = None, detail: str | None = None,
) -> None:  # fmt: skip
    """An unsuccessful call, for the operator: the masked URL, the answer's status, type and
    size (never its body: a receiver's body may hold anything), what the provider's
    documented fields said (`detail`, as the tenant sees it), or the error, redacted."""
    extra: dict[str, Any] = {"provider": provider, "action_id": str(action_id),
                             "url": mask_url(url)}  # fmt: skip
    if reply is not None:
        extra |= {"status": reply.status, "body_bytes": len(reply.body),
                  "content_type": redactor.tenant(reply.headers.get("content-type", "")),
                  "truncated": reply.truncated}  # fmt: skip
    if detail:
        extra["detail"] = redactor.operator(detail)
    if error is not None:
        extra["error"] = redactor.operator(f"{type(error).__name__}: {error}")
    logger.warning("provider call did not succeed", extra=extra)
