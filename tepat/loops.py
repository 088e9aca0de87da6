"""Helpers for the long-running loops of the scheduler and consumer processes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from tepat.clock import Clock


async def wait_or_stop(clock: Clock, stop: asyncio.Event, seconds: float) -> None:
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeper.cancel()
        stopper.cancel()


class LoopLog(Protocol):
    def exception(self, event: str) -> object: ...

    def warning(self, event: str, *, error: str) -> object: ...


async def repeat(
    clock: Clock,
    stop: asyncio.Event,
    seconds: float,
    one_round: Callable[[], Awaitable[object]],
    log: LoopLog,
    failed: str,
    *,
    while_busy: bool = False,
    expected: tuple[type[Exception], ...] = (),
) -> None:
    """Run ``one_round`` until ``stop``, every ``seconds`` (``while_busy``: straight on
    while a round returns something true, i.e. found work). A round that raises is
    logged as ``failed`` with its traceback, and the loop carries on: one bad round
    must not end a process's job. An ``expected`` error (the store's "unavailable",
    during an outage) is one warning line without a traceback, once per round."""
    while not stop.is_set():
        busy: object = None
        try:
            busy = await one_round()
        except expected as e:
            log.warning(failed, error=f"{type(e).__name__}: {e}")
        except Exception:
            log.exception(failed)
        if not (while_busy and busy):
            await wait_or_stop(clock, stop, seconds)
