"""FakeClock: time moves only when told, never backwards, and wakes sleepers in order."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from tepat.clock import FakeClock, SystemClock

T0 = datetime(2027, 1, 1, tzinfo=UTC)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_wakes_sleepers_in_deadline_order() -> None:
    clock = FakeClock(T0)
    woke: list[tuple[str, datetime]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append((name, clock.now()))

    tasks = [
        asyncio.create_task(sleeper(n, s)) for n, s in [("c", 30), ("a", 10), ("b", 20), ("a2", 10)]
    ]
    await settle()
    assert clock.sleepers == 4
    clock.advance(5)
    await settle()
    assert woke == []
    clock.advance(timedelta(seconds=15))  # now T0+20: a, a2 (10 s) and b (20 s) are due
    await settle()
    assert [n for n, _ in woke] == ["a", "a2", "b"]  # deadline order, ties in arrival order
    assert clock.sleepers == 1
    clock.set(T0 + timedelta(hours=1))
    await asyncio.gather(*tasks)
    assert [n for n, _ in woke] == ["a", "a2", "b", "c"]
    assert clock.sleepers == 0


async def test_sleep_until_past_returns_at_once() -> None:
    clock = FakeClock(T0)
    await asyncio.wait_for(clock.sleep_until(T0), 1)
    await asyncio.wait_for(clock.sleep_until(T0 - timedelta(days=1)), 1)
    await asyncio.wait_for(clock.sleep(0), 1)
    assert clock.now() == T0


async def test_sleeper_not_woken_early() -> None:
    clock = FakeClock(T0)
    task = asyncio.create_task(clock.sleep_until(T0 + timedelta(seconds=10)))
    await settle()
    clock.advance(timedelta(seconds=9, microseconds=999_999))
    await settle()
    assert not task.done()
    clock.advance(timedelta(microseconds=1))
    await settle()
    assert task.done()


async def test_cancelled_sleeper_does_not_break_others() -> None:
    clock = FakeClock(T0)
    gone = asyncio.create_task(clock.sleep(5))
    stays = asyncio.create_task(clock.sleep(6))
    await settle()
    gone.cancel()
    await settle()
    assert clock.sleepers == 1
    clock.advance(10)
    await settle()
    assert stays.done() and gone.cancelled()


def test_never_goes_backwards() -> None:
    clock = FakeClock(T0)
    with pytest.raises(ValueError):
        clock.set(T0 - timedelta(microseconds=1))
    with pytest.raises(ValueError):
        clock.advance(-1)
    assert clock.now() == T0
    clock.set(T0)  # standing still is allowed
    clock.advance(0)
    assert clock.now() == T0


def test_default_start_is_utc() -> None:
    assert FakeClock().now().tzinfo is UTC
    assert SystemClock().now().tzinfo is UTC
