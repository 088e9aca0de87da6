"""The token bucket, driven by FakeClock: no test sleeps."""

from __future__ import annotations

import asyncio

import pytest

from tepat.adapters.rate_limit import TokenBucket
from tepat.clock import FakeClock


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_starts_full_and_refills_at_rate_up_to_capacity() -> None:
    clock = FakeClock()
    bucket = TokenBucket(10, clock, capacity=5)
    assert bucket.available == 5
    assert bucket.try_acquire(5) == 0.0
    assert bucket.available == 0
    clock.advance(0.2)
    assert bucket.available == pytest.approx(2)
    clock.advance(60)
    assert bucket.available == 5  # never more than capacity


def test_try_acquire_refuses_without_taking_and_says_how_long() -> None:
    clock = FakeClock()
    bucket = TokenBucket(10, clock, capacity=10)
    assert bucket.try_acquire(8) == 0.0
    wait = bucket.try_acquire(5)
    assert wait == pytest.approx(0.3)
    assert bucket.available == pytest.approx(2)  # nothing was taken
    clock.advance(wait)
    assert bucket.try_acquire(5) == 0.0


def test_try_acquire_lets_a_request_bigger_than_the_bucket_through_when_full() -> None:
    clock = FakeClock()
    bucket = TokenBucket(10, clock)  # capacity defaults to the rate
    assert bucket.try_acquire(100) == 0.0
    assert bucket.available == -90  # in debt: nothing passes for 10 s
    assert bucket.try_acquire(1) == pytest.approx(9.1)
    clock.advance(10)
    assert bucket.try_acquire(100) == 0.0


def test_reserve_goes_into_debt_and_reports_the_wait() -> None:
    clock = FakeClock()
    bucket = TokenBucket(100, clock, capacity=100)
    assert bucket.reserve(100) == 0.0
    assert bucket.reserve(50) == pytest.approx(0.5)
    assert bucket.reserve(50) == pytest.approx(1.0)  # queued behind the first reservation


async def test_acquire_waits_on_the_clock_until_the_tokens_are_there() -> None:
    clock = FakeClock()
    bucket = TokenBucket(100, clock, capacity=100)
    assert await bucket.acquire(100) == 0.0  # immediate

    done: list[str] = []

    async def take(name: str, n: int) -> None:
        await bucket.acquire(n)
        done.append(name)

    first = asyncio.create_task(take("first", 50))
    second = asyncio.create_task(take("second", 50))
    await settle()
    assert done == [] and clock.sleepers == 2
    clock.advance(0.49)
    await settle()
    assert done == []
    clock.advance(0.01)
    await settle()
    assert done == ["first"]
    clock.advance(0.5)
    await asyncio.gather(first, second)
    assert done == ["first", "second"]


async def test_sustained_rate_is_respected() -> None:
    """600 notifications/s in batches of 100 through a 100-token bucket: 3000 take 4 s."""
    clock = FakeClock()
    start = clock.now()
    bucket = TokenBucket(600, clock, capacity=100)
    for _ in range(30):
        task = asyncio.create_task(bucket.acquire(100))
        await settle()
        while not task.done():
            clock.advance(0.001)
            await settle()
    elapsed = (clock.now() - start).total_seconds()
    assert elapsed == pytest.approx((3000 - 100) / 600, abs=0.01)


@pytest.mark.parametrize("rate", [0, -1])
def test_rejects_a_non_positive_rate(rate: float) -> None:
    with pytest.raises(ValueError):
        TokenBucket(rate, FakeClock())


def test_rejects_negative_amounts() -> None:
    bucket = TokenBucket(1, FakeClock())
    with pytest.raises(ValueError):
        bucket.reserve(-1)
    with pytest.raises(ValueError):
        bucket.try_acquire(-1)


async def test_a_pause_holds_back_the_senders_already_waiting_then_spaces_them() -> None:
    # A provider's 429 must reach the requests already queued for tokens: woken on their
    # old schedule, they would go straight into more 429s.
    clock = FakeClock()
    bucket = TokenBucket(100, clock, capacity=100)
    await bucket.acquire(100)
    first = asyncio.create_task(bucket.acquire(100))  # due at 1.0
    second = asyncio.create_task(bucket.acquire(100))  # due at 2.0
    await settle()
    clock.advance(0.5)
    bucket.pause(1.0)  # nothing goes before 1.5
    clock.advance(0.99)
    await settle()
    assert not first.done()
    clock.advance(0.01)
    await settle()
    assert first.done() and not second.done()
    clock.advance(0.99)
    await settle()
    assert not second.done()  # one request's cost after the first, not its old 2.0
    clock.advance(0.01)
    await settle()
    assert second.done()


async def test_a_lower_rate_applies_to_the_senders_already_waiting() -> None:
    clock = FakeClock()
    bucket = TokenBucket(100, clock, capacity=100)
    await bucket.acquire(100)
    waiting = asyncio.create_task(bucket.acquire(100))  # due at 1.0 at 100/s
    await settle()
    clock.advance(0.5)
    bucket.set_rate(50)  # the other half of its tokens now takes a second
    clock.advance(0.5)
    await settle()
    assert not waiting.done()  # its old schedule
    clock.advance(0.49)
    await settle()
    assert not waiting.done()
    clock.advance(0.01)
    await settle()
    assert waiting.done()


async def test_a_sender_that_woke_late_does_not_pass_its_lateness_on() -> None:
    # The provider's bucket was full when the late request reached it and kept no more:
    # the next request of a full bucket's cost must wait a whole second after it.
    clock = FakeClock()
    bucket = TokenBucket(100, clock, capacity=100)
    assert await bucket.acquire(50) == 0.0  # a burst within the bucket still goes at once
    assert await bucket.acquire(50) == 0.0
    late = asyncio.create_task(bucket.acquire(100))  # due at 1.0
    await settle()
    clock.advance(1.3)  # the event loop was busy: it goes 0.3 s late
    await settle()
    assert late.done()
    following = asyncio.create_task(bucket.acquire(100))
    await settle()
    clock.advance(0.99)  # 2.29: the old schedule (2.0) is long past
    await settle()
    assert not following.done()
    clock.advance(0.01)
    await settle()
    assert following.done()
