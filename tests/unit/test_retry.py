"""Full-jitter exponential backoff, Retry-After, and when to give up."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tepat.domain.retry import ProviderTerms, RetryPolicy

POLICY = RetryPolicy(base_seconds=1.0, cap_seconds=300.0, max_attempts=10)


@given(st.integers(1, 5000), st.integers(0, 2**32))
def test_full_jitter_bounds(attempt: int, seed: int) -> None:
    """delay(n) is uniform in [0, min(cap, base * 2**(n-1))]. Attempts far past
    max_attempts used to raise OverflowError (2**1999 does not fit a float): fixed."""
    ceiling = min(300.0, 2.0 ** min(attempt - 1, 64))
    got = POLICY.delay(attempt, rng=random.Random(seed))
    assert 0.0 <= got <= ceiling


def test_ceilings_double_then_cap() -> None:
    """Worked example, base 1 s cap 300 s: ceilings 1, 2, 4, ... 256, then 300.
    A seeded generator returning its maximum shows the ceiling itself."""

    class Top(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return b

    ceilings = [POLICY.delay(n, rng=Top()) for n in range(1, 12)]
    assert ceilings == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]


def test_jitter_spreads_over_the_whole_range() -> None:
    """Full jitter, not 'equal jitter': with a seeded Random, attempt 6 (ceiling 32 s)
    yields values across [0, 32], some below half of it."""
    rng = random.Random(1234)
    values = [POLICY.delay(6, rng=rng) for _ in range(2000)]
    assert min(values) < 1.0
    assert max(values) > 31.0
    assert sum(v < 16 for v in values) > 800
    assert all(0 <= v <= 32 for v in values)


def test_seeded_delays_are_reproducible() -> None:
    a = [POLICY.delay(n, rng=random.Random(7)) for n in range(1, 10)]
    b = [POLICY.delay(n, rng=random.Random(7)) for n in range(1, 10)]
    assert a == b


@pytest.mark.parametrize("attempt", [0, -3])
def test_attempt_below_one_is_treated_as_first(attempt: int) -> None:
    assert 0 <= POLICY.delay(attempt, rng=random.Random(0)) <= 1.0


@given(st.integers(1, 20), st.floats(0, 10_000), st.integers(0, 2**32))
def test_retry_after_is_honoured(attempt: int, retry_after: float, seed: int) -> None:
    """Never retry sooner than the provider asked, even beyond the cap."""
    got = POLICY.delay(attempt, retry_after=retry_after, rng=random.Random(seed))
    assert got >= retry_after
    assert got <= max(retry_after, 300.0)


def test_retry_after_worked_example() -> None:
    """Attempt 1's ceiling is 1 s; a 120 s Retry-After wins. A 0 or negative one is ignored."""
    assert POLICY.delay(1, retry_after=120.0, rng=random.Random(0)) == 120.0
    assert 0 <= POLICY.delay(1, retry_after=-5.0, rng=random.Random(0)) <= 1.0


FIRST = datetime(2027, 6, 10, 13, 0, tzinfo=UTC)


def test_gives_up_by_attempts() -> None:
    assert not POLICY.gives_up(9, FIRST, FIRST)
    assert POLICY.gives_up(10, FIRST, FIRST)
    assert POLICY.gives_up(11, FIRST, FIRST)


def test_gives_up_by_age() -> None:
    assert not POLICY.gives_up(1, FIRST, FIRST + timedelta(hours=1))  # exactly max_age: not yet
    assert POLICY.gives_up(1, FIRST, FIRST + timedelta(hours=1, seconds=1))
    short = RetryPolicy(max_age=timedelta(minutes=5))
    assert short.gives_up(1, FIRST, FIRST + timedelta(minutes=6))
    assert not short.gives_up(1, FIRST, FIRST + timedelta(minutes=4))


def test_a_providers_terms_raise_the_base_and_shorten_the_age() -> None:
    """FCM's terms: backoff from 10 s (10, 20, 40 ... as ceilings), and not past an hour
    even where the deployment allows two; a policy already slower or shorter keeps its own."""

    class Top(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return b

    fcm = ProviderTerms(base_seconds=10.0, max_age=timedelta(hours=1))
    held = RetryPolicy(base_seconds=1.0, max_age=timedelta(hours=2)).under(fcm)
    assert [held.delay(n, rng=Top()) for n in range(1, 7)] == [10, 20, 40, 80, 160, 300]
    assert held.gives_up(1, FIRST, FIRST + timedelta(hours=1, seconds=1))
    slow = RetryPolicy(base_seconds=30.0, max_age=timedelta(minutes=5))
    assert slow.under(fcm) == slow
    assert POLICY.under(None) is POLICY
