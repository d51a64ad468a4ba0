"""Typed configuration, read once from the environment by `Settings.from_env()`.

Nothing reads the environment at import time: handlers build Settings on first use and
tests build them from a dict.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from datetime import timedelta
from functools import cache
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tickwork.platform.errors import ConfigError

ENV_PREFIX = "TICKWORK_"
# In AWS the action types come from this SSM parameter (a JSON document like
# TICKWORK_ACTION_TYPES), read through Powertools and cached; TICKWORK_ACTION_TYPES wins.
ACTION_TYPES_PARAMETER_ENV = "TICKWORK_ACTION_TYPES_PARAMETER"
PARAMETER_MAX_AGE_SECONDS = 300
ACTION_TYPE_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")
# A claimed row was due within the clock-skew tolerance of its claim, so a bound on the
# tolerance bounds how far ahead a claimed row's due time can be: the due-index ranges
# that find claimed and enqueued rows (Settings.in_flight_due_within) end there.
MAX_CLOCK_SKEW_TOLERANCE_SECONDS = 60.0
DEFAULT_TICK_INTERVAL_SECONDS = 60
# SQS's longest DelaySeconds: the tick cannot send a row further ahead than this.
MAX_SQS_DELAY_SECONDS = 900


def lookahead_for(tick_interval: Any) -> int:
    """The look-ahead that follows a tick interval: twice it, at most SQS's longest delay.
    An interval that is not a whole number is left to the field's own validation."""
    try:
        seconds = int(tick_interval if tick_interval is not None else DEFAULT_TICK_INTERVAL_SECONDS)
    except (TypeError, ValueError):
        seconds = DEFAULT_TICK_INTERVAL_SECONDS
    return max(0, min(MAX_SQS_DELAY_SECONDS, 2 * seconds))


MAX_ROWS_PER_MESSAGE = 500
MIN_UNSUBSCRIBE_KEY_BYTES = 32


RatePer = Literal["second", "minute", "hour"]
PER_SECONDS: dict[str, int] = {"second": 1, "minute": 60, "hour": 3600}
MAX_RATE_LIMITS = 3


class RateLimit(BaseModel):
    """At most `limit` sends a `per` (a window aligned to the second, minute or hour),
    counted across every dispatcher: an action type's or a connection's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    limit: int = Field(gt=0, le=1_000_000)
    per: RatePer

    @property
    def seconds(self) -> int:
        return PER_SECONDS[self.per]

    def scaled_to(self, seconds: int) -> int:
        """How many this limit lets through in `seconds` (a forecast's bucket)."""
        return self.limit * seconds // self.seconds

    def words(self) -> str:
        return f"{self.limit} {'an' if self.per == 'hour' else 'a'} {self.per}"


def distinct_limits(limits: tuple[RateLimit, ...]) -> tuple[RateLimit, ...]:
    """Limits with one per window length (the lowest wins), shortest window first."""
    by_per: dict[str, RateLimit] = {}
    for limit in limits:
        kept = by_per.get(limit.per)
        if kept is None or limit.limit < kept.limit:
            by_per[limit.per] = limit
    return tuple(sorted(by_per.values(), key=lambda limit: limit.seconds))


MAX_FAILOVER_PROVIDERS = 3


class FailoverProvider(BaseModel):
    """A provider an action type falls back to, with its own options. A row that names a
    connection is sent through the workspace's oldest active connection of this provider
    (docs/failover.md); a row that names none, through these options."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str
    options: dict[str, Any] = Field(default_factory=dict)


class FailoverConfig(BaseModel):
    """Providers after the type's own, in order, and when a row moves to the next one: after
    `threshold` transient answers of one provider for that row, or at once while that
    provider's circuit is open (`circuit_failures` transient or ambiguous answers within
    `circuit_window_seconds` open it for `circuit_cooldown_seconds`, then one probe)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    providers: tuple[FailoverProvider, ...] = Field(min_length=1, max_length=MAX_FAILOVER_PROVIDERS)
    threshold: int = Field(default=2, ge=1, le=20)
    circuit_failures: int = Field(default=5, ge=1, le=10_000)
    circuit_window_seconds: float = Field(default=60.0, gt=0, le=86_400)
    circuit_cooldown_seconds: float = Field(default=60.0, gt=0, le=86_400)


