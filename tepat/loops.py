"""Helpers for the long-running loops of the scheduler and consumer processes."""

from __future__ import annotations

import asyncio

from tepat.clock import Clock


async def wait_or_stop(clock: Clock, stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` on ``clock``, returning early once ``stop`` is set."""
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeper.cancel()
        stopper.cancel()
