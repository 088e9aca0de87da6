"""tepat/loops.py repeat(): a failing round never ends the job; an expected failure (the
store's outage) is one warning line without a traceback, any other a logged exception."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from tepat.clock import FakeClock
from tepat.loops import repeat
from tests.support.waiting import eventually


class Outage(Exception):
    pass


class Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, str | None]] = []

    def exception(self, event: str) -> None:
        self.lines.append(("exception", event, None))

    def warning(self, event: str, *, error: str) -> None:
        self.lines.append(("warning", event, error))


async def test_an_expected_failure_is_a_warning_and_the_job_goes_on() -> None:
    stop = asyncio.Event()
    failures: list[Exception] = [Outage("server gone"), KeyError("a bug")]
    rounds = 0

    async def one_round() -> bool:
        nonlocal rounds
        rounds += 1
        if failures:
            raise failures.pop(0)
        stop.set()
        return False

    log = Lines()
    clock = FakeClock(datetime(2027, 3, 1, tzinfo=UTC))
    job = asyncio.create_task(
        repeat(clock, stop, 5, one_round, log, "round failed", expected=(Outage,))
    )
    for _ in range(2):  # after each failed round the job waits on the clock: move it on
        await eventually(lambda: clock.sleepers == 1, what="the job waiting for its next round")
        clock.advance(5)
    await asyncio.wait_for(job, 5)
    assert log.lines == [
        ("warning", "round failed", "Outage: server gone"),
        ("exception", "round failed", None),
    ]
    assert rounds == 3