class ActionTypeConfig(BaseModel):
    """One kind of action: which provider sends it and what it may target."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str
    # None: any target key is accepted. Otherwise the closed set of targets.
    targets: frozenset[str] | None = None
    # Rows later than this when the tick sees them fail as `expired` instead of firing.
    max_lateness_seconds: int | None = Field(default=None, gt=0)
    # Provider-specific options (endpoint, sender, ...); secrets are referenced, not inlined.
    options: dict[str, Any] = Field(default_factory=dict)
    # At most this many sends a second, minute or hour of this type, across every
    # dispatcher: rows over a limit are held back to a later window, never failed.
    rate_limits: tuple[RateLimit, ...] = Field(default=(), max_length=MAX_RATE_LIMITS)
    # The provider's hourly limit: a rate limit of this many an hour (the older spelling).
    quota_per_hour: int | None = Field(default=None, gt=0)
    # Rows of this type and one workspace due within 50 ms of each other (queues.port.
    # MESSAGE_WINDOW) share a queue message of up to this many ids (a burst at 09:00 sends
    # a tenth of the messages at 10, and so do thousands of rows a second each due at its
    # own instant). A dispatcher invocation takes up to its batch size times this many rows:
    # lower it for a slow provider, raise it for thousands a second. At most 500, so ten
    # messages stay within SendMessageBatch's 256 KiB.
    rows_per_message: int = Field(default=10, ge=1, le=MAX_ROWS_PER_MESSAGE)
    # Attempts before a row fails as retry_exhausted (None: the settings' max_attempts).
    max_attempts: int | None = Field(default=None, ge=1, le=100)
    # Providers to fail over to when `provider` is down (docs/failover.md); None: none.
    failover: FailoverConfig | None = None

    @model_validator(mode="after")
    def _failover_names_other_providers(self) -> ActionTypeConfig:
        if self.failover is not None:
            names = self.providers
            if len(set(names)) != len(names):
                raise ValueError(f"failover names a provider twice: {', '.join(names)}")
        return self

    @property
    def providers(self) -> tuple[str, ...]:
        """The providers that may send this type, in the order they are tried."""
        fallbacks = self.failover.providers if self.failover is not None else ()
        return (self.provider, *(f.provider for f in fallbacks))

    @property
    def limits(self) -> tuple[RateLimit, ...]:
        """Every rate limit of the type, `quota_per_hour` included, one per window length."""
        hourly = (RateLimit(limit=self.quota_per_hour, per="hour"),) if self.quota_per_hour else ()
        return distinct_limits(self.rate_limits + hourly)

    @property
    def max_lateness(self) -> timedelta | None:
        if self.max_lateness_seconds is None:
            return None
        return timedelta(seconds=self.max_lateness_seconds)


# The engine's own type: outcome events to a workspace's endpoints (tickwork.events). It is
# always configured, has its own queue (a dead endpoint holds up no other type), and retries
# for longer than a provider type: 20 attempts with the backoff capped at 15 minutes span
# hours, so an endpoint down for a while gets its events when it is back.
EVENT_ACTION_TYPE = "event"
EVENT_TYPE_CONFIG = ActionTypeConfig(provider="event", max_attempts=20)
INTERNAL_ACTION_TYPES = frozenset({EVENT_ACTION_TYPE})

DEFAULT_ACTION_TYPES: dict[str, ActionTypeConfig] = {
    "webhook": ActionTypeConfig(provider="webhook"),
    "log": ActionTypeConfig(provider="log"),
    EVENT_ACTION_TYPE: EVENT_TYPE_CONFIG,
}


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # Where the database is: a URL, or (in AWS) a Secrets Manager secret of the RDS shape.
    database_url: str | None = None
    database_secret_arn: str | None = None
    # RDS Proxy endpoint, used instead of the host named in the secret.
    database_host: str | None = None
    # The API login's own secret (its password); the migration function sets the role's
    # password from it. Only the migration function is given this variable.
    api_database_secret_arn: str | None = None

    action_types: dict[str, ActionTypeConfig] = Field(
        default_factory=lambda: dict(DEFAULT_ACTION_TYPES)
    )

    # Input rules.
    past_grace_seconds: int = Field(default=60, ge=0)
    # The scheduling horizon: every instant the API takes is within this many days of now,
    # ahead or ago. At most 100 years, so that nothing computed from an instant (an offset,
    # a drip's waits) can leave the years a datetime holds.
    max_horizon_days: int = Field(default=3650, gt=0, le=36500)
    max_manual_retries: int = Field(default=5, ge=0)

    # The web console's sign-in through the stack's JWT issuer (OIDC authorization code with
    # PKCE): its authorize and token endpoints and the public client's id. Unset, the console
    # asks for a pasted token instead.
    console_authorize_url: str | None = None
    console_token_url: str | None = None
    console_client_id: str | None = None
    console_scopes: str = "openid"

    # Where the stack's API is reached from outside (https://api.example.com): the base of
    # links sent in messages (one-click unsubscribe) and of callbacks providers are given.
    # HTTPS, or plain HTTP on loopback (the local runtime's own server).
    public_api_url: str | None = None
    # The key that signs unsubscribe links (HMAC-SHA256), at least 32 bytes. In AWS it is
    # read from a Secrets Manager secret (`unsubscribe_key_secret_arn`) when the runtime is
    # built; locally it is made once and kept in the data directory. Never shown or logged.
    unsubscribe_key: str | None = Field(default=None, repr=False)
    unsubscribe_key_secret_arn: str | None = None
    # True where a function only checks that a message may carry a link, and its dispatcher
    # signs it (the reconciler scheduling intents' rows): the stack has a key, this function
    # need not hold it (least privilege).
    unsubscribe_links_elsewhere: bool = False

    # Kill switches: dispatch stops, rows stay queued, nothing is lost.
    dispatch_enabled: bool = True
    paused_action_types: frozenset[str] = frozenset()

    # Tick. Its interval is the stack's TickIntervalSeconds (the EventBridge schedule); the
    # look-ahead, unless set, is twice it (at most SQS's longest delay), so a row due just
    # after the next tick's run is still sent from this one with its delay.
    tick_interval_seconds: int = Field(
        default=DEFAULT_TICK_INTERVAL_SECONDS, ge=1, le=MAX_SQS_DELAY_SECONDS
    )
    lookahead_seconds: int = Field(
        default=2 * DEFAULT_TICK_INTERVAL_SECONDS, ge=0, le=MAX_SQS_DELAY_SECONDS
    )
    tick_budget_seconds: float = Field(default=40.0, gt=0)
    # Per-row entries (id, type, outcome) a tick's summary and log line carry; the rest are
    # counted. 0: counts only.
    tick_summary_items: int = Field(default=100, ge=0, le=10_000)
    tick_batch_size: int = Field(default=2000, gt=0)
    stuck_timeout_seconds: int = Field(default=900, gt=0)
    redelivery_timeout_seconds: int = Field(default=900, gt=0)

    # Engine connections: the server ends a transaction left idle this long (a hung or
    # frozen process holding row locks) and a statement in one running this long. The idle
    # limit must exceed the longest pause inside a transaction: the tick's queue send while
    # it holds its marks (seconds normally). 0: no limit. Migrations are exempt.
    db_idle_in_transaction_timeout_seconds: float = Field(default=60.0, ge=0)
    db_statement_timeout_seconds: float = Field(default=300.0, ge=0)

    # Dispatch.
    max_attempts: int = Field(default=5, ge=1)
    backoff_base_seconds: float = Field(default=2.0, gt=0)
    backoff_cap_seconds: float = Field(default=900.0, gt=0)
    # The longest Retry-After honoured (and at most the action type's max lateness): a
    # receiver asking for more is tried again after this long.
    max_retry_after_seconds: float = Field(default=86400.0, gt=0)
    provider_concurrency: int = Field(default=8, ge=1)
    # A provider call's total deadline (connect, send, answer), not a per-read timeout.
    provider_timeout_seconds: float = Field(default=10.0, gt=0)
    # At most this much of a provider's answer is read.
    provider_max_response_bytes: int = Field(default=65536, ge=1024)
    # Networks (CIDR, comma-separated) calls may reach although not public: the local
    # runtime's receiver, fake servers. Everything else private, loopback, link-local or
    # metadata is refused.
    outbound_allowed_networks: frozenset[str] = frozenset()

    # Connections' credentials: one Secrets Manager secret each, named under this prefix
    # (the stack name), read through a cache kept at most this long.
    secrets_prefix: str = Field(default="tickwork", min_length=1, max_length=200)
    secret_max_age_seconds: int = Field(default=60, ge=0, le=3600)
    # A message may arrive up to this much before its row is due; the dispatcher waits it out.
    max_early_wait_seconds: float = Field(default=1.5, ge=0)
    # How far the dispatcher's clock may run ahead of the database's without a row being
    # refused as not yet due.
    clock_skew_tolerance_seconds: float = Field(
        default=0.5, ge=0, le=MAX_CLOCK_SKEW_TOLERANCE_SECONDS
    )
    # The operations view (GET /v1/operations) warns of a transaction open longer than this
    # (it holds back vacuum's clean-up, so the hot updates stop being HOT), and of a type's
    # backlog (rows due and not finished) that ends its window above where it started and
    # above this many rows.
    ops_old_transaction_seconds: float = Field(default=600.0, ge=0)
    ops_backlog_warning_rows: int = Field(default=100, ge=0)
    # A row left `submitted` this long was claimed by a dispatcher that died (more than the
    # dispatcher's timeout): its redelivered message claims it again when the provider
    # deduplicates (webhooks); otherwise it becomes failed/`stuck` after the stuck timeout.
    reclaim_after_seconds: int = Field(default=120, gt=0)
    # When the database is unreachable: how long a dispatcher waits for it before failing
    # the batch, and how long the failed messages then stay hidden (base, doubled per
    # receive, capped below the queue's visibility timeout) instead of the whole timeout.
    database_wait_seconds: float = Field(default=5.0, ge=0)
    retry_visibility_base_seconds: float = Field(default=5.0, ge=0)
    retry_visibility_cap_seconds: float = Field(default=300.0, ge=0, le=43200)

    # Reconciler (schedule intents -> scheduled_actions).
    # Age gate: a row younger than this is never cancelled by the reconciler.
    reconcile_min_age_seconds: int = Field(default=120, ge=0)
    # Intents that still have live rows are looked at again this often, changed or not.
    reconcile_sweep_seconds: int = Field(default=3600, gt=0)
    reconcile_batch_size: int = Field(default=500, gt=0)
    reconcile_budget_seconds: float = Field(default=40.0, gt=0)

    # The delivery ledger: each provider call is recorded (action_attempts) with its outcome,
    # in the finalize's own statement. Off only to measure what it costs (make bench).
    attempts_ledger: bool = True
    # The resolver: rows failed `ambiguous` or `stuck` are settled with the provider's lookup
    # (where it has one) every minute; an unresolved one is asked again after the recheck.
    resolve_enabled: bool = True
    resolve_batch_size: int = Field(default=100, gt=0)
    resolve_budget_seconds: float = Field(default=40.0, gt=0)
    resolve_recheck_seconds: int = Field(default=300, ge=0)

    # Recurring schedules. The expander keeps occurrences materialized this far ahead.
    recurring_window_days: int = Field(default=14, ge=1, le=90)
    # Rules that fire more often than this (between two consecutive occurrences) are refused.
    recurring_min_interval_seconds: int = Field(default=300, ge=1)
    # Defaults of new schedules: how late a missed occurrence may still fire, and how many
    # failed occurrences in a row pause the schedule.
    recurring_catch_up_seconds: int = Field(default=3600, ge=0, le=86400)
    recurring_max_failures: int = Field(default=5, ge=1, le=1000)
    # How far in the past a schedule's dtstart may be.
    recurring_max_past_days: int = Field(default=366, ge=0, le=36500)
    # Schedule ids read per batch, and how long one expander run keeps going.
    expander_batch_size: int = Field(default=100, gt=0)
    expander_budget_seconds: float = Field(default=240.0, gt=0)

    # Per-workspace quotas; 0 turns one off. Counts are refused with 422, the rates with
    # 429. These are the stack's defaults: an operator overrides any of them for one
    # workspace (`tickwork workspace limits`, stored in workspaces.limits).
    quota_active_actions: int = Field(default=100_000, ge=0)  # queued or submitted rows
    quota_recurring_schedules: int = Field(default=500, ge=0)  # schedules not ended
    # Rows one schedule may materialize in its window (every 10 minutes for 14 days: 2016).
    quota_schedule_window_rows: int = Field(default=2000, ge=0)
    quota_api_requests_per_minute: int = Field(default=1200, ge=0)
    # Rules not deleted. A real automation setup has tens of rules (the docs' podcast
    # example has five); 500 leaves room for generated ones without letting a tenant make
    # the thousands whose fan-out starved the others (issue 33).
    quota_rules: int = Field(default=500, ge=0)
    # Recipients registered: a newsletter or a clinic's patients fit; a scraped list does not.
    quota_recipients: int = Field(default=100_000, ge=0)
    # Actions one event may make, which is also how many enabled rules one event type may
    # have: a booking that fans out to a few dozen notifications is normal, one event making
    # a thousand webhooks (the burst of issue 33) is not.
    quota_actions_per_event: int = Field(default=100, ge=0)
    # Actions API requests of a workspace may create per minute (100 a second, sustained;
    # 60 events at the per-event cap). Rows the crons make are not counted.
    quota_actions_per_minute: int = Field(default=6000, ge=0)
    # Suppression-list entries the API may add: as many as recipients, with room for the
    # addresses providers report. Entries from links and providers are never refused.
    quota_suppressions: int = Field(default=100_000, ge=0)
    # Digests collecting at once (each holds up to 200 events and 1 MiB): a digest per
    # recipient and key for a busy workspace, not one per event of a flood.
    quota_digests: int = Field(default=10_000, ge=0)

    # Delivery feedback (providers' status callbacks, POST /v1/callbacks/{connection_id}).
    # public_api_url (above) is where providers call back (Twilio signs the whole URL):
    # unset, the request's own scheme and host are used, and Twilio is asked for status
    # callbacks on every SMS only when it is set.
    # One more origin (scheme://host:port) SNS signing certificates and subscription URLs
    # may come from besides https://sns.<region>.amazonaws.com: a local stand-in, tests.
    sns_certificate_origin: str | None = None
    # How long a callback's event is remembered, so that a retried or replayed one is a
    # duplicate that changes nothing.
    callback_receipt_days: int = Field(default=7, ge=1, le=365)

    # Bounded history (docs/retention.md): finished rows (and what hangs on them) older than
    # a workspace's retention, its own (PATCH /v1/workspace) or else this many days, are
    # archived and then removed from the hot tables, in batches of `retention_batch_size`
    # rows, each its own short transaction, for at most `retention_budget_seconds` a run.
    retention_days: int = Field(default=90, ge=7, le=3650)
    retention_enabled: bool = True
    retention_batch_size: int = Field(default=1000, ge=1, le=5000)
    retention_budget_seconds: float = Field(default=240.0, gt=0)
    # A pause after each batch: the removal takes at most about batch / (batch time +
    # pause) of the database's time, and leaves the rest to the engine (make bench-scale).
    retention_pause_seconds: float = Field(default=0.1, ge=0, le=60)
    # Where removed rows are archived first: the stack's S3 bucket (under the prefix) in
    # AWS, a folder locally. With neither, nothing is removed: rows are never dropped unkept.
    archive_bucket: str | None = None
    archive_prefix: str = Field(default="archive/", max_length=200)
    archive_dir: str | None = None

    # Where each action type's SQS queue is (AWS); the local runtime uses its in-process
    # queue. By convention the queue of type T is `<queue_url_prefix>T`; `queue_urls` names
    # exceptions explicitly (tests, hand-made queues).
    queue_url_prefix: str | None = None
    queue_urls: dict[str, str] = Field(default_factory=dict)

    @field_validator("action_types")
    @classmethod
    def _queue_safe_names(cls, value: dict[str, ActionTypeConfig]) -> dict[str, ActionTypeConfig]:
        # A type's name is part of its queue's and its function's names.
        bad = sorted(name for name in value if not ACTION_TYPE_NAME.fullmatch(name))
        if bad:
            raise ValueError(
                f"action type names must be 1-40 letters, digits, '_' or '-': {', '.join(bad)}"
            )
        # The internal type is always there, as the engine defines it unless configured.
        return {EVENT_ACTION_TYPE: EVENT_TYPE_CONFIG} | value

    @field_validator("console_authorize_url", "console_token_url")
    @classmethod
    def _console_url(cls, value: str | None) -> str | None:
        # The browser is sent there with a code verifier: HTTPS, or plain HTTP on loopback
        # (a local identity provider, the tests').
        if value is None:
            return None
        parts = urlsplit(value)
        loopback = parts.hostname in {"127.0.0.1", "localhost", "::1"}
        secure = parts.scheme == "https" or (parts.scheme == "http" and loopback)
        if not parts.hostname or not secure:
            raise ValueError(f"{value!r} is not an https:// URL")
        return value

    @field_validator("public_api_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        # Recipients' mail clients open and POST to it: HTTPS, or HTTP on loopback locally.
        if value is None:
            return None
        parts = urlsplit(value)
        loopback = parts.hostname in {"127.0.0.1", "localhost", "::1"}
        secure = parts.scheme == "https" or (parts.scheme == "http" and loopback)
        if not parts.hostname or not secure or parts.query or parts.fragment:
            raise ValueError(f"public_api_url {value!r} is not an https:// URL without a query")
        return value.rstrip("/")

    @field_validator("unsubscribe_key")
    @classmethod
    def _unsubscribe_key(cls, value: str | None) -> str | None:
        return None if value is None else check_unsubscribe_key(value)

    @field_validator("paused_action_types", "outbound_allowed_networks", mode="before")
    @classmethod
    def _split_csv(cls, value: Any) -> Any:
        if isinstance(value, str):
            return frozenset(part.strip() for part in value.split(",") if part.strip())
        return value

    @model_validator(mode="before")
    @classmethod
    def _lookahead_follows_the_interval(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "lookahead_seconds" in data:
            return data
        return data | {"lookahead_seconds": lookahead_for(data.get("tick_interval_seconds"))}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Build settings from TICKWORK_* variables (and DATABASE_URL)."""
        source = os.environ if env is None else env
        values: dict[str, Any] = {}
        if source.get("DATABASE_URL"):
            values["database_url"] = source["DATABASE_URL"]
        json_fields = {"action_types", "queue_urls"}
        parameter = source.get(ACTION_TYPES_PARAMETER_ENV)
        if parameter and not source.get(ENV_PREFIX + "ACTION_TYPES"):
            values["action_types"] = _action_types_from_ssm(parameter)
        for name in cls.model_fields:
            raw = source.get(ENV_PREFIX + name.upper())
            if raw is None or raw == "":
                continue
            if name in json_fields:
                try:
                    values[name] = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise ConfigError(
                        f"{ENV_PREFIX}{name.upper()} is not valid JSON: {exc}"
                    ) from exc
            else:
                values[name] = raw
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise ConfigError(f"invalid configuration: {exc}") from exc

    def queue_url(self, action_type: str) -> str | None:
        """The SQS queue URL of `action_type`: named explicitly, or by the naming convention."""
        explicit = self.queue_urls.get(action_type)
        if explicit:
            return explicit
        if self.queue_url_prefix and action_type in self.action_types:
            return self.queue_url_prefix + action_type
        return None

    def all_queue_urls(self) -> dict[str, str]:
        """Every configured action type's queue URL (types without one are left out)."""
        urls = {name: self.queue_url(name) for name in self.action_types}
        return {name: url for name, url in urls.items() if url}

    def action_type_of_queue(self, records: list[dict[str, Any]]) -> str | None:
        """The action type whose queue SQS records came from (by their queue's name)."""
        arns = {str(record.get("eventSourceARN", "")) for record in records}
        names = {arn.rsplit(":", 1)[-1] for arn in arns if arn}
        for action_type in self.action_types:
            url = self.queue_url(action_type)
            if url and url.rsplit("/", 1)[-1] in names:
                return action_type
        return None

    def action_type(self, name: str) -> ActionTypeConfig | None:
        return self.action_types.get(name)

    def rows_per_message(self, action_type: str) -> int:
        """How many rows of a type due together one queue message may carry (one for a
        type no longer configured)."""
        config = self.action_types.get(action_type)
        return config.rows_per_message if config is not None else 1

    def in_flight_due_within(self) -> float:
        """How far past now a row in a queue or claimed can be due: marked rows were due
        within the look-ahead, claimed ones within the clock-skew tolerance (and the mark's
        horizon is the dispatcher's clock, at most that tolerance off the database's)."""
        return self.lookahead_seconds + MAX_CLOCK_SKEW_TOLERANCE_SECONDS

    def dispatch_allowed(self, action_type: str) -> bool:
        return self.dispatch_enabled and action_type not in self.paused_action_types


