"""The dispatcher: claims a batch of rows, calls their provider, records what happened.

One batch of messages costs two statements in the usual case: one claim for the whole
batch (`UPDATE ... WHERE id = ANY(...) AND status = 'queued'`) and one finalize. Provider
outcomes are recorded in the rows, never thrown; only infrastructure errors (the database
unreachable) come back as failed messages, for the queue to deliver again.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from tickwork import actions
from tickwork.actions import Action, Finalization
from tickwork.config import ActionTypeConfig, Settings
from tickwork.observability import emit, logger, metrics, metrics_enabled
from tickwork.providers.base import (
    Ambiguous,
    Delivered,
    NotSent,
    Outcome,
    Provider,
    ProviderError,
    Rejected,
)
from tickwork.queues.port import DecodedBody, decode_body
from tickwork.runtime import Runtime
from tickwork.tick import enqueue_soon, unmark
from tickwork.wallclock import utcnow

# Messages due within this much of each other are claimed together.
WAVE_SECONDS = 0.005
INFRASTRUCTURE_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)


class InfrastructureError(Exception):
    """The batch could not be processed for reasons outside the rows (database down)."""


@dataclass
class DispatchSummary:
    received: int = 0
    ignored: int = 0  # not a Tickwork message
    claimed: int = 0
    skipped: int = 0  # not claimable: cancelled, already claimed, not due, too late
    paused: int = 0  # held back by a kill switch
    published: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    requeued: int = 0
    reverted: int = 0
    lags: list[float] = field(default_factory=list)  # provider call time − due time, seconds


@dataclass
class DispatchResult:
    failed_message_ids: list[str]
    summary: DispatchSummary


def backoff_seconds(
    attempt: int, settings: Settings, retry_after: float | None, rand: Callable[[], float]
) -> float:
    """Exponential backoff with equal jitter, never sooner than the provider's Retry-After."""
    exponential = settings.backoff_base_seconds * 2.0 ** max(0, attempt - 1)
    ceiling = min(settings.backoff_cap_seconds, exponential)
    delay = ceiling / 2 + rand() * ceiling / 2
    return max(delay, retry_after or 0.0)


def decide(
    action: Action,
    outcome: Outcome,
    provider_idempotent: bool,
    settings: Settings,
    now: datetime,
    rand: Callable[[], float] = random.random,
) -> Finalization:
    """Where a claimed row goes after its provider answered."""
    if isinstance(outcome, Delivered):
        return actions.published(action.id, outcome.provider_id)
    if isinstance(outcome, Rejected):
        return actions.failed(action.id, outcome.code, outcome.message)
    if isinstance(outcome, NotSent):
        return actions.reverted(
            action.id, now + timedelta(seconds=settings.backoff_base_seconds), outcome.message
        )
    if isinstance(outcome, Ambiguous) and not provider_idempotent:
        # It may have arrived, and the provider cannot tell a second copy from a new one.
        return actions.failed(action.id, "ambiguous", outcome.message)
    # Transient, or ambiguous towards a provider that deduplicates: try again later.
    budget = settings.max_attempts * (1 + action.manual_retries)
    if action.attempt_count >= budget:
        return actions.failed(
            action.id,
            "retry_exhausted",
            f"{outcome.message} (gave up after {action.attempt_count} attempts)",
        )
    delay = backoff_seconds(action.attempt_count, settings, outcome.retry_after, rand)
    return actions.requeued(action.id, now + timedelta(seconds=delay), outcome.message)


def _ready(result: tuple[Outcome, float]) -> Callable[[], tuple[Outcome, float]]:
    return lambda: result


@dataclass
class _CalledBatch:
    results: list[tuple[Action, tuple[Outcome, float]]]
    # Rows not claimed (cancelled, taken, too late) or not yet due: back to the tick.
    handed_back: list[UUID]


