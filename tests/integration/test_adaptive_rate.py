"""The send rate finds what Expo accepts (the sandbox at 100/s; Tepat configured at 600)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from tepat.adapters.adaptive_rate import AdaptiveRate
from tepat.adapters.expo_push import ExpoPushProvider
from tepat.adapters.rate_limit import TokenBucket
from tepat.clock import FakeClock
from tepat.ports.push import PushRequest, RetryLater, Tickets
from tepat.sandbox import ExpoSandbox, running_sandbox

T = TypeVar("T")
START = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


async def driving(clock: FakeClock, work: Coroutine[Any, Any, T], step: float = 0.02) -> T:
    """Run ``work``, moving the fake clock forward while it waits on it."""
    task = asyncio.ensure_future(work)
    while not task.done():
        await asyncio.sleep(0)
        if clock.sleepers:
            clock.advance(timedelta(seconds=step))
        else:
            await asyncio.wait({task}, timeout=0.01)
    return task.result()


def requests(n: int, offset: int = 0) -> list[PushRequest]:
    return [
        PushRequest(f"m{i}", f"ExponentPushToken[r{i}]", "t", "b")
        for i in range(offset, offset + n)
    ]


async def test_a_provider_accepting_a_sixth_of_the_ceiling_costs_few_429s_and_little_time() -> None:
    clock = FakeClock(START)
    sandbox = ExpoSandbox(clock=clock, receipt_delay_seconds=900)
    sandbox.set_rate_limit(100)
    with running_sandbox(sandbox) as server:
        async with ExpoPushProvider(server.base_url, clock=clock, rate_limit=600) as provider:
            sent = 0
            refused = 0
            started = clock.now()
            while sent < 1200:
                result = await driving(clock, provider.send(requests(100, sent)))
                if isinstance(result, Tickets):
                    sent += 100
                else:
                    assert isinstance(result, RetryLater) and result.throttled
                    refused += 1
            took = (clock.now() - started).total_seconds()
    ideal = 1200 / 100
    assert refused <= 3, refused  # 429s: at most a few requests of the 12 + refused
    assert took <= 1.2 * ideal, took
    assert provider.adaptive.rate <= 100


def test_throttled_with_nothing_accepted_halves_and_honours_retry_after() -> None:
    clock = FakeClock(START)
    bucket = TokenBucket(600, clock, capacity=100)
    rate = AdaptiveRate(bucket, 600, clock)
    rate.throttled_by_provider(retry_after=2.0)
    assert bucket.rate == 300
    assert bucket.reserve(100) >= 2.0  # a full request waits the Retry-After


def test_rate_creeps_back_up_while_accepted_and_never_above_the_share() -> None:
    clock = FakeClock(START)
    bucket = TokenBucket(600, clock, capacity=100)
    rate = AdaptiveRate(bucket, 600, clock)
    rate.throttled_by_provider(retry_after=None)
    low = bucket.rate
    for _ in range(60):
        clock.advance(1.0)
        rate.accepted(100)
    assert low < bucket.rate <= 600
    rate.set_share(0.5)
    assert bucket.rate <= 300
    for _ in range(600):
        clock.advance(1.0)
        rate.accepted(100)
    assert bucket.rate == 300


def test_a_429_storm_halves_once_per_gap_never_under_the_floor_and_recovers_fast() -> None:
    clock = FakeClock(START)
    bucket = TokenBucket(600, clock, capacity=100)
    rate = AdaptiveRate(bucket, 600, clock)
    for _ in range(40):  # a 20 s storm: a 429 every half second, nothing accepted
        rate.throttled_by_provider(retry_after=1.0)
        clock.advance(0.5)
    assert bucket.rate == rate.floor == 30  # 5 % of the ceiling, not 1/s
    for _ in range(8):  # the storm is over
        clock.advance(1.0)
        rate.accepted(100)
    assert bucket.rate == 600  # back in seconds, not the 38 minutes a slow probe would take


def test_recovery_after_an_hour_of_silence_reaches_the_known_good_rate_without_overflow() -> None:
    # Regression: 1.5 ** 3179 s of quiet overflowed a float and broke the send path.
    clock = FakeClock(START)
    bucket = TokenBucket(600, clock=clock)
    rate = AdaptiveRate(bucket, 600, clock)
    rate.accepted(100)
    clock.advance(timedelta(seconds=1))
    rate.throttled_by_provider(None)  # known good: what was accepted (about 100/s)
    clock.advance(timedelta(seconds=3))
    rate.throttled_by_provider(None)  # nothing accepted since: halved below known good
    known_good = rate.known_good
    assert known_good is not None and bucket.rate < known_good
    clock.advance(timedelta(seconds=3179))
    rate.accepted(1)
    assert bucket.rate == known_good