def check_unsubscribe_key(value: str) -> str:
    """The key, or ConfigError when it is too short to sign with (HMAC-SHA256 wants at
    least its 32-byte output)."""
    size = len(value.encode("utf-8"))
    if size < MIN_UNSUBSCRIBE_KEY_BYTES:
        raise ConfigError(
            f"the unsubscribe key (TICKWORK_UNSUBSCRIBE_KEY or its secret) is {size} bytes;"
            f" it must be at least {MIN_UNSUBSCRIBE_KEY_BYTES} random bytes (e.g. the output"
            " of `openssl rand -hex 32`)"
        )
    return value


def _action_types_from_ssm(name: str) -> Any:
    """The action-type document kept in SSM Parameter Store (cached by Powertools)."""
    from aws_lambda_powertools.utilities import parameters  # noqa: PLC0415 - lazy: Parameters builds boto3 clients (cold start)

    try:
        return parameters.get_parameter(name, transform="json", max_age=PARAMETER_MAX_AGE_SECONDS)
    except parameters.exceptions.TransformParameterError as exc:
        raise ConfigError(f"SSM parameter {name} is not valid JSON: {exc}") from exc
    except parameters.exceptions.GetParameterError as exc:
        raise ConfigError(f"SSM parameter {name} cannot be read: {exc}") from exc


@cache
def settings() -> Settings:
    """The process-wide settings, read from the environment on first use."""
    return Settings.from_env()