class Dispatcher:
    def __init__(
        self,
        runtime: Runtime,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], datetime] = utcnow,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.sleep = sleep
        self.clock = clock
        self.rand = rand

    def dispatch(
        self, messages: Sequence[tuple[str, str]], deadline: float | None = None
    ) -> DispatchResult:
        """Process (message_id, body) pairs. `deadline` (time.monotonic) is when provider
        calls must stop being started; rows claimed after it are handed back unsent."""
        summary = DispatchSummary(received=len(messages))
        message_ids: dict[UUID, list[str]] = defaultdict(list)
        by_type: dict[str, dict[UUID, DecodedBody]] = defaultdict(dict)
        for message_id, body in messages:
            decoded = decode_body(body)
            if decoded is None:
                summary.ignored += 1
                logger.warning("ignoring a message that is not Tickwork's", extra={"body": body})
                continue
            message_ids[decoded.action_id].append(message_id)
            by_type[decoded.action_type][decoded.action_id] = decoded
        failed: list[str] = []
        for action_type, entries in by_type.items():
            try:
                self._dispatch_type(action_type, list(entries.values()), summary, deadline)
            except INFRASTRUCTURE_ERRORS:
                logger.exception("database unavailable; the batch will be redelivered")
                failed.extend(mid for action_id in entries for mid in message_ids[action_id])
        return DispatchResult(failed, summary)

    def _dispatch_type(
        self,
        action_type: str,
        entries: list[DecodedBody],
        summary: DispatchSummary,
        deadline: float | None,
    ) -> None:
        conn = self.runtime.db.connection()
        provider = self._provider(action_type)
        config = self.settings.action_type(action_type)
        if provider is None or config is None:
            # Paused, unknown or misconfigured: leave the rows queued for the tick.
            unmark(conn, [entry.action_id for entry in entries])
            summary.paused += len(entries)
            return
        batch = self._claim_and_call(action_type, entries, provider, config, deadline)
        now = self.clock()
        finalizations = []
        for action, (outcome, called_at) in batch.results:
            summary.lags.append(called_at - action.due_at.timestamp())
            finalizations.append(
                decide(action, outcome, provider.idempotent, self.settings, now, self.rand)
            )
        self._finalize(finalizations)
        self._count(finalizations, summary)
        summary.claimed += len(batch.results)
        summary.skipped += len(batch.handed_back)

        # Rows we could not act on go back to the tick; those due soon are sent again now.
        if batch.handed_back:
            unmark(conn, batch.handed_back)
        in_future = {entry.action_id for entry in entries if entry.due_at > now}
        resend = [action_id for action_id in batch.handed_back if action_id in in_future]
        resend += [f.action_id for f in finalizations if f.status == "queued"]
        if resend:
            enqueue_soon(conn, self.runtime.queues, resend, self.settings, now)

    def _provider(self, action_type: str) -> Provider | None:
        if not self.settings.dispatch_allowed(action_type):
            return None
        if self.settings.action_type(action_type) is None:
            logger.error("message for an unconfigured action type", extra={"type": action_type})
            return None
        try:
            return self.runtime.providers.for_action_type(action_type)
        except ProviderError:
            logger.exception("provider cannot be built", extra={"action_type": action_type})
            return None

    def _claim_and_call(
        self,
        action_type: str,
        entries: list[DecodedBody],
        provider: Provider,
        config: ActionTypeConfig,
        deadline: float | None,
    ) -> _CalledBatch:
        """Claim rows as they fall due (waiting out a short remainder) and call the provider
        for each claimed row: concurrently when it waits on the network, else inline."""
        pending = sorted(entries, key=lambda entry: entry.due_at)
        calls: list[tuple[Action, Callable[[], tuple[Outcome, float]]]] = []
        handed_back: list[UUID] = []
        pool = ThreadPoolExecutor(self.settings.provider_concurrency) if provider.io_bound else None
        try:
            while pending:
                wait = (pending[0].due_at - self.clock()).total_seconds()
                if wait > self.settings.max_early_wait_seconds:
                    # Early by more than we wait for: hand back, to be sent again on time.
                    handed_back.extend(entry.action_id for entry in pending)
                    break
                if wait > 0:
                    self.sleep(wait)
                cutoff = self.clock() + timedelta(seconds=WAVE_SECONDS)
                wave = [entry for entry in pending if entry.due_at <= cutoff]
                pending = pending[len(wave) :]
                claimed = actions.claim(
                    self.runtime.db.connection(),
                    action_type,
                    [entry.action_id for entry in wave],
                    early_tolerance=self.settings.clock_skew_tolerance_seconds,
                    max_lateness=config.max_lateness_seconds,
                )
                claimed_ids = {action.id for action in claimed}
                handed_back.extend(e.action_id for e in wave if e.action_id not in claimed_ids)
                for action in claimed:
                    if pool is not None:
                        future = pool.submit(self._call, provider, action, deadline)
                        calls.append((action, future.result))
                    else:
                        calls.append((action, _ready(self._call(provider, action, deadline))))
            return _CalledBatch([(action, result()) for action, result in calls], handed_back)
        finally:
            if pool is not None:
                pool.shutdown()

    def _call(
        self, provider: Provider, action: Action, deadline: float | None
    ) -> tuple[Outcome, float]:
        if deadline is not None and time.monotonic() > deadline:
            return NotSent("out of time before the provider call"), time.time()
        called_at = time.time()
        try:
            outcome = provider.send(action)
        except Exception as exc:
            # A provider bug: we cannot know whether anything left.
            logger.exception("provider raised", extra={"action_id": str(action.id)})
            outcome = Ambiguous(f"provider raised {type(exc).__name__}: {exc}")
        return outcome, called_at

    def _finalize(self, finalizations: list[Finalization]) -> None:
        if not finalizations:
            return
        db = self.runtime.db
        try:
            actions.finalize(db.connection(), finalizations)
        except INFRASTRUCTURE_ERRORS:
            # The provider was called; losing the outcome would leave the rows stuck. One
            # more try on a fresh connection before giving up.
            logger.warning("finalize failed; retrying on a new connection")
            db.close()
            actions.finalize(db.connection(), finalizations)

    @staticmethod
    def _count(finalizations: list[Finalization], summary: DispatchSummary) -> None:
        for f in finalizations:
            if f.status == "published":
                summary.published += 1
            elif f.status == "failed":
                code = f.error_code or "unknown"
                summary.failed[code] = summary.failed.get(code, 0) + 1
            elif f.attempt_delta < 0:
                summary.reverted += 1
            else:
                summary.requeued += 1


