"""The dispatcher: claims a batch of rows, calls their provider, records what happened.

One batch of messages costs one claim per wave of rows falling due within CLAIM_AHEAD of
each other (usually one: `UPDATE ... WHERE id = ANY(...) AND status = 'queued'`), each row
called at its own due time, and one finalize per wave of provider calls completing together,
so a fast call's outcome is written without waiting for a slow sibling, and rows falling due
every fraction of a millisecond share one rather than one each. Provider outcomes are
recorded in the rows, never thrown; one row's error never strands the others. Only
infrastructure errors (the database unreachable) come back as failed messages, for the queue
to deliver again, soon, with a shortened visibility.

Outcomes are sacred: a finalize that fails on the database is retried with backoff until
the invocation's end. An outcome that still cannot be written is logged in full
(`outcome unwritten`, one structured line per row), counted (`OutcomesUnwritten`), kept by
the process to be written first thing by its next invocation, and its message is failed.
"""

from __future__ import annotations

import itertools
import math
import queue
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any, ClassVar
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

from tickwork import connections
from tickwork.actions import model, store
from tickwork.actions.model import Attempt, AttemptOutcome, Claimed, Finalization
from tickwork.engine import circuits
from tickwork.engine.admission import claim_admitted
from tickwork.engine.circuits import STACK, CircuitKey
from tickwork.engine.failover import (
    Circuit,
    CircuitPolicy,
    FailoverReason,
    PastAttempt,
    WaveAnswers,
    admits,
    after_wave,
    give_back,
    pinned_provider,
    probe_timeout,
    route,
    take,
)
from tickwork.engine.throttle import Scope, connection_scopes, throttle, type_scopes
from tickwork.platform.config import ActionTypeConfig, FailoverConfig, RateLimit, Settings
from tickwork.platform.errors import InputError
from tickwork.platform.observability import emit, logger, metrics, metrics_enabled
from tickwork.platform.queues.enqueue import enqueue_soon, unmark
from tickwork.platform.queues.port import (
    MESSAGE_WINDOW,
    MessageRow,
    VisibilityChange,
    decode_body,
    retry_visibility,
)
from tickwork.platform.wallclock import utcnow
from tickwork.providers import unsubscribe
from tickwork.providers.base import (
    Ambiguous,
    Delivered,
    NotSent,
    Outcome,
    Provider,
    ProviderError,
    Rejected,
    Transient,
    Via,
)
from tickwork.providers.catalog import connection_limits
from tickwork.providers.redact import Redactor, sanitize
from tickwork.runtime import Runtime
from tickwork.suppression import links
from tickwork.suppression.model import channel_of_provider

# Rows due within this much after a claim's first row are claimed with it, and each called
# at its own due time: a message's window (queues.port.MESSAGE_WINDOW) in one statement.
CLAIM_AHEAD = MESSAGE_WINDOW
# After a provider call completes, how long to wait for others to finalize them together,
# and how many at most.
FINALIZE_LINGER_SECONDS = 0.01
FINALIZE_WAVE_ROWS = 1000
# Finalize retries on database errors: base delay, doubled, capped.
FINALIZE_RETRY_BASE_SECONDS = 0.2
FINALIZE_RETRY_CAP_SECONDS = 2.0
# When the dispatcher is called without an end (tests, tools), finalize retries this long.
DEFAULT_FINALIZE_BUDGET_SECONDS = 30.0
# Outcomes kept by the process for its next invocation, at most.
MAX_PENDING_OUTCOMES = 10_000
INFRASTRUCTURE_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)


class InfrastructureError(Exception):
    """The batch could not be processed for reasons outside the rows (database down)."""


@dataclass
class DispatchSummary:
    received: int = 0
    ignored: int = 0  # not a Tickwork message
    claimed: int = 0
    # not claimable: cancelled (by the claim too: suppressed), already claimed, not due,
    # too late
    skipped: int = 0
    paused: int = 0  # held back by a kill switch
    throttled: int = 0  # held back by a rate limit to a later window (never sent)
    failed_over: int = 0  # calls made to a fallback provider (docs/failover.md)
    circuits_opened: int = 0  # provider circuits this dispatch opened
    published: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    requeued: int = 0
    reverted: int = 0
    unwritten: int = 0  # provider answered, outcome not written (logged, kept, retried)
    finalizes: int = 0  # finalize waves written
    lags: list[float] = field(default_factory=list)  # provider call time − due time, seconds


@dataclass
class DispatchResult:
    failed_message_ids: list[str]
    summary: DispatchSummary
    # Among the failed, messages of rows whose claim or outcome is uncertain (an outcome
    # unwritten; a claim retried after an error, which may have committed unseen): they
    # come back only after `reclaim_after_seconds`, when the row is finished or may be
    # claimed again (deduplicating providers), never to a claim that would skip them.
    uncertain_message_ids: list[str] = field(default_factory=list)


def backoff_seconds(
    attempt: int,
    settings: Settings,
    retry_after: float | None,
    rand: Callable[[], float],
    max_delay: float | None = None,
) -> float:
    """Exponential backoff with equal jitter, never sooner than the provider's Retry-After.
    A Retry-After is honoured up to `max_retry_after_seconds` (and `max_delay`, the action
    type's max lateness), so a receiver's huge, negative or unreadable value can neither
    overflow the arithmetic nor park a row for ever."""
    exponential = settings.backoff_base_seconds * 2.0 ** min(max(0, attempt - 1), 64)
    ceiling = min(settings.backoff_cap_seconds, exponential)
    delay = ceiling / 2 + rand() * ceiling / 2
    if retry_after is not None and math.isfinite(retry_after) and retry_after > 0:
        limit = min(settings.max_retry_after_seconds, max_delay or math.inf)
        delay = max(delay, min(retry_after, limit))
    return delay


