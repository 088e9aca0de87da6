"""A batch's channels are waited for together: one failing never leaves another's sends
running unawaited while the batch goes back to the broker."""

from __future__ import annotations

import asyncio

import pytest

from tepat.services.sending.channel_sender import gather_all


async def test_every_channel_finishes_before_the_first_error_is_raised() -> None:
    finished: list[str] = []
    slow_started = asyncio.Event()

    async def failing() -> None:
        await slow_started.wait()
        raise RuntimeError("the e-mail relay's client broke")

    async def slow() -> None:
        slow_started.set()
        for _ in range(5):  # still sending when the other channel fails
            await asyncio.sleep(0)
        finished.append("sms recorded")

    with pytest.raises(RuntimeError, match="relay"):
        await gather_all(failing(), slow())
    assert finished == ["sms recorded"]


async def test_cancelling_cancels_every_channel() -> None:
    started: list[str] = []
    both_started = asyncio.Event()
    cancelled: list[str] = []

    async def waits(name: str) -> None:
        try:
            started.append(name)
            if len(started) == 2:
                both_started.set()
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(name)
            raise

    task = asyncio.create_task(gather_all(waits("push"), waits("inbox")))
    await both_started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(cancelled) == ["inbox", "push"]
