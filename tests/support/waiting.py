"""Waiting on conditions instead of sleeping: the only way tests let things happen."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta

from tepat.clock import FakeClock

Predicate = Callable[[], Awaitable[bool]] | Callable[[], bool]


async def _check(pred: Predicate) -> bool:
    result = pred()
    if isinstance(result, Awaitable):
        return bool(await result)
    return bool(result)


async def eventually(pred: Predicate, timeout: float = 10.0, what: str = "condition") -> None:  # noqa: ASYNC109
    """Return as soon as ``pred()`` holds; fail the test after ``timeout`` real seconds."""
    deadline = time.monotonic() + timeout
    while not await _check(pred):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


async def stays_false(pred: Predicate, window: float = 0.3) -> bool:
    """True if ``pred()`` never held during ``window`` real seconds (for "nothing happens")."""
    deadline = time.monotonic() + window
    while time.monotonic() < deadline:
        if await _check(pred):
            return False
        await asyncio.sleep(0.01)
    return True


async def drive(
    clock: FakeClock,
    pred: Predicate,
    step: timedelta = timedelta(seconds=5),
    max_steps: int = 500,
    settle: float = 0.05,
    what: str = "condition",
) -> None:
    """Move fake time forward a step at a time until ``pred()`` holds."""
    for _ in range(max_steps):
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline:
            if await _check(pred):
                return
            await asyncio.sleep(0.005)
        clock.advance(step)
    raise AssertionError(f"{what} did not hold after {max_steps} steps of {step}")