def emit_metrics(summary: DispatchSummary, action_type: str | None = None) -> None:
    # One dispatcher per action type in AWS: its metrics carry the type as a dimension.
    if action_type and metrics_enabled():
        metrics.add_dimension(name="action_type", value=action_type)
    emit(
        {
            "DispatchClaimed": summary.claimed,
            "DispatchSkipped": summary.skipped,
            "Published": summary.published,
            "Requeued": summary.requeued,
            "Reverted": summary.reverted,
            "Paused": summary.paused,
            "Failed": sum(summary.failed.values()),
        },
        by=("FailedByCode", "error_code", summary.failed),
    )
    if metrics_enabled():
        for lag in summary.lags[:100]:  # EMF keeps at most 100 values per metric per record
            metrics.add_metric(
                name="DispatchLag", unit=MetricUnit.Milliseconds, value=round(lag * 1000, 1)
            )


_processor = BatchProcessor(event_type=EventType.SQS)


def handle_sqs_event(
    event: dict[str, Any], context: LambdaContext, runtime: Runtime
) -> dict[str, Any]:
    """Lambda SQS event → dispatch → partial batch response (ReportBatchItemFailures)."""
    records = event.get("Records", [])
    margin = runtime.settings.provider_timeout_seconds + 2.0
    deadline = time.monotonic() + context.get_remaining_time_in_millis() / 1000 - margin
    result = Dispatcher(runtime).dispatch(
        [(record["messageId"], record["body"]) for record in records], deadline
    )
    emit_metrics(result.summary, runtime.settings.action_type_of_queue(records))
    failed = set(result.failed_message_ids)

    def report(record: SQSRecord) -> None:
        if record.message_id in failed:
            raise InfrastructureError("the database was unavailable; redelivering")

    return dict(process_partial_response(event, report, _processor, context))