def decide(
    action: Claimed,
    outcome: Outcome,
    provider_idempotent: bool,
    settings: Settings,
    now: datetime,
    rand: Callable[[], float] = random.random,
) -> Finalization:
    """Where a claimed row goes after its provider answered."""
    if isinstance(outcome, Delivered):
        return model.published(action.id, outcome.provider_id)
    if isinstance(outcome, Rejected):
        return model.failed(action.id, outcome.code, outcome.message)
    if isinstance(outcome, NotSent):
        return model.reverted(
            action.id, now + timedelta(seconds=settings.backoff_base_seconds), outcome.message
        )
    if isinstance(outcome, Ambiguous) and not provider_idempotent:
        # It may have arrived, and the provider cannot tell a second copy from a new one.
        return model.failed(action.id, "ambiguous", outcome.message)
    # Transient, or ambiguous towards a provider that deduplicates: try again later.
    config = settings.action_type(action.action_type)
    attempts = (config.max_attempts if config is not None else None) or settings.max_attempts
    budget = attempts * (1 + action.manual_retries)
    if action.attempt_count >= budget:
        return model.failed(
            action.id,
            "retry_exhausted",
            f"{outcome.message} (gave up after {action.attempt_count} attempts)",
        )
    max_delay = config.max_lateness_seconds if config is not None else None
    delay = backoff_seconds(action.attempt_count, settings, outcome.retry_after, rand, max_delay)
    return model.requeued(action.id, now + timedelta(seconds=delay), outcome.message)


def decide_safely(
    action: Claimed,
    outcome: Outcome,
    provider_idempotent: bool,
    settings: Settings,
    now: datetime,
    rand: Callable[[], float] = random.random,
) -> Finalization:
    """`decide`, where an error deciding one row (a bug, an odd provider answer) records that
    row as delivered or failed instead of stranding the batch."""
    try:
        return decide(action, outcome, provider_idempotent, settings, now, rand)
    except Exception as exc:
        logger.exception("outcome could not be decided", extra={"action_id": str(action.id)})
        if isinstance(outcome, Delivered):
            return model.published(action.id, outcome.provider_id)
        message = getattr(outcome, "message", "")
        return model.failed(
            action.id,
            "internal_error",
            f"the provider's answer could not be handled ({type(exc).__name__}): {message}",
        )


class _Pending:
    """Outcomes a previous invocation of this process could not write (database down)."""

    lock: ClassVar[threading.Lock] = threading.Lock()
    outcomes: ClassVar[list[Finalization]] = []


def pending_outcomes() -> list[Finalization]:
    with _Pending.lock:
        return list(_Pending.outcomes)


@dataclass(slots=True)
class _Completed:
    action: Claimed
    outcome: Outcome
    called_at: float
    finished_at: float = 0.0
    called: bool = False  # the provider's send was invoked (a ledger attempt)


def with_unsubscribe_link(
    action: Claimed, via: Via, provider: str, settings: Settings
) -> Via | Outcome:
    """The connection with this action's one-click unsubscribe link, when its message should
    carry one (docs/unsubscribe.md); a link wanted that this stack cannot make fails the
    row rather than send it without (its sender asked for it)."""
    wanted = unsubscribe.wanted(provider, action.payload, via.settings)
    if wanted is None:
        return via
    # A campaign's or rule's scope was resolved when the row was made; a scope still
    # unresolved here has no campaign or rule: everything.
    scope = links.resolve_scope(wanted.scope)
    try:
        url = links.url(settings, action.workspace_id, "email", wanted.address, scope)
    except InputError as exc:
        return Rejected("unsubscribe_unavailable", exc.message)
    return replace(via, unsubscribe_url=url)


def attempt_of(outcome: Outcome, number: int, started: float, finished: float) -> Attempt | None:
    """The ledger's record of a provider call that did not deliver; None for a delivery
    (the row it publishes records it) and when nothing left (NotSent)."""
    if isinstance(outcome, Delivered | NotSent):
        return None
    # Providers put tenant-safe text in their messages; cleaned again, bounded, to be sure.
    excerpt = sanitize(outcome.message)
    if isinstance(outcome, Rejected):
        return Attempt(number, started, finished, "rejected", outcome.code, excerpt)
    kind: AttemptOutcome = "ambiguous" if isinstance(outcome, Ambiguous) else "transient"
    return Attempt(number, started, finished, kind, excerpt=excerpt)


def taking_turns(claimed: list[Claimed]) -> list[Claimed]:
    """A wave's rows with their workspaces taking turns (each one's rows in their order): a
    provider pool smaller than the wave starts a small workspace's row before a big one's
    whole share of the batch."""
    lines: dict[UUID, list[Claimed]] = {}
    for action in claimed:
        lines.setdefault(action.workspace_id, []).append(action)
    if len(lines) < 2:
        return claimed
    turns = itertools.zip_longest(*lines.values())
    return [action for turn in turns for action in turn if action is not None]


@dataclass(frozen=True)
class _Routed:
    """Where a row of a type with fallback providers goes: the provider, its name, the
    circuit the call passes through, and why it is not the type's first provider."""

    provider: Provider
    name: str
    circuit: CircuitKey
    reason: FailoverReason | None
    read: Circuit  # the circuit as the route read it
    # When this row took its circuit's half-open probe; None: it took none.
    probe_taken_at: datetime | None = None


def circuit_policy(failover: FailoverConfig, settings: Settings) -> CircuitPolicy:
    """A type's circuit rules; its probe is lost after a cool-down, and never before the
    probe's own call could still answer (settings.provider_timeout_seconds)."""
    return CircuitPolicy(
        failover.circuit_failures, failover.circuit_window_seconds,
        failover.circuit_cooldown_seconds,
        probe_timeout(failover.circuit_cooldown_seconds, settings.provider_timeout_seconds),
    )  # fmt: skip


def wave_answers(
    done: list[_Completed], routes: dict[UUID, _Routed]
) -> dict[CircuitKey, WaveAnswers]:
    """What each circuit's provider answered in a wave of completed calls: a delivery or a
    refusal says it is up; a transient or ambiguous answer that it may be down."""
    answers: dict[CircuitKey, WaveAnswers] = {}
    for completed in done:
        routed = routes.get(completed.action.id)
        if routed is None or not completed.called:
            continue
        seen = answers.get(routed.circuit, WaveAnswers())
        if isinstance(completed.outcome, Delivered | Rejected):
            seen = replace(seen, answered=seen.answered + 1)
        elif isinstance(completed.outcome, Transient | Ambiguous):
            seen = replace(seen, failed=seen.failed + 1)
        answers[routed.circuit] = seen
    return answers


class _Wave:
    """What one action type's share of a batch came to."""

    def __init__(self) -> None:
        self.handed_back: list[MessageRow] = []  # not claimed, or not due: back to the tick
        self.retry_later: list[UUID] = []  # not processed for the database: redeliver
        self.uncertain: list[UUID] = []  # not claimed by a retried claim: maybe by the first


