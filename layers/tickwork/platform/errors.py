"""Domain errors. Each area has a base class; the API maps classes to HTTP status in one place."""

from __future__ import annotations

from typing import Any


class TickworkError(Exception):
    """Base of every error Tickwork raises on purpose."""

    code = "error"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


# Bad input: the caller can fix the request and try again.
class InputError(TickworkError):
    code = "invalid_input"

    def __init__(
        self, message: str, *, field: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        merged = dict(details or {})
        if field is not None:
            merged.setdefault("field", field)
        super().__init__(message, details=merged)
        self.field = field


class BadRequestError(InputError):
    """The request itself is malformed (a missing header, a body that is not JSON)."""

    code = "bad_request"


class IdempotencyKeyReusedError(InputError):
    code = "idempotency_key_reused"


class InvalidTimezoneError(InputError):
    code = "invalid_timezone"


class InvalidTimeError(InputError):
    code = "invalid_time"


class PastTimeError(InputError):
    code = "time_in_past"


class PayloadTooLargeError(InputError):
    code = "payload_too_large"


class UnknownActionTypeError(InputError):
    code = "unknown_action_type"


class UnknownTargetError(InputError):
    code = "unknown_target"


class InvalidRecurrenceError(InputError):
    code = "invalid_recurrence"


class QuotaExceededError(InputError):
    """The workspace holds as much of something as its quota allows."""

    code = "quota_exceeded"


# Too much, too fast: the caller may retry after `retry_after_seconds`.
class UnknownChannelError(InputError):
    """A suppression's channel that is not one of the list's (email, sms)."""

    code = "unknown_channel"


class InvalidAddressError(InputError):
    """An address that is not one of its channel's (an email address, an E.164 number)."""

    code = "invalid_address"


class RateLimitedError(TickworkError):
    code = "rate_limited"

    def __init__(
        self, message: str, *, retry_after_seconds: int, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(
            message, details={**(details or {}), "retry_after_seconds": retry_after_seconds}
        )
        self.retry_after_seconds = retry_after_seconds


# The request is well formed but the world disagrees.
class NotFoundError(TickworkError):
    code = "not_found"


class ConflictError(TickworkError):
    code = "conflict"


class AuthenticationError(TickworkError):
    code = "unauthenticated"


class ForbiddenError(TickworkError):
    code = "forbidden"


# Operating errors.
class ConfigError(TickworkError):
    code = "config"


class MigrationError(TickworkError):
    code = "migration"


class MigrationChecksumError(MigrationError):
    code = "migration_checksum"
