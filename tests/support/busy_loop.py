"""A busy event loop, as a loaded process has one: callbacks from other threads pile up.

A STOMP connection's receiver thread hands each frame (message, receipt) to the
loop with ``call_soon_threadsafe``. On an idle loop each one runs at once, and a
task woken by a receipt resumes before the next frame arrives. On a loop busy
with other work they queue up and run back to back, in arrival order, before
any task they woke resumes: the order a consumer meets under load, and the one
that exposes a frame handler depending on state a task sets after an await.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress


def _block(seconds: float) -> None:
    # stands in for blocking work (a big encode, a slow log handler); a sleep
    # rather than a spin so that the broker on the same machine keeps its CPU
    time.sleep(seconds)


@asynccontextmanager
async def busy_event_loop(slice_seconds: float = 0.05) -> AsyncIterator[None]:
    """While inside, the loop is blocked in slices of ``slice_seconds``, free one turn between."""

    async def hog() -> None:
        while True:
            _block(slice_seconds)
            await asyncio.sleep(0)

    task = asyncio.create_task(hog())
    try:
        yield
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