class _Calls:
    """Provider calls started and completed, and when to finalize the completed ones: at
    once when nothing else is about to happen (the row is written as soon as its call
    returns), else together, after FINALIZE_LINGER_SECONDS or FINALIZE_WAVE_ROWS of them
    (rows falling due every fraction of a millisecond share one finalize, not one each)."""

    def __init__(self, concurrency: int) -> None:
        # A pool when the provider waits on the network; else each call runs inline.
        self.pool = ThreadPoolExecutor(concurrency) if concurrency else None
        self.completions: queue.SimpleQueue[_Completed] = queue.SimpleQueue()
        self.outstanding = 0  # started, not collected
        self.done: list[_Completed] = []  # collected, not finalized
        self.first_done_at = 0.0  # time.monotonic() when the first of `done` was collected

    @property
    def busy(self) -> bool:
        return bool(self.outstanding or self.done)

    def start(self, call: Callable[..., _Completed], *args: Any) -> None:
        if self.pool is not None:
            self.outstanding += 1
            self.pool.submit(self._into_completions, call, *args)
            return
        # Inline (a provider that does not wait on the network): collected at once, with
        # no hand-off through the completions queue.
        completed = call(*args)
        if not self.done:
            self.first_done_at = time.monotonic()
        self.done.append(completed)

    def _into_completions(self, call: Callable[..., _Completed], *args: Any) -> None:
        # A call that raised past its own handling (it logs a provider's error) still ends
        # as a completion: the row is then recorded as possibly sent, never left waiting.
        action = next(a for a in args if isinstance(a, Claimed))
        started = time.time()
        completed = _Completed(action, Ambiguous("the call did not finish"), started, started)
        try:
            completed = call(*args)
        finally:
            self.completions.put(completed)

    def collect(self, timeout: float) -> None:
        """Completed calls into `done`: those completed already, else the first to complete
        within `timeout`."""
        block = timeout > 0
        while self.outstanding:
            try:
                if block:
                    completed = self.completions.get(timeout=timeout)
                    block = False
                else:
                    completed = self.completions.get_nowait()
            except queue.Empty:
                return
            if not self.done:
                self.first_done_at = time.monotonic()
            self.done.append(completed)
            self.outstanding -= 1

    def settle_now(self, next_due: float | None) -> bool:
        """Whether to finalize `done` now, the next row being due in `next_due` seconds."""
        if not self.done:
            return False
        idle = not self.outstanding and (next_due is None or next_due > FINALIZE_LINGER_SECONDS)
        waited = time.monotonic() - self.first_done_at >= FINALIZE_LINGER_SECONDS
        return idle or waited or len(self.done) >= FINALIZE_WAVE_ROWS

    def linger_left(self, next_due: float | None) -> float | None:
        """How long to wait before something is to be done; None: until a call completes."""
        left = [next_due] if next_due is not None else []
        if self.done:
            left.append(self.first_done_at + FINALIZE_LINGER_SECONDS - time.monotonic())
        return max(0.0, min(left)) if left else None

    def take(self) -> list[_Completed]:
        done, self.done = self.done, []
        return done

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


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
        self,
        messages: Sequence[tuple[str, str]],
        deadline: float | None = None,
        end: float | None = None,
    ) -> DispatchResult:
        """Process (message_id, body) pairs. `deadline` (time.monotonic) is when provider
        calls must stop being started; rows claimed after it are handed back unsent. `end`
        is when the invocation ends: outcomes are retried until then."""
        if end is None:
            end = time.monotonic() + DEFAULT_FINALIZE_BUDGET_SECONDS
        summary = DispatchSummary(received=len(messages))
        self._write_pending()
        message_ids: dict[UUID, list[str]] = defaultdict(list)
        by_type: dict[str, dict[UUID, MessageRow]] = defaultdict(dict)
        for message_id, body in messages:
            rows = decode_body(body)
            if rows is None:
                summary.ignored += 1
                logger.warning("ignoring a message that is not Tickwork's", extra={"body": body})
                continue
            for row in rows:
                message_ids[row.action_id].append(message_id)
                by_type[row.action_type][row.action_id] = row
        failed: list[str] = []
        unwritten: list[str] = []
        for action_type, entries in by_type.items():
            redeliver, outcome_unwritten = self._dispatch_type(
                action_type, list(entries.values()), summary, deadline, end
            )
            failed.extend(mid for action_id in redeliver for mid in message_ids[action_id])
            unwritten.extend(mid for i in outcome_unwritten for mid in message_ids[i])
        # A message comes back if any of its rows must; later, if any of them is uncertain.
        # Its other rows are then finished or handed back: the claim skips or takes them.
        uncertain = dict.fromkeys(unwritten)  # each once, in order
        soon = [mid for mid in dict.fromkeys(failed) if mid not in uncertain]
        return DispatchResult(
            soon + list(uncertain), summary, uncertain_message_ids=list(uncertain)
        )

    def _dispatch_type(
        self,
        action_type: str,
        entries: list[MessageRow],
        summary: DispatchSummary,
        deadline: float | None,
        end: float,
    ) -> tuple[list[UUID], list[UUID]]:
        """Dispatch one type's rows; returns the ids whose messages must come back: for the
        database, and for a claim or outcome that is uncertain."""
        provider = self._provider(action_type)
        config = self.settings.action_type(action_type)
        if provider is None or config is None:
            # Paused, unknown or misconfigured: leave the rows queued for the tick.
            try:
                unmark(self.runtime.db.connection(), [(e.action_id, e.due_at) for e in entries])
            except INFRASTRUCTURE_ERRORS:
                logger.warning("database unavailable; the batch will be redelivered")
                self.runtime.db.close()
                return [e.action_id for e in entries], []
            summary.paused += len(entries)
            return [], []
        wave = _Wave()
        unwritten = self._claim_and_call(
            action_type, entries, provider, config, deadline, end, summary, wave
        )
        summary.skipped += len(wave.handed_back)
        redeliver = list(wave.retry_later)
        if wave.handed_back:
            now = self.clock()
            try:
                # Rows we could not act on go back to the tick; those due soon go again now.
                conn = self.runtime.db.connection()
                unmark(conn, [(e.action_id, e.due_at) for e in wave.handed_back])
                soon = [e.action_id for e in wave.handed_back if e.due_at > now]
                if soon:
                    enqueue_soon(conn, self.runtime.queues, soon, self.settings, now)
            except INFRASTRUCTURE_ERRORS:
                logger.warning("database unavailable; handed-back rows will be redelivered")
                self.runtime.db.close()
                redeliver += [e.action_id for e in wave.handed_back]
        return redeliver, unwritten + wave.uncertain

    def _provider(self, action_type: str) -> Provider | None:
        if not self.settings.dispatch_allowed(action_type):
            return None
        if self.settings.action_type(action_type) is None:
            logger.error("message for an unconfigured action type", extra={"type": action_type})
            return None
        config = self.settings.action_type(action_type)
        if config is not None and config.failover is not None:
            channels = {channel_of_provider(name) for name in config.providers}
            if len(channels) > 1:
                # An email must not go out as an SMS: the type is misconfigured, not sent.
                logger.error(
                    "failover providers of one type must share a channel",
                    extra={"type": action_type, "providers": list(config.providers)},
                )
                return None
        try:
            if config is not None and config.failover is not None:
                for fallback in config.failover.providers:
                    self.runtime.providers.for_fallback(action_type, fallback.provider)
            return self.runtime.providers.for_action_type(action_type)
        except ProviderError:
            logger.exception("provider cannot be built", extra={"action_type": action_type})
            return None

    def _claim_and_call(
        self,
        action_type: str,
        entries: list[MessageRow],
        provider: Provider,
        config: ActionTypeConfig,
        deadline: float | None,
        end: float,
        summary: DispatchSummary,
        wave: _Wave,
    ) -> list[UUID]:
        """Claim rows as they fall due (waiting out a short remainder), with them the rows
        due within CLAIM_AHEAD; call the provider for each claimed row at its due time
        (concurrently when it waits on the network, else inline); finalize outcomes in
        waves as the calls complete. Returns the ids of outcomes that could not be
        written."""
        pending = sorted(entries, key=lambda entry: entry.due_at)
        calls = _Calls(self.settings.provider_concurrency if provider.io_bound else 0)
        ready: list[Claimed] = []  # claimed, in due order, waiting for their time
        vias: dict[UUID, Via | Outcome] = {}
        routes: dict[UUID, _Routed] = {}  # types with fallback providers: each row's
        unwritten: list[UUID] = []
        reached = self.clock()  # the latest time waited for: come, whatever the clock says
        try:
            while pending or ready or calls.busy:
                now = max(self.clock(), reached)
                if pending:
                    early = (pending[0].due_at - now).total_seconds()
                    if early > self.settings.max_early_wait_seconds:
                        # Early by more than we wait for: hand back, to be sent again on time.
                        wave.handed_back.extend(pending)
                        pending = []
                        continue
                    if early <= 0:
                        cutoff = now + CLAIM_AHEAD
                        due = [entry for entry in pending if entry.due_at <= cutoff]
                        pending = pending[len(due) :]
                        claimed = self._claim_wave(action_type, due, config, provider, end, wave)
                        if claimed is None:
                            wave.retry_later.extend(e.action_id for e in due + pending)
                            pending = []
                            continue
                        summary.claimed += len(claimed)
                        claimed = self._resolve(
                            claimed, action_type, config, vias, summary, provider, routes
                        )
                        ready = sorted(ready + claimed, key=lambda action: action.due_at)
                        continue
                if ready and ready[0].due_at <= now:
                    count = next((i for i, a in enumerate(ready) if a.due_at > now), len(ready))
                    for action in taking_turns(ready[:count]):
                        # (most waves name no connection and no route: no lookup a row)
                        calls.start(
                            self._call,
                            routes[action.id].provider if routes and action.id in routes
                            else provider, action, deadline,
                            vias.pop(action.id, None) if vias else None,
                        )  # fmt: skip
                    ready = ready[count:]
                    continue
                # Nothing to claim or call now: settle what completed, or wait for the next
                # row's time, a completion, or the end of the completed ones' linger.
                times = [rows[0].due_at for rows in (pending, ready) if rows]
                next_due = (min(times) - now).total_seconds() if times else None
                calls.collect(0.0)
                if calls.settle_now(next_due):
                    unwritten += self._settle(calls.take(), provider, summary, end, config, routes)
                    continue
                timeout = calls.linger_left(next_due)
                if calls.outstanding:
                    calls.collect(1.0 if timeout is None else timeout)
                elif timeout is not None:
                    self.sleep(timeout)
                    reached = now + timedelta(seconds=timeout)
            return unwritten
        finally:
            calls.close()

    def _claim_wave(
        self,
        action_type: str,
        due: list[MessageRow],
        config: ActionTypeConfig,
        provider: Provider,
        end: float,
        wave: _Wave,
    ) -> list[Claimed] | None:
        """Claim one wave; rows not claimed go back to the tick, or, when the claim had to
        be retried, come back later (the first try may have claimed them unseen)."""
        result = self._claim(action_type, due, config, provider.idempotent, end)
        if result is None:
            return None
        claimed, retried = result
        if len(claimed) == len(due):
            return claimed  # each message's row was claimed: none missed
        claimed_ids = {action.id for action in claimed}
        missed = [e for e in due if e.action_id not in claimed_ids]
        if retried:
            wave.uncertain.extend(e.action_id for e in missed)
        else:
            wave.handed_back.extend(missed)
        return claimed

    def _claim(
        self,
        action_type: str,
        due: list[MessageRow],
        config: ActionTypeConfig,
        idempotent: bool,
        end: float,
    ) -> tuple[list[Claimed], bool] | None:
        """The claim of one wave, and whether it was retried after an error (the first try
        may then have claimed rows unseen); None when the database stayed unreachable.
        Rows whose claimer died are claimed again only when the provider deduplicates."""
        reclaim_after = self.settings.reclaim_after_seconds if idempotent else None
        for attempt in range(2):
            try:
                claimed = claim_admitted(
                    self.runtime.db.connection(),
                    action_type,
                    [entry.action_id for entry in due],
                    # The rows claimed ahead are called at their time, not when claimed.
                    early_tolerance=self.settings.clock_skew_tolerance_seconds
                    + CLAIM_AHEAD.total_seconds(),
                    max_lateness=config.max_lateness_seconds,
                    reclaim_after=reclaim_after,
                    channel=channel_of_provider(config.provider),
                    # A type with fallbacks: the claim records its first provider as each
                    # attempt's route; _route rewrites the rows it sends elsewhere.
                    route_provider=config.provider if config.failover is not None else None,
                )
                return claimed, attempt > 0
            except INFRASTRUCTURE_ERRORS:
                logger.warning("claim failed: the database is unavailable", exc_info=True)
                if attempt or not self._wait_for_database(end):
                    return None
        return None  # pragma: no cover - the loop returns

    def _wait_for_database(self, end: float) -> bool:
        """Wait (briefly: `database_wait_seconds`, within the invocation) for the database."""
        limit = min(end, time.monotonic() + self.settings.database_wait_seconds)
        delay = 0.1
        while True:
            self.runtime.db.close()
            try:
                self.runtime.db.connection().execute("select 1")
                return True
            except INFRASTRUCTURE_ERRORS:
                pass
            if time.monotonic() + delay > limit:
                return False
            self.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _resolve(
        self,
        claimed: list[Claimed],
        action_type: str,
        config: ActionTypeConfig,
        vias: dict[UUID, Via | Outcome],
        summary: DispatchSummary,
        provider: Provider,
        routes: dict[UUID, _Routed],
    ) -> list[Claimed]:
        """A claimed wave's connections (into `vias`); for a type with fallback providers,
        where each row goes (into `routes`, a fallback's connection into `vias`); then the
        rate limits of the type and of the connection each row is sent through (a fallback's
        own, when it fails over): the rows to call."""
        resolved, limits = self._connections(claimed, config.provider)
        vias |= resolved
        limits |= self._route(claimed, action_type, config, provider, vias, routes)
        admitted = self._throttle(claimed, action_type, config, vias, limits, summary)
        if routes:
            self._give_back_probes(claimed, admitted, vias, routes, config)
        return admitted

    def _connections(
        self, claimed: list[Claimed], provider: str
    ) -> tuple[dict[UUID, Via | Outcome], dict[UUID, tuple[RateLimit, ...]]]:
        """For rows that name a connection: what to send through, or why not to send; and
        the rate limits of the connections that have any. One statement per wave, and none
        when no row names a connection."""
        named = [action for action in claimed if action.connection_id is not None]
        if not named:
            return {}, {}
        ids = [action.connection_id for action in named if action.connection_id is not None]
        try:
            found = connections.load(self.runtime.db.connection(), ids)
        except INFRASTRUCTURE_ERRORS:
            # The rows are claimed: hand them back unsent rather than strand them.
            logger.exception("connections could not be read; the rows go back unsent")
            return {a.id: NotSent("the connection could not be read") for a in named}, {}
        limits = {
            key: own for key, row in found.items() if (own := connection_limits(row.settings))
        }
        resolved: dict[UUID, Via | Outcome] = {}
        for action in named:
            assert action.connection_id is not None
            via = connections.via_for(
                action.workspace_id, action.connection_id, found.get(action.connection_id),
                provider, self.runtime.secrets,
            )  # fmt: skip
            if isinstance(via, Via) and provider in unsubscribe.PROVIDERS:
                via = with_unsubscribe_link(action, via, provider, self.settings)
            resolved[action.id] = via
        return resolved, limits

    def _throttle(
        self,
        claimed: list[Claimed],
        action_type: str,
        config: ActionTypeConfig,
        vias: dict[UUID, Via | Outcome],
        connection_limits: dict[UUID, tuple[RateLimit, ...]],
        summary: DispatchSummary,
    ) -> list[Claimed]:
        """The claimed rows within their type's and connection's rate limits; the others are
        handed back to a later window (docs/throttling.md). Nothing is asked of the database
        when no limit applies."""
        by_type = type_scopes(action_type, config.limits)
        if not by_type and not connection_limits:
            return claimed
        scopes: dict[UUID, list[Scope]] = {}
        for action in claimed:
            via = vias.get(action.id)
            if via is not None and not isinstance(via, Via):
                continue  # not sent (its connection is gone): it takes no slot
            through = via if isinstance(via, Via) else None
            own = connection_limits.get(through.id, ()) if through is not None else ()
            if through is not None and own:
                scopes[action.id] = by_type + connection_scopes(through.id, own)
            elif by_type:
                scopes[action.id] = by_type
        if not scopes:
            return claimed
        try:
            admitted, held = throttle(self.runtime.db.connection(), claimed, scopes, self.clock())
        except INFRASTRUCTURE_ERRORS:
            # Claimed and not checked: back unsent (their finalize retries), never sent over.
            logger.exception("rate limits could not be checked; the rows go back unsent")
            self.runtime.db.close()
            for action_id in scopes:
                vias[action_id] = NotSent("the rate limits could not be checked")
            return claimed
        for h in held:
            vias.pop(h.action.id, None)
        summary.throttled += len(held)
        self._send_again_soon([h.action.id for h in held if h.until])
        return admitted

    def _route(
        self,
        claimed: list[Claimed],
        action_type: str,
        config: ActionTypeConfig,
        provider: Provider,
        vias: dict[UUID, Via | Outcome],
        routes: dict[UUID, _Routed],
    ) -> dict[UUID, tuple[RateLimit, ...]]:
        """Which provider each claimed row of a type with fallback providers goes to (into
        `routes`, its fallback connection into `vias`): its earlier attempts from the
        ledger, its workspace's fallback connections and the circuits, read once for the
        wave (docs/failover.md). Rows whose connection already refused them stay as they
        are. Returns the rate limits of the fallback connections the rows go through."""
        if config.failover is None:
            return {}
        sendable = [a for a in claimed if isinstance(vias.get(a.id), Via | None)]
        if not sendable:
            return {}
        try:
            conn = self.runtime.db.connection()
            past = circuits.history(conn, [a.id for a in sendable])
            options = self._failover_options(conn, sendable, config)
            keys = [(n, c) for own in options.values() for n, c in own.items()]
            known = circuits.read(conn, keys)
            fallback_rows: dict[UUID, UUID] = {}  # row → the fallback connection it uses
            for action in sendable:
                chosen = self._route_row(conn, action, options[action.id],
                                         past.get(action.id, []), config, known)  # fmt: skip
                if isinstance(chosen, Rejected):
                    vias[action.id] = chosen
                    continue
                name, key, reason, probe = chosen
                through = provider
                if name != config.provider:
                    through = self.runtime.providers.for_fallback(action_type, name)
                    if action.connection_id is not None:
                        fallback_rows[action.id] = key[1]
                routes[action.id] = _Routed(through, name, key, reason, known[key][0], probe)
            self._record_routes(conn, sendable, routes, vias, fallback_rows, config.provider)
            found = connections.load(conn, list(fallback_rows.values()))
        except INFRASTRUCTURE_ERRORS:
            # Claimed and not routed: back unsent (their finalize retries), never sent twice.
            logger.exception("failover state could not be read; the rows go back unsent")
            self.runtime.db.close()
            for action in sendable:
                vias[action.id] = NotSent("the failover state could not be read")
                routes.pop(action.id, None)
            return {}
        for action in sendable:
            connection_id = fallback_rows.get(action.id)
            if connection_id is None:
                continue
            name = routes[action.id].name
            via = connections.via_for(
                action.workspace_id, connection_id, found.get(connection_id), name,
                self.runtime.secrets,
            )  # fmt: skip
            if isinstance(via, Via) and name in unsubscribe.PROVIDERS:
                via = with_unsubscribe_link(action, via, name, self.settings)
            vias[action.id] = via
        return {
            connection_id: own
            for connection_id, row in found.items()
            if (own := connection_limits(row.settings))
        }

    @staticmethod
    def _record_routes(
        conn: psycopg.Connection[Any],
        sendable: list[Claimed],
        routes: dict[UUID, _Routed],
        vias: dict[UUID, Via | Outcome],
        fallback_rows: dict[UUID, UUID],
        first: str,
    ) -> None:
        """Before any call, where each routed row's attempt goes (provider, connection): a
        dispatcher that dies during the call leaves a row the resolver can ask that
        provider about. The claim recorded the first provider through the row's own
        connection; the rows going elsewhere are written here, in one statement for the
        wave (none while every row goes to the first). A row not recorded is not called."""
        elsewhere = [
            (a.id, a.attempt_count, r.name, None if r.circuit[1] == STACK else r.circuit[1])
            for a in sendable
            if (r := routes.get(a.id)) is not None
            and (r.name, r.circuit[1]) != (first, a.connection_id or STACK)
        ]
        if not elsewhere:
            return
        recorded = circuits.record_routes(conn, elsewhere)
        for action_id, *_ in elsewhere:
            if action_id not in recorded:
                vias[action_id] = NotSent("the claim is no longer this dispatcher's")
                routes.pop(action_id)
                fallback_rows.pop(action_id, None)

    @staticmethod
    def _failover_options(
        conn: psycopg.Connection[Any], sendable: list[Claimed], config: ActionTypeConfig
    ) -> dict[UUID, dict[str, UUID]]:
        """Each row's providers, in order, with the connection each sends it through (STACK:
        the provider's options): a row naming a connection goes to a fallback through its
        workspace's connection of that provider, and not to a fallback it has none of."""
        assert config.failover is not None
        fallbacks = [f.provider for f in config.failover.providers]
        named = [(a.workspace_id, f) for a in sendable if a.connection_id for f in fallbacks]
        fallback_ids = circuits.fallback_connections(conn, named)
        options: dict[UUID, dict[str, UUID]] = {}
        for action in sendable:
            own = {config.provider: action.connection_id or STACK}
            for name in fallbacks:
                if action.connection_id is None:
                    own[name] = STACK
                elif (found := fallback_ids.get((action.workspace_id, name))) is not None:
                    own[name] = found
            options[action.id] = own
        return options

    def _route_row(
        self,
        conn: psycopg.Connection[Any],
        action: Claimed,
        own: dict[str, UUID],
        history: list[PastAttempt],
        config: ActionTypeConfig,
        known: dict[CircuitKey, tuple[Circuit, int]],
    ) -> tuple[str, CircuitKey, FailoverReason | None, datetime | None] | Rejected:
        """One row's provider, circuit, reason, and when it took that circuit's half-open
        probe (None: it took none). A probe is taken with a conditional write, so one
        dispatcher's one row probes; a probe out longer than the policy's probe timeout is
        lost (its dispatcher died) and taken again."""
        assert config.failover is not None
        policy = circuit_policy(config.failover, self.settings)
        now = self.clock()
        pinned = pinned_provider(config.providers, history)
        if pinned is not None and pinned not in own:
            # An earlier attempt may have arrived through a connection gone since: sending
            # through another could send it twice.
            return Rejected(
                "connection_removed",
                f"the {pinned} connection an earlier attempt went through is gone",
            )
        # Providers whose circuit another dispatcher wrote between this one's read and its
        # probe: it took the probe, or opened the circuit again. Each try that does not
        # return adds one, so the loop ends.
        lost: set[str] = set()
        for _ in range(len(own) + 1):
            refused = {
                n: n in lost or not admits(known[(n, c)][0], policy, now) for n, c in own.items()
            }
            chosen = route(list(own), history, refused, config.failover.threshold)
            key = (chosen.provider, own[chosen.provider])
            circuit, version = known[key]
            if pinned is not None or circuit.state == "closed" or refused[chosen.provider]:
                return chosen.provider, key, chosen.reason, None
            probe = take(circuit, now)
            written = circuits.write(conn, key, probe, version)
            if written is not None:
                known[key] = (probe, written)
                return chosen.provider, key, chosen.reason, now
            known[key] = circuits.read(conn, [key])[key]
            if known[key][0].state != "closed":
                lost.add(chosen.provider)
        raise AssertionError("unreachable: the last provider is taken once refused")

    def _give_back_probes(
        self,
        claimed: list[Claimed],
        admitted: list[Claimed],
        vias: dict[UUID, Via | Outcome],
        routes: dict[UUID, _Routed],
        config: ActionTypeConfig,
    ) -> None:
        """Rows routed and then not to be sent (held by a rate limit, handed back unsent)
        leave their route; a probe one of them took is given back at once, conditionally,
        for the next row to take, rather than left out until it is lost."""
        sent = {action.id for action in admitted}
        given: list[_Routed] = []
        for action in claimed:
            routed = routes.get(action.id)
            if routed is None:
                continue
            if action.id not in sent:
                routes.pop(action.id)
            elif isinstance(vias.get(action.id), Via | None):
                continue
            if routed.probe_taken_at is not None:
                given.append(routed)
        for routed in given:
            assert routed.probe_taken_at is not None
            try:
                circuits.update(
                    self.runtime.db.connection(), routed.circuit,
                    partial(give_back, taken_at=routed.probe_taken_at),
                )  # fmt: skip
            except INFRASTRUCTURE_ERRORS:
                # The probe is then lost after its timeout, and taken again.
                logger.warning("could not give a circuit's probe back", extra={
                    "provider": routed.name})  # fmt: skip
                self.runtime.db.close()
                return
            except RuntimeError:
                logger.warning("a provider circuit kept changing", extra={"provider": routed.name})

    def _update_circuits(
        self, answers: dict[CircuitKey, WaveAnswers], failover: FailoverConfig, now: datetime
    ) -> int:
        """The wave's answers into its circuits, one conditional write per circuit that
        changes (none while a provider answers and its circuit is closed). Returns how many
        it opened."""
        policy = circuit_policy(failover, self.settings)
        opened = 0
        for key, seen in sorted(answers.items()):
            try:
                circuit = circuits.update(
                    self.runtime.db.connection(), key,
                    partial(after_wave, policy=policy, answers=seen, now=now),
                )  # fmt: skip
            except INFRASTRUCTURE_ERRORS:
                # The outcomes are written; a circuit missing one wave's answers only opens
                # or closes a wave later.
                logger.warning("could not update a provider circuit", extra={"provider": key[0]})
                self.runtime.db.close()
                break
            except RuntimeError:
                logger.warning("a provider circuit kept changing", extra={"provider": key[0]})
                continue
            if circuit.state == "open" and circuit.opened_at == now:
                logger.warning("provider circuit opened", extra={"provider": key[0]})
                opened += 1
        return opened

    def _send_again_soon(self, ids: list[UUID]) -> None:
        """Rows handed back to a window within the look-ahead go to their queue now."""
        if not ids:
            return
        try:
            enqueue_soon(
                self.runtime.db.connection(), self.runtime.queues, ids, self.settings, self.clock()
            )
        except INFRASTRUCTURE_ERRORS:
            # They are queued and in no queue: the tick sends them when they are due.
            logger.warning("could not re-send throttled rows now; the tick will")
            self.runtime.db.close()

    def _call(
        self,
        provider: Provider,
        action: Claimed,
        deadline: float | None,
        via: Via | Outcome | None = None,
    ) -> _Completed:
        called_at = time.time()
        if deadline is not None and time.monotonic() > deadline:
            outcome: Outcome = NotSent("out of time before the provider call")
            return _Completed(action, outcome, called_at, called_at)
        if via is not None and not isinstance(via, Via):
            # The connection is gone or unreadable: nothing is sent.
            return _Completed(action, via, called_at, called_at)
        try:
            outcome = provider.send(action) if via is None else provider.send(action, via)
        except Exception as exc:
            # A provider bug: we cannot know whether anything left. The exception's text
            # may hold what the provider was given: logged redacted, frames without values.
            outcome = Ambiguous(f"provider raised {type(exc).__name__}")
            known = (via.credentials, via.settings) if isinstance(via, Via) else ()
            secrets = Redactor.of(*known)
            logger.error("provider raised", extra={"action_id": str(action.id),
                                                   **secrets.error(exc)})  # fmt: skip
        return _Completed(action, outcome, called_at, time.time(), True)

    def _settle(
        self,
        done: list[_Completed],
        provider: Provider,
        summary: DispatchSummary,
        end: float,
        config: ActionTypeConfig | None = None,
        routes: dict[UUID, _Routed] | None = None,
    ) -> list[UUID]:
        """Decide and finalize one wave of completed calls; requeued rows due soon are sent
        again at once. Returns the ids whose outcome could not be written. A type with
        fallback providers records which provider each call went to, and its circuits."""
        now = self.clock()
        finalizations = []
        ledger = self.settings.attempts_ledger
        routes = routes if routes is not None else {}
        for completed in done:
            summary.lags.append(completed.called_at - completed.action.due_at.timestamp())
            routed = routes.get(completed.action.id) if routes else None
            finalization = decide_safely(
                completed.action,
                completed.outcome,
                (routed.provider if routed is not None else provider).idempotent,
                self.settings,
                now,
                self.rand,
            )
            if ledger and completed.called and routed is not None:
                call = attempt_of(
                    completed.outcome, completed.action.attempt_count, completed.called_at,
                    completed.finished_at,
                )  # fmt: skip
                if call is None and isinstance(completed.outcome, Delivered):
                    # Which provider sent is the ledger's to tell (the row cannot).
                    call = Attempt(
                        completed.action.attempt_count, completed.called_at,
                        completed.finished_at, "delivered",
                    )  # fmt: skip
                if call is not None:
                    call = replace(call, provider=routed.name, failover_reason=routed.reason)
                    finalization = finalization._replace(attempt=call)
            elif ledger and completed.called and not isinstance(completed.outcome, Delivered):
                call = attempt_of(
                    completed.outcome, completed.action.attempt_count, completed.called_at,
                    completed.finished_at,
                )  # fmt: skip
                if call is not None:
                    finalization = finalization._replace(attempt=call)
            finalizations.append(finalization)
        unwritten = self._finalize(finalizations, end)
        if config is not None and config.failover is not None:
            answers = wave_answers(done, routes)
            # A provider that answered through a closed, clean circuit changes nothing: no
            # statement for a healthy wave.
            clean = {r.circuit for r in routes.values() if r.read == Circuit()}
            changing = {k: a for k, a in answers.items() if a.failed or k not in clean}
            summary.failed_over += sum(
                1 for c in done if c.called and (r := routes.get(c.action.id)) and r.reason
            )
            summary.circuits_opened += self._update_circuits(changing, config.failover, now)
        if routes:
            for completed in done:
                routes.pop(completed.action.id, None)
        written = (
            [f for f in finalizations if f.action_id not in unwritten]
            if unwritten
            else finalizations
        )
        summary.unwritten += len(unwritten)
        summary.finalizes += 1 if written else 0
        self._count(written, summary)
        resend = [f.action_id for f in written if f.status == "queued"]
        if resend:
            try:
                enqueue_soon(
                    self.runtime.db.connection(), self.runtime.queues, resend, self.settings, now
                )
            except INFRASTRUCTURE_ERRORS:
                # They are queued and in no queue: the tick sends them when they are due.
                logger.warning("could not re-send backed-off rows now; the tick will")
                self.runtime.db.close()
        return list(unwritten)

    def _finalize(self, finalizations: list[Finalization], end: float) -> set[UUID]:
        """Write outcomes, retrying with backoff on database errors until `end`. Returns the
        ids left unwritten (logged, counted and kept for the next invocation)."""
        attempt = 0
        while True:
            try:
                self._write(finalizations)
                return set()
            except INFRASTRUCTURE_ERRORS as exc:
                self.runtime.db.close()
                delay = min(FINALIZE_RETRY_CAP_SECONDS, FINALIZE_RETRY_BASE_SECONDS * 2**attempt)
                if time.monotonic() + delay > end:
                    self._keep_unwritten(finalizations, exc)
                    return {f.action_id for f in finalizations}
                logger.warning(
                    "finalize failed; retrying", extra={"attempt": attempt + 1, "error": str(exc)}
                )
                self.sleep(delay)
                attempt += 1

    def _write(self, finalizations: list[Finalization]) -> None:
        """One statement for the wave; when a row's values make it fail (not the database
        being down), each row alone, so that row cannot take its siblings with it."""
        conn = self.runtime.db.connection()
        ledger = self.settings.attempts_ledger
        try:
            store.finalize(conn, finalizations, ledger=ledger)
            return
        except INFRASTRUCTURE_ERRORS:
            raise
        except psycopg.Error:
            if len(finalizations) == 1:
                raise
            logger.exception("finalize of a wave failed; writing its rows one by one")
        for finalization in finalizations:
            try:
                store.finalize(conn, [finalization], ledger=ledger)
            except INFRASTRUCTURE_ERRORS:
                raise
            except psycopg.Error as exc:
                logger.exception(
                    "outcome refused by the database",
                    extra={"action_id": str(finalization.action_id)},
                )
                fallback = model.failed(
                    finalization.action_id,
                    "internal_error",
                    f"the outcome ({finalization.status}) could not be stored:"
                    f" {type(exc).__name__}",
                )
                if finalization.status == "published":
                    fallback = model.published(finalization.action_id, None)
                if finalization.attempt is not None:
                    # The call is still recorded, without the text the database refused.
                    bare = replace(finalization.attempt, code=None, excerpt=None)
                    fallback = fallback._replace(attempt=bare)
                try:
                    store.finalize(conn, [fallback], ledger=ledger)
                except INFRASTRUCTURE_ERRORS:
                    raise
                except psycopg.Error:
                    # Nothing about this row can be stored: it ends stuck, with this line.
                    self._log_unwritten([finalization], exc)

    def _write_pending(self) -> None:
        """Outcomes an earlier invocation of this process could not write, written now."""
        with _Pending.lock:
            kept, _Pending.outcomes = _Pending.outcomes, []
        if not kept:
            return
        try:
            self._write(kept)
            logger.info("wrote outcomes kept from an earlier invocation", extra={"rows": len(kept)})
        except psycopg.Error:
            self.runtime.db.close()
            with _Pending.lock:
                _Pending.outcomes = (kept + _Pending.outcomes)[-MAX_PENDING_OUTCOMES:]

    @classmethod
    def _keep_unwritten(cls, finalizations: list[Finalization], exc: Exception) -> None:
        cls._log_unwritten(finalizations, exc)
        with _Pending.lock:
            _Pending.outcomes = (_Pending.outcomes + finalizations)[-MAX_PENDING_OUTCOMES:]

    @staticmethod
    def _log_unwritten(finalizations: list[Finalization], exc: Exception) -> None:
        # The provider answered: this line is the record of what it said until the row has
        # it. The stuck-row runbook looks for it before anyone retries the row.
        for f in finalizations:
            logger.error(
                "outcome unwritten",
                extra={
                    "action_id": str(f.action_id),
                    "outcome_status": f.status,
                    "provider_id": f.provider_id,
                    "error_code": f.error_code,
                    "next_attempt_at": f.next_attempt_at.isoformat() if f.next_attempt_at else None,
                    "error": str(exc),
                },
            )

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
            "Throttled": summary.throttled,
            "FailedOver": summary.failed_over,
            "CircuitsOpened": summary.circuits_opened,
            "Failed": sum(summary.failed.values()),
            "OutcomesUnwritten": summary.unwritten,
        },
        by=("FailedByCode", "error_code", summary.failed),
    )
    if metrics_enabled():
        for lag in summary.lags[:100]:  # EMF keeps at most 100 values per metric per record
            metrics.add_metric(
                name="DispatchLag", unit=MetricUnit.Milliseconds, value=round(lag * 1000, 1)
            )


