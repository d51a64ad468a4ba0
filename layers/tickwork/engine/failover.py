"""Provider failover: which provider a row's next attempt goes to, and each provider's
circuit. Pure rules (no SQL, no I/O), so every dispatcher applies the same ones to what it
reads from Postgres.

A type names providers in order (`email`: postmark, then ses). For one row:

- A provider that answered this row transiently `threshold` times is done with it (the
  threshold): the row moves to the next provider in the list.
- A provider whose circuit is open is skipped while others remain (circuit open).
- A row one attempt of which may have arrived (ambiguous or stuck, not settled absent by the
  resolver) is pinned to the provider of that attempt: a row is sent by at most one provider.
- A rejection is final (the dispatcher fails the row); it never moves a row elsewhere.

A circuit per (provider, connection, or the stack when the row names none): `failures`
transient or ambiguous answers within `window_seconds` open it for `cooldown_seconds`; then
one probe is let through (half-open): a delivery or a refusal (the provider answered)
closes it, another transient or ambiguous answer opens it again. Answers are applied a
dispatcher wave at a time (`after_wave`), not per row. A probe is stored with when it was
taken: one left unanswered for `probe_timeout_seconds` (its dispatcher died, or handed
the row back unsent) is lost, and the next row probes in its place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

CircuitState = Literal["closed", "open", "half_open"]
# Why a row's attempt went to a provider other than the first in the list.
FailoverReason = Literal["threshold", "circuit_open"]
# What the ledger holds of an attempt, as far as failover reads it.
AttemptOutcome = Literal["delivered", "rejected", "transient", "ambiguous", "stuck"]


@dataclass(frozen=True)
class CircuitPolicy:
    failures: int = 5  # transient or ambiguous answers within the window that open it
    window_seconds: float = 60.0
    cooldown_seconds: float = 60.0
    # A half-open circuit's probe unanswered this long is lost: another row probes.
    probe_timeout_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.failures < 1 or self.window_seconds <= 0 or self.cooldown_seconds <= 0:
            raise ValueError("a circuit needs failures >= 1 and a positive window and cooldown")
        if self.probe_timeout_seconds <= 0:
            raise ValueError("a circuit's probe needs a positive timeout")


# Beyond the provider call's own deadline, what a probe's dispatcher may take to claim the
# row, write its outcome and the circuit: a probe is lost only once its call cannot still
# be answering.
PROBE_GRACE_SECONDS = 5.0


def probe_timeout(cooldown_seconds: float, provider_timeout_seconds: float) -> float:
    """How long a probe may stay unanswered before another row probes: a cool-down (an
    unanswered probe counts as a failed one), and never before the probe's own call, at its
    provider deadline, could still answer."""
    return max(cooldown_seconds, provider_timeout_seconds + PROBE_GRACE_SECONDS)


@dataclass(frozen=True)
class Circuit:
    """One provider's circuit as stored: its state, the failures counted in the current
    window, and when the window started or the circuit opened."""

    state: CircuitState = "closed"
    failures: int = 0
    window_started: datetime | None = None
    opened_at: datetime | None = None
    # Half-open: when its one probe was taken (by this or another dispatcher); None: the
    # probe is not out.
    probe_taken_at: datetime | None = None

    @property
    def probing(self) -> bool:
        return self.probe_taken_at is not None


CLOSED = Circuit()


@dataclass(frozen=True)
class WaveAnswers:
    """What one provider answered in a dispatcher wave."""

    answered: int = 0  # delivered or refused: the provider is up
    failed: int = 0  # transient or ambiguous: it may be down


def admits(circuit: Circuit, policy: CircuitPolicy, now: datetime) -> bool:
    """Whether a row may be sent through this circuit now (for half-open, the probe)."""
    if circuit.state == "closed":
        return True
    if circuit.state == "half_open":
        return not probe_out(circuit, policy, now)
    assert circuit.opened_at is not None
    return now >= circuit.opened_at + timedelta(seconds=policy.cooldown_seconds)


def probe_out(circuit: Circuit, policy: CircuitPolicy, now: datetime) -> bool:
    """Whether a half-open circuit's probe is out and may still be answered."""
    if circuit.probe_taken_at is None:
        return False
    return now < circuit.probe_taken_at + timedelta(seconds=policy.probe_timeout_seconds)


