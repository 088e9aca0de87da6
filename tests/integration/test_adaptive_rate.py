"""The send rate finds what Expo accepts (the sandbox at 100/s; Tepat configured at 600)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import httpx
import pytest

from tepat.adapters.adaptive_rate import HOLD_SECONDS, AdaptiveRate
from tepat.adapters.expo_push import ExpoPushProvider
from tepat.adapters.rate_limit import TokenBucket
from tepat.clock import FakeClock
from tepat.ports.push import PushRequest, Tickets
from tepat.ports.try_again import TryAgain
from tepat.sandbox.expo import ExpoSandbox
from tepat.sandbox.server import running_sandbox

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
                    assert isinstance(result, TryAgain) and result.throttled
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


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def test_requests_refused_together_bring_the_rate_down_once_per_episode() -> None:
    # Several requests are in flight at once; when the provider's limit is hit they come
    # back 429 together. Only the first says something new: the rest left before it.
    clock = FakeClock(START)
    bucket = TokenBucket(600, clock, capacity=100)
    rate = AdaptiveRate(bucket, 600, clock)
    clock.set(at(0.04))
    rate.accepted(100, sent_at=at(0.0))
    for k, sent in enumerate((0.01, 0.02, 0.03)):
        clock.set(at(0.05 + k / 100))
        rate.throttled_by_provider(retry_after=1.0, sent_at=at(sent))
    assert bucket.rate == pytest.approx(97)  # 100/s accepted, a little under it; once
    assert (rate.throttled, rate.episodes) == (3, 1)
    # A request that left after the rate came down and is refused, the provider taking
    # less than that rate since (50 in 1.03 s): a new episode.
    clock.set(at(1.2))
    rate.accepted(50, sent_at=at(1.1))
    clock.set(at(2.2))
    rate.throttled_by_provider(retry_after=1.0, sent_at=at(2.13))
    assert rate.episodes == 2
    assert bucket.rate == pytest.approx(50 / 1.03 * 0.97)


def test_a_refusal_at_a_rate_the_provider_was_taking_pauses_without_lowering_it() -> None:
    # At Expo's 600/s, every request accepted for 3 s, then one refused: it reached the
    # provider bunched with others (a busy loop let them go together), not too fast on
    # average. Lowering 3 % on each such refusal went 600 -> 546/s in three.
    clock = FakeClock(START)
    bucket = TokenBucket(600, clock, capacity=100)
    rate = AdaptiveRate(bucket, 600, clock)
    for k in range(18):
        clock.set(at(k / 6 + 0.01))
        rate.accepted(100, sent_at=at(k / 6))
    for sent in (3.0, 2.99):  # the one refused, then one of its bunch that left before it
        clock.set(at(3.05))
        rate.throttled_by_provider(retry_after=0.2, sent_at=at(sent), n=100)
        assert bucket.rate == 600 and rate.known_good is None
    assert (rate.throttled, rate.episodes) == (2, 0)
    assert bucket.reserve(100) >= 0.2  # the Retry-After is still honoured
    # Real throttling still brings it down: after the pause the provider takes 300/s.
    for k in range(7):
        clock.set(at(3.25 + k / 3 + 0.01))
        rate.accepted(100, sent_at=at(3.25 + k / 3))
    clock.set(at(5.35))
    rate.throttled_by_provider(retry_after=0.3, sent_at=at(5.3), n=100)
    assert rate.episodes == 1
    assert bucket.rate == pytest.approx(700 / 2.05 * 0.97)


def test_seconds_paused_for_retry_after_are_not_seconds_in_which_nothing_was_accepted() -> None:
    # 97/s in requests of 100 (one every 1.031 s), a 429 and its 1 s pause, then a second
    # 429: the provider took 97/s between them, not the ~65/s that counting the pause as
    # idle would say (which left the sender crawling at half the provider's rate). Taking
    # the rate it was sent at, it stays (a refusal at a pace the provider keeps).
    clock = FakeClock(START)
    bucket = TokenBucket(600, clock, capacity=100)
    rate = AdaptiveRate(bucket, 600, clock)
    clock.set(at(0.02))
    rate.accepted(100, sent_at=at(0.0))
    clock.set(at(0.11))
    rate.throttled_by_provider(retry_after=1.0, sent_at=at(0.1))  # paused until 1.11
    for sent in (1.11, 2.141):
        clock.set(at(sent + 0.01))
        rate.accepted(100, sent_at=at(sent))
    clock.set(at(3.18))
    rate.throttled_by_provider(retry_after=1.0, sent_at=at(3.172))
    assert rate.known_good == pytest.approx(97, rel=0.01)
    assert bucket.rate == pytest.approx(97, rel=0.01)


def test_no_probing_above_the_known_good_rate_for_a_while_after_a_refusal() -> None:
    clock = FakeClock(START)
    bucket = TokenBucket(100, clock, capacity=100)
    rate = AdaptiveRate(bucket, 600, clock)
    for sent in (0.0, 1.0, 2.0):  # 100/s, measured over two seconds
        clock.set(at(sent + 0.01))
        rate.accepted(100, sent_at=at(sent))
    clock.set(at(3.0))
    rate.throttled_by_provider(retry_after=1.0, sent_at=at(2.99))
    known_good = rate.known_good
    assert known_good is not None and bucket.rate == known_good
    t = 4.0
    while t < 3.0 + HOLD_SECONDS - 1:  # a probe now would only find the 429 again
        clock.set(at(t))
        rate.accepted(100, sent_at=at(t))
        t += 1.0
    assert bucket.rate == known_good
    while t < 3.0 + HOLD_SECONDS + 30:  # then it looks for more, slowly
        clock.set(at(t))
        rate.accepted(100, sent_at=at(t))
        t += 1.0
    assert known_good < bucket.rate < known_good * 1.1


def test_a_small_burst_then_a_bigger_request_refused_measures_nothing_so_the_rate_halves() -> None:
    # The first request (12 notifications) was accepted, the next (100) refused 0.07 s
    # later: "12/s" says nothing about a provider that takes 100/s, and taken as the
    # provider's rate it would leave the sender at its floor for a minute.
    clock = FakeClock(START)
    bucket = TokenBucket(600, clock, capacity=100)
    rate = AdaptiveRate(bucket, 600, clock)
    clock.set(at(0.05))
    rate.accepted(12, sent_at=at(0.0))
    clock.set(at(0.08))
    rate.throttled_by_provider(retry_after=1.0, sent_at=at(0.07), n=100)
    assert bucket.rate == 300 and rate.known_good is None
    # A burst as big as the refused request does measure: the provider took 100 in its
    # first second.
    clock.set(at(1.2))
    rate.accepted(100, sent_at=at(1.1))
    clock.set(at(1.5))
    rate.throttled_by_provider(retry_after=1.0, sent_at=at(1.43), n=100)
    assert bucket.rate == pytest.approx(97)


def test_requests_hold_at_most_half_a_second_of_the_rate() -> None:
    clock = FakeClock(START)
    bucket = TokenBucket(600, clock, capacity=100)
    rate = AdaptiveRate(bucket, 600, clock)
    assert rate.request_size(100) == 100  # Expo's 600/s: requests of 100
    bucket.set_rate(300)  # two consumers sharing it: still 100
    assert rate.request_size(100) == 100
    bucket.set_rate(97)  # a provider taking 100/s: two requests a second
    assert rate.request_size(100) == 48
    bucket.set_rate(1)
    assert rate.request_size(100) == 1


async def test_six_requests_in_flight_at_once_cost_one_429_at_the_start() -> None:
    # As the consumer's batcher sends: up to six requests at once, a refused one sent
    # again later. Configured at 600/s against a provider taking 100/s, the requests
    # already queued when the first 429 comes back must wait, not follow it into 429s.
    clock = FakeClock(START)
    sandbox = ExpoSandbox(clock=clock, receipt_delay_seconds=900)
    sandbox.set_rate_limit(100)
    transport = httpx.ASGITransport(app=sandbox.app)
    chunks = [requests(100, 100 * i) for i in range(24)]
    refused = 0
    workers = 6

    async def worker(provider: ExpoPushProvider) -> None:
        nonlocal refused, workers
        try:
            while chunks:
                chunk = chunks.pop(0)
                result = await provider.send(chunk)
                if not isinstance(result, Tickets):
                    assert isinstance(result, TryAgain) and result.throttled
                    refused += 1
                    chunks.append(chunk)
        finally:
            workers -= 1

    async with ExpoPushProvider(
        "http://sandbox.test", clock=clock, rate_limit=600, transport=transport
    ) as provider:
        started = clock.now()
        tasks = [asyncio.create_task(worker(provider)) for _ in range(workers)]
        while workers:
            await asyncio.sleep(0)
            if workers and clock.sleepers == workers:  # every sender waits on the clock
                clock.advance(0.005)
        await asyncio.gather(*tasks)
        took = (clock.now() - started).total_seconds()
    assert sandbox.stats()["send_requests"] == 24
    assert refused == 1, refused
    assert took <= 1.1 * 2400 / 100, took