_processor = BatchProcessor(event_type=EventType.SQS)

# Left after the last outcome retry for the handler to answer and flush its metrics.
END_MARGIN_SECONDS = 1.0


def handle_sqs_event(
    event: dict[str, Any], context: LambdaContext, runtime: Runtime
) -> dict[str, Any]:
    """Lambda SQS event → dispatch → partial batch response (ReportBatchItemFailures).
    Failed messages are made visible again after a short backoff, not the queue's timeout."""
    records = event.get("Records", [])
    settings = runtime.settings
    remaining = context.get_remaining_time_in_millis() / 1000
    started = time.monotonic()
    deadline = started + remaining - (settings.provider_timeout_seconds + 2.0)
    end = started + remaining - END_MARGIN_SECONDS
    result = Dispatcher(runtime).dispatch(
        [(record["messageId"], record["body"]) for record in records], deadline, end
    )
    emit_metrics(result.summary, runtime.settings.action_type_of_queue(records))
    failed = set(result.failed_message_ids)
    unwritten = set(result.uncertain_message_ids)
    if failed:
        retry_soon(runtime, [r for r in records if r["messageId"] in failed - unwritten])
        retry_soon(
            runtime,
            [r for r in records if r["messageId"] in unwritten],
            runtime.settings.reclaim_after_seconds + 1,
        )

    if not failed and records and isinstance(records, list):
        # What the processor answers when no record fails, without its walk over them all.
        return {"batchItemFailures": []}

    def report(record: SQSRecord) -> None:
        if record.message_id in failed:
            raise InfrastructureError("the database was unavailable; redelivering")

    return dict(process_partial_response(event, report, _processor, context))


def retry_soon(
    runtime: Runtime, records: Sequence[dict[str, Any]], seconds: int | None = None
) -> None:
    """Shorten the visibility of messages about to be reported failed: `seconds`, else base,
    doubled per receive, capped (`retry_visibility_*`); without it SQS hides each for the
    queue's whole visibility timeout."""
    settings = runtime.settings
    by_type: dict[str, list[VisibilityChange]] = defaultdict(list)
    for record in records:
        rows = decode_body(record.get("body", ""))
        handle = record.get("receiptHandle")
        if not rows or not handle:
            continue
        try:
            count = int(record.get("attributes", {}).get("ApproximateReceiveCount", "1"))
        except ValueError:
            count = 1
        visibility = seconds or retry_visibility(
            count, settings.retry_visibility_base_seconds, settings.retry_visibility_cap_seconds
        )
        by_type[rows[0].action_type].append(VisibilityChange(handle, visibility))
    for action_type, changes in by_type.items():
        try:
            runtime.queues.change_visibility(action_type, changes)
        except Exception:
            # Then they come back after the queue's own visibility timeout; nothing is lost.
            logger.exception("could not shorten the visibility of failed messages")
