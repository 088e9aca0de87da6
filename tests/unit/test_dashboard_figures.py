"""The dashboard's arithmetic: provider codes out of failure reasons, percentiles, rates."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tepat.ports.repositories.ops_views import SendSample
from tepat.services.dashboard import failure_code, percentile, rates

NOW = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("DeviceNotRegistered", "DeviceNotRegistered"),  # a receipt
        ('MessageTooBig: "payload" over 4096 bytes', "MessageTooBig"),  # a ticket
        ("HTTP_401: unauthorized", "HTTP_401"),  # a whole request
        ("gave up after 10 attempts: TOO_MANY_REQUESTS: slow down", "TOO_MANY_REQUESTS"),
        ("InvalidCredentials: bad; DeviceNotRegistered: gone", "InvalidCredentials"),
        ("outcome_unknown", "outcome_unknown"),
        ("sending talking to Expo after the request: ReadTimeout: x", "other"),
        ("", "unknown"),
    ],
)
def test_failure_code(reason: str, code: str) -> None:
    assert failure_code(reason) == code


def test_nearest_rank_percentiles() -> None:
    values = [float(n) for n in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile([7.0], 0.99) == 7.0
    assert percentile([], 0.5) is None


def sample(sent_seconds_ago: float, late: float) -> SendSample:
    sent = NOW - timedelta(seconds=sent_seconds_ago)
    return SendSample("meal", sent - timedelta(seconds=late), sent)


def test_rates_over_full_windows() -> None:
    # newest first, as the store returns them: 30 in the last minute, 10 more before
    samples = [sample(n, late=0.1) for n in range(30)]
    samples += [sample(100 + n, late=2.0) for n in range(10)]
    r = rates(samples, NOW, limit=1000)
    assert r.sends_per_second == 30 / 60
    assert (r.sends_window_seconds, r.lateness_window_seconds) == (60.0, 300.0)
    assert r.lateness_p50_seconds == 0.1 and r.lateness_p99_seconds == 2.0
    assert r.lateness_samples == 40


def test_rates_cut_short_by_the_sample_limit_say_what_they_cover() -> None:
    samples = [sample(n / 100, late=0.5) for n in range(1000)]  # 1000 in the last 10 s
    r = rates(samples, NOW, limit=1000)
    assert r.sends_window_seconds == r.lateness_window_seconds == pytest.approx(9.99)
    assert r.sends_per_second == pytest.approx(1000 / 9.99)


def test_early_sends_count_as_on_time() -> None:
    r = rates([sample(1, late=-0.2)], NOW)
    assert r.lateness_p50_seconds == 0.0
