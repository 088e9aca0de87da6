"""The circuit breaker's rule (tepat/domain/breaker.py) and which answers count as a
provider-side failure (tepat/ports/verdict.verdict_of)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tepat.config import ConfigError, load_settings
from tepat.domain.breaker import Breaker, BreakerSettings, BreakerState, Transition, Verdict
from tepat.ports.channel import Accepted, Delivered, Refused, Withheld
from tepat.ports.push import Rejected, TicketError, TicketOk, Tickets
from tepat.ports.try_again import TryAgain
from tepat.ports.verdict import verdict_of, verdict_of_all

T0 = datetime(2027, 1, 1, tzinfo=UTC)
UP, DOWN, NEITHER = Verdict.UP, Verdict.DOWN, Verdict.NEITHER


@pytest.mark.parametrize(
    ("answer", "verdict"),
    [
        (TryAgain("network error talking to Expo before the request was sent"), DOWN),
        (TryAgain("timeout talking to Expo after the request was sent", maybe_sent=True), DOWN),
        (TryAgain("HTTP 502", server_error=True), DOWN),
        (TryAgain("HTTP 503: unavailable", retry_after=5), DOWN),
        (TryAgain("smtp_connect"), DOWN),
        (TryAgain("twilio_http_500", maybe_sent=True), DOWN),
        # 429 / rate limited: the provider works as designed (the adaptive rate handles it)
        (TryAgain("HTTP 429", retry_after=1, throttled=True), NEITHER),
        (TryAgain("twilio_20429", throttled=True), NEITHER),
        (TryAgain("smtp_451", throttled=True), NEITHER),
        # recipient errors and configuration errors: the provider answered
        (Refused("twilio_21211", suppress="invalid"), UP),
        (Refused("smtp_550_recipient", suppress="hard_bounce"), UP),
        (Tickets([TicketError("DeviceNotRegistered", "gone", permanent=True)]), UP),
        (Tickets([TicketOk("t1")]), UP),
        # one device's notification (failover reads answers per device)
        (TicketOk("t1"), UP),
        (TicketError("DeviceNotRegistered", "gone", permanent=True), UP),
        (Rejected("HTTP 401"), UP),
        (Accepted("SM1"), UP),
        (Delivered(), UP),
        (Withheld(), NEITHER),
    ],
)
def test_which_answers_count_as_provider_failures(answer: object, verdict: Verdict) -> None:
    assert verdict_of(answer) is verdict


def test_a_batch_is_up_if_any_item_was_answered() -> None:
    down = TryAgain("smtp_connect")
    assert verdict_of_all([down, Refused("smtp_550_recipient")]) is UP
    assert verdict_of_all([down, down]) is DOWN
    assert verdict_of_all([Withheld(), TryAgain("429", throttled=True)]) is NEITHER
    assert verdict_of_all([]) is NEITHER


def breaker(threshold: int = 3, cool_down: float = 30, probes: int = 1) -> Breaker:
    return Breaker(BreakerSettings(threshold, timedelta(seconds=cool_down), probes))


def state(b: Breaker) -> BreakerState:
    return b.state  # read afresh: each call moves it


def fail(b: Breaker, n: int, now: datetime = T0) -> None:
    for _ in range(n):
        assert b.admit(now).wait is None
        b.record(DOWN, now)


def test_opens_after_threshold_consecutive_failures_only() -> None:
    b = breaker(threshold=3)
    fail(b, 2)
    b.record(UP, T0)  # a success between resets the count
    fail(b, 2)
    b.record(NEITHER, T0)  # a 429 neither resets nor counts
    assert state(b) is BreakerState.CLOSED
    assert b.admit(T0).wait is None
    t = b.record(DOWN, T0)
    assert t is not None and (t.from_, t.to) == (BreakerState.CLOSED, BreakerState.OPEN)
    assert t.reason == "3 provider-side failures in a row"
    assert state(b) is BreakerState.OPEN


def test_open_refuses_calls_until_the_cool_down_is_over() -> None:
    b = breaker(cool_down=30)
    fail(b, 3)
    assert b.admit(T0).wait == 30
    assert b.admit(T0 + timedelta(seconds=20)).wait == 10
    a = b.admit(T0 + timedelta(seconds=30))
    assert a.wait is None and a.probe
    assert a.transition is not None and a.transition.to is BreakerState.HALF_OPEN
    assert state(b) is BreakerState.HALF_OPEN


def test_half_open_lets_a_limited_number_of_probes_through() -> None:
    b = breaker(cool_down=30, probes=2)
    fail(b, 3)
    later = T0 + timedelta(seconds=30)
    assert [b.admit(later).probe for _ in range(2)] == [True, True]
    waiting = b.admit(later)
    assert waiting.wait == 30 and not waiting.probe
    assert b.record(NEITHER, later, probe=True) is None  # a throttled probe decides nothing
    assert state(b) is BreakerState.HALF_OPEN
    assert b.admit(later).probe  # its slot is free again


def probed(verdict: Verdict, at: datetime) -> tuple[Breaker, Transition]:
    """A breaker opened at T0 (cool-down 30 s), and its probe at ``at`` answering ``verdict``."""
    b = breaker(cool_down=30)
    fail(b, 3)
    assert b.admit(at).probe
    t = b.record(verdict, at, probe=True)
    assert t is not None
    return b, t


def test_a_probe_that_succeeds_closes_it() -> None:
    later = T0 + timedelta(seconds=30)
    b, t = probed(UP, later)
    assert t == Transition(BreakerState.HALF_OPEN, BreakerState.CLOSED, "probe succeeded")
    assert b.admit(later).wait is None
    fail(b, 2, later)  # counting starts again from zero
    assert state(b) is BreakerState.CLOSED


def test_a_probe_that_fails_opens_it_again_for_a_whole_cool_down() -> None:
    later = T0 + timedelta(seconds=40)
    b, t = probed(DOWN, later)
    assert t == Transition(BreakerState.HALF_OPEN, BreakerState.OPEN, "probe failed")
    assert b.admit(later + timedelta(seconds=29)).wait == 1


def test_answers_of_calls_let_through_before_it_opened_decide_nothing() -> None:
    b = breaker()
    for _ in range(4):  # four calls in flight at once
        assert b.admit(T0).wait is None
    for _ in range(3):
        b.record(DOWN, T0)
    assert state(b) is BreakerState.OPEN
    assert b.record(UP, T0) is None  # the fourth, late: the breaker stays open
    later = T0 + timedelta(seconds=30)
    assert b.admit(later).probe
    assert b.record(UP, later) is None  # a late non-probe answer while half-open
    assert state(b) is BreakerState.HALF_OPEN


def test_breaker_settings_default_and_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    s = load_settings()
    assert (s.breaker_threshold, s.breaker_cool_down_seconds, s.breaker_half_open_probes) == (
        5,
        30,
        1,
    )
    monkeypatch.setenv("TEPAT_BREAKER_COOL_DOWN_SECONDS", "2.5")
    assert load_settings().breaker_cool_down_seconds == 2.5


@pytest.mark.parametrize(
    ("change", "variable"),
    [
        ({"breaker_threshold": 0}, "TEPAT_BREAKER_THRESHOLD"),
        ({"breaker_cool_down_seconds": 0}, "TEPAT_BREAKER_COOL_DOWN_SECONDS"),
        ({"breaker_cool_down_seconds": "soon"}, "TEPAT_BREAKER_COOL_DOWN_SECONDS"),
        ({"breaker_half_open_probes": 0}, "TEPAT_BREAKER_HALF_OPEN_PROBES"),
    ],
)
def test_bad_breaker_settings_stop_with_one_line(change: dict[str, object], variable: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(**change)
    assert str(e.value).startswith(f"tepat: bad configuration: {variable}: ")
    assert "\n" not in str(e.value)
