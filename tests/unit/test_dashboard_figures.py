"""The dashboard's arithmetic: provider codes out of failure reasons, percentiles, rates."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tepat.ports.repositories.ops_views import SendSample
from tepat.services.dashboard import bucket_quantile, failure_code, percentile, rates

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


INF = float("inf")


def test_bucket_quantiles_interpolate_within_the_bucket_as_prometheus_does() -> None:
    # 10 observations: 4 at or below 0.1 s, 8 at or below 1 s, all 10 at or below 5 s.
    buckets = [(0.1, 4.0), (1.0, 8.0), (5.0, 10.0), (INF, 10.0)]
    assert bucket_quantile(0.2, buckets) == pytest.approx(0.05)  # rank 2 of the first 4
    assert bucket_quantile(0.5, buckets) == pytest.approx(0.1 + 0.9 * 1 / 4)  # rank 5
    assert bucket_quantile(0.99, buckets) == pytest.approx(1.0 + 4.0 * 1.9 / 2)  # rank 9.9
    assert bucket_quantile(1.0, buckets) == pytest.approx(5.0)


def test_a_quantile_in_the_inf_bucket_is_the_highest_finite_bound() -> None:
    assert bucket_quantile(0.99, [(0.1, 1.0), (1.0, 1.0), (INF, 3.0)]) == 1.0
    assert bucket_quantile(0.5, [(INF, 3.0)]) == 0.0  # no finite bound: Prometheus says 0


def test_no_observations_no_quantile() -> None:
    assert bucket_quantile(0.5, []) is None
    assert bucket_quantile(0.5, [(0.1, 0.0), (INF, 0.0)]) is None


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
