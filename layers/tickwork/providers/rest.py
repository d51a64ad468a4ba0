"""What the HTTP API providers share: a guarded client with a total deadline, the base URL
(the provider's own, or the operator's override, e.g. a local fake server), and one call
that either answers or says what a failure to get an answer means.

Lookups (the `Lookup` capability) share one budget: however many calls a lookup makes
(a sign-in, pages of a search), all of them end within one outbound deadline.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tickwork.actions.model import Claimed
from tickwork.platform.observability import logger
from tickwork.providers import http
from tickwork.providers.base import (
    Delivered,
    LookupResult,
    Outcome,
    ProviderError,
    Transient,
    Unknown,
    Via,
)
from tickwork.providers.http import OutboundPolicy, Redactor, Reply

# When the current lookup must be over (time.monotonic()); None outside a lookup.
_lookup_until: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "tickwork_lookup_until", default=None
)


@contextmanager
def budget(seconds: float) -> Iterator[None]:
    """Every call made inside ends within `seconds` from now, together."""
    token = _lookup_until.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _lookup_until.reset(token)


def safe_lookup(
    provider: str, action: Claimed, seconds: float, run: Callable[[], LookupResult]
) -> LookupResult:
    """`run` within one deadline, never raising: any failure is Unknown, with a reason that
    names the kind of failure only (exception texts can carry URLs, bodies or tokens)."""
    try:
        with budget(seconds):
            return run()
    except Exception as exc:  # a lookup must answer, whatever went wrong
        logger.warning("provider lookup failed",
                       extra={"provider": provider, "action_id": str(action.id),
                              "error": type(exc).__name__})  # fmt: skip
        return Unknown(f"{provider} lookup failed ({type(exc).__name__})")


class RestProvider:
    name = "rest"
    default_api_url = ""
    idempotent = False
    io_bound = True

    def __init__(
        self,
        options: dict[str, Any],
        timeout: float = 10.0,
        policy: OutboundPolicy | None = None,
        max_body_bytes: int = http.DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self.policy = policy or OutboundPolicy()
        api_url = str(options.get("api_url") or self.default_api_url).rstrip("/")
        try:
            http.check_url(api_url, self.policy, resolve=False)
        except http.UnsafeDestinationError as exc:
            raise ProviderError(f"{self.name} options.api_url: {exc.message}") from exc
        self.api_url = api_url
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes
        self.client = http.client(self.policy, timeout)

    def request(
        self, action_id: object, method: str, url: str, redactor: Redactor, **kwargs: Any
    ) -> Reply | Outcome:
        """The reply, or the outcome of not getting one (logged for the operator)."""
        total = self.timeout
        until = _lookup_until.get()
        if until is not None:  # inside a lookup: what is left of its one deadline
            total = min(total, until - time.monotonic())
            if total <= 0:
                return Transient("the lookup's deadline passed")
        try:
            return http.call(
                self.client, method, url, total_seconds=total,
                max_body_bytes=self.max_body_bytes, **kwargs,
            )  # fmt: skip
        except Exception as exc:
            http.log_answer(self.name, action_id, url, None, redactor, exc)
            return http.outcome_of_error(exc, http.mask_url(url), redactor)

    def deliver(
        self,
        action: Claimed,
        method: str,
        url: str,
        redactor: Redactor,
        outcome: Callable[[Reply, Redactor], Outcome],
        **kwargs: Any,
    ) -> Outcome:
        """One send: the provider's answer read by its error table (`outcome`); an answer
        that is not a delivery is logged, redacted, for the operator."""
        reply = self.request(action.id, method, url, redactor, **kwargs)
        if not isinstance(reply, Reply):
            return reply
        result = outcome(reply, redactor)
        if not isinstance(result, Delivered):
            self.log(action.id, url, reply, redactor, unanswered(result))
        return result

    def send(self, action: Claimed, via: Via | None = None) -> Outcome:
        raise NotImplementedError

    def log(
        self, action_id: object, url: str, reply: Reply, redactor: Redactor, detail: str = ""
    ) -> None:
        http.log_answer(self.name, action_id, url, reply, redactor, detail=detail)


def field(body: Any, name: str) -> Any:
    return body.get(name) if isinstance(body, dict) else None


def unanswered(outcome: Outcome) -> str:
    return str(getattr(outcome, "message", "no answer"))