def take(circuit: Circuit, now: datetime) -> Circuit:
    """The circuit after a row was admitted through it at `now`: an open one past its
    cool-down, or a half-open one whose probe is not out (lost), becomes half-open with this
    row's probe out; a closed one is unchanged."""
    if circuit.state == "closed":
        return circuit
    return replace(circuit, state="half_open", probe_taken_at=now)


def give_back(circuit: Circuit, taken_at: datetime) -> Circuit:
    """The circuit after the row that took its probe at `taken_at` was handed back unsent
    (held by a rate limit): the probe is free for the next row. A circuit that moved on
    since (answered, or probed again by another row) is unchanged."""
    if circuit.state != "half_open" or circuit.probe_taken_at != taken_at:
        return circuit
    return replace(circuit, probe_taken_at=None)


def after_wave(
    circuit: Circuit, policy: CircuitPolicy, answers: WaveAnswers, now: datetime
) -> Circuit:
    """The circuit after a wave's answers."""
    if circuit.state == "half_open":
        if answers.failed:
            return Circuit("open", opened_at=now)
        if answers.answered:
            return CLOSED
        return circuit
    if circuit.state == "open":
        return circuit  # nothing was sent through it; late answers change nothing
    window = timedelta(seconds=policy.window_seconds)
    started = circuit.window_started
    failures = circuit.failures
    if started is None or now - started >= window:
        started, failures = now, 0
    failures += answers.failed
    if failures >= policy.failures:
        return Circuit("open", opened_at=now)
    if failures == 0:
        return CLOSED
    return Circuit("closed", failures=failures, window_started=started)


@dataclass(frozen=True)
class PastAttempt:
    provider: str | None  # None: recorded before providers were named (the first)
    outcome: AttemptOutcome
    settled_absent: bool = False  # the resolver found it provably absent


@dataclass(frozen=True)
class Route:
    provider: str
    index: int
    # None: the first provider, or the one an earlier attempt may have reached (pinned).
    reason: FailoverReason | None = None


def pinned_provider(providers: Sequence[str], history: Sequence[PastAttempt]) -> str | None:
    """The provider of the latest attempt that may have arrived, if any."""
    for attempt in reversed(history):
        if attempt.outcome in ("ambiguous", "stuck", "delivered") and not attempt.settled_absent:
            return attempt.provider or providers[0]
    return None


def route(
    providers: Sequence[str],
    history: Sequence[PastAttempt],
    open_circuits: Mapping[str, bool],
    threshold: int,
) -> Route:
    """Where a row's next attempt goes: `providers` in order, the row's earlier attempts
    (oldest first), which providers' circuits refuse it now, and the per-row threshold."""
    if not providers:
        raise ValueError("a route needs at least one provider")
    pinned = pinned_provider(providers, history)
    if pinned is not None:
        index = providers.index(pinned) if pinned in providers else 0
        return Route(providers[index], index)
    transients: dict[str, int] = {}
    for attempt in history:
        if attempt.outcome == "transient":
            name = attempt.provider or providers[0]
            transients[name] = transients.get(name, 0) + 1
    # Providers this row has not used up, in order; the last one stays when all are.
    remaining = [i for i, name in enumerate(providers) if transients.get(name, 0) < threshold]
    candidates = remaining or [len(providers) - 1]
    skipped = False
    for index in candidates:
        if open_circuits.get(providers[index], False) and index != candidates[-1]:
            skipped = True
            continue
        reason: FailoverReason | None = None
        if index:
            reason = "circuit_open" if skipped else "threshold"
        return Route(providers[index], index, reason)
    raise AssertionError("unreachable: the last candidate is always taken")
