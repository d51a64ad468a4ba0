"""Failover's pure rules: the circuit's states and where a row's next attempt goes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tickwork.engine.failover import (
    CLOSED,
    Circuit,
    CircuitPolicy,
    PastAttempt,
    Route,
    WaveAnswers,
    admits,
    after_wave,
    give_back,
    probe_timeout,
    route,
    take,
)

NOW = datetime(2026, 5, 20, 9, 0, tzinfo=UTC)
POLICY = CircuitPolicy(
    failures=3, window_seconds=60, cooldown_seconds=120, probe_timeout_seconds=120
)
EMAIL = ["postmark", "ses"]


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


# ----------------------------------------------------------------------------- circuit


def test_failures_within_the_window_open_the_circuit():
    circuit = after_wave(CLOSED, POLICY, WaveAnswers(failed=2), NOW)
    assert (circuit.state, circuit.failures) == ("closed", 2)
    assert admits(circuit, POLICY, NOW)
    circuit = after_wave(circuit, POLICY, WaveAnswers(failed=1), later(30))
    assert (circuit.state, circuit.opened_at) == ("open", later(30))
    assert not admits(circuit, POLICY, later(31))


def test_failures_spread_over_more_than_the_window_do_not_open_it():
    circuit = after_wave(CLOSED, POLICY, WaveAnswers(failed=2), NOW)
    circuit = after_wave(circuit, POLICY, WaveAnswers(failed=2), later(61))
    assert (circuit.state, circuit.failures, circuit.window_started) == ("closed", 2, later(61))


def test_answers_alone_keep_it_closed():
    assert after_wave(CLOSED, POLICY, WaveAnswers(answered=50), NOW) == CLOSED


def test_after_the_cooldown_one_probe_goes_and_its_answer_closes_the_circuit():
    opened = Circuit("open", opened_at=NOW)
    assert not admits(opened, POLICY, later(119))
    assert admits(opened, POLICY, later(120))
    probing = take(opened, later(120))
    assert (probing.state, probing.probing, probing.probe_taken_at) == (
        "half_open", True, later(120))  # fmt: skip
    assert not admits(probing, POLICY, later(121))  # one probe at a time
    assert after_wave(probing, POLICY, WaveAnswers(answered=1), later(122)) == CLOSED


def test_a_failed_probe_opens_the_circuit_again_for_a_whole_cooldown():
    probing = take(Circuit("open", opened_at=NOW), later(120))
    reopened = after_wave(probing, POLICY, WaveAnswers(failed=1), later(125))
    assert (reopened.state, reopened.opened_at) == ("open", later(125))
    assert not admits(reopened, POLICY, later(244))
    assert admits(reopened, POLICY, later(245))


def test_a_probe_left_unanswered_is_lost_after_its_timeout_and_taken_again():
    # Given a probe taken at 120 s whose dispatcher never reports (it died)
    probing = take(Circuit("open", opened_at=NOW), later(120))
    # Then nobody else probes until its timeout has passed
    assert not admits(probing, POLICY, later(239))
    # And after it, the next row takes the probe in its place
    assert admits(probing, POLICY, later(240))
    again = take(probing, later(240))
    assert (again.state, again.probe_taken_at) == ("half_open", later(240))
    assert not admits(again, POLICY, later(241))
    # Whose answer closes the circuit
    assert after_wave(again, POLICY, WaveAnswers(answered=1), later(241)) == CLOSED


def test_a_half_open_circuit_without_answers_keeps_its_probe_out():
    probing = take(Circuit("open", opened_at=NOW), later(120))
    assert after_wave(probing, POLICY, WaveAnswers(), later(121)) == probing


def test_a_probe_handed_back_unsent_is_free_for_the_next_row():
    probing = take(Circuit("open", opened_at=NOW), later(120))
    freed = give_back(probing, later(120))
    assert (freed.state, freed.probing) == ("half_open", False)
    assert admits(freed, POLICY, later(121))
    # Only the probe the row took: one taken since by another row stays out
    retaken = take(probing, later(240))
    assert give_back(retaken, later(120)) == retaken
    assert give_back(CLOSED, later(120)) == CLOSED


def test_the_probe_timeout_is_a_cooldown_and_never_less_than_a_call_could_take():
    assert probe_timeout(cooldown_seconds=60, provider_timeout_seconds=10) == 60
    assert probe_timeout(cooldown_seconds=2, provider_timeout_seconds=10) == 15
    with pytest.raises(ValueError, match="probe"):
        CircuitPolicy(probe_timeout_seconds=0)


def test_an_open_circuit_ignores_late_answers():
    opened = Circuit("open", opened_at=NOW)
    assert after_wave(opened, POLICY, WaveAnswers(answered=3), later(1)) == opened


def test_a_policy_must_be_able_to_open_and_close():
    with pytest.raises(ValueError, match="circuit"):
        CircuitPolicy(failures=0)
    with pytest.raises(ValueError, match="circuit"):
        CircuitPolicy(cooldown_seconds=0)


# ------------------------------------------------------------------------------- route


def test_a_new_row_goes_to_the_first_provider():
    assert route(EMAIL, [], {}, threshold=2) == Route("postmark", 0)


def test_after_the_threshold_of_transient_answers_the_row_goes_to_the_next():
    one = [PastAttempt("postmark", "transient")]
    assert route(EMAIL, one, {}, threshold=2) == Route("postmark", 0)
    two = [*one, PastAttempt(None, "transient")]  # an entry without a provider: the first
    assert route(EMAIL, two, {}, threshold=2) == Route("ses", 1, "threshold")


def test_an_open_circuit_sends_the_row_straight_to_the_next_provider():
    assert route(EMAIL, [], {"postmark": True}, threshold=2) == Route("ses", 1, "circuit_open")


def test_when_every_circuit_is_open_the_last_provider_is_still_tried():
    both = {"postmark": True, "ses": True}
    assert route(EMAIL, [], both, threshold=2) == Route("ses", 1, "circuit_open")


def test_a_row_that_used_up_every_provider_stays_on_the_last():
    history = [PastAttempt(p, "transient") for p in ("postmark", "postmark", "ses", "ses")]
    assert route(EMAIL, history, {}, threshold=2) == Route("ses", 1, "threshold")


@pytest.mark.parametrize("outcome", ["ambiguous", "stuck"])
def test_an_attempt_that_may_have_arrived_pins_the_row_to_its_provider(outcome):
    history = [PastAttempt("postmark", outcome), PastAttempt("postmark", "transient"),
               PastAttempt("postmark", "transient")]  # fmt: skip
    # Neither the threshold nor an open circuit moves it: SES could send it a second time.
    assert route(EMAIL, history, {"postmark": True}, threshold=2) == Route("postmark", 0)


def test_a_row_pinned_after_failing_over_stays_on_that_provider():
    history = [PastAttempt("postmark", "transient"), PastAttempt("ses", "ambiguous")]
    assert route(EMAIL, history, {"ses": True}, threshold=1) == Route("ses", 1)


def test_the_resolver_settling_an_attempt_absent_frees_the_row_to_fail_over():
    history = [PastAttempt("postmark", "ambiguous", settled_absent=True)]
    assert route(EMAIL, history, {"postmark": True}, threshold=2) == Route("ses", 1, "circuit_open")


def test_a_route_needs_a_provider():
    with pytest.raises(ValueError, match="provider"):
        route([], [], {}, threshold=1)
