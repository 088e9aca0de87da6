"""``tepat plan --workers N``: one plan window split into user-id ranges, each planned
by a process of its own.

Planning is CPU-bound Python; a second process uses a second core. Each worker opens
its own store connection (SQLite in WAL mode waits on its busy timeout for the
single writer) and plans ``(after, until]`` of the users. Inserts are idempotent
(unique indexes) and marks are compare-and-set, so ranges that overlapped, or a
worker that died, would cost work, never a duplicate or a loss. Workers do not
publish: the parent flushes the outbox once at the end (one publisher), or leaves
it to a serving process beside an embedded broker.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime

from tepat.config import load_settings
from tepat.domain.planning import planning_fingerprint
from tepat.logging import configure_logging
from tepat.runtime import Runtime
from tepat.services.planning.creator import PlanResult

#: Fewer users than this to plan: one process does it (workers take a second to start).
PARALLEL_FROM = 5_000

#: Called as each worker finishes: (users it planned, the combined result so far).
WorkerDone = Callable[[int, PlanResult], None]


def ranges(bounds: list[str]) -> list[tuple[str, str | None]]:
    """``(after, until]`` ranges covering every user id, from the split points."""
    return list(zip(["", *bounds], [*bounds, None], strict=True))


async def plan_parallel(
    rt: Runtime,
    start: datetime,
    end: datetime,
    workers: int,
    done: WorkerDone | None = None,
    parallel_from: int = PARALLEL_FROM,
) -> PlanResult:
    """Plan ``[start, end)`` over ``workers`` processes; the combined result.

    One worker, or a run with little to do (a later run: most marks cover the window),
    stays in this process: starting workers would cost more than it saves.
    """
    fingerprint = planning_fingerprint(rt.categories)
    pages = rt.store.users_to_plan(start, end, fingerprint, batch_size=parallel_from)
    if workers == 1 or len(await anext(pages, [])) < parallel_from:
        # An embedded broker lives inside the serving process: this one's would vanish
        # on exit. The server's outbox loop publishes from the store.
        return await rt.creator.plan_window(
            start, end, publish=not rt.embedded_broker, progress=done
        )
    parts = ranges(await rt.store.user_id_bounds(workers))
    loop = asyncio.get_running_loop()
    total = PlanResult()
    # spawn: a forked child would inherit this process's threads and event loop.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=len(parts), mp_context=context) as pool:
        pending = {
            loop.run_in_executor(pool, _plan_range, start, end, after, until)
            for after, until in parts
        }
        while pending:
            finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
            for f in finished:
                result = f.result()
                total += result
                if done is not None:
                    done(result.users_planned, total)
    if not rt.embedded_broker:
        await rt.outbox.flush()
    return total


def _plan_range(start: datetime, end: datetime, after: str, until: str | None) -> PlanResult:
    """One worker: its own settings (from the same environment), store and runtime."""
    from tepat.runtime import open_runtime

    settings = load_settings()
    configure_logging(settings.log_level, settings.log_json, settings.access_log_level)

    async def go() -> PlanResult:
        async with open_runtime(settings) as rt:
            return await rt.creator.plan_window(start, end, publish=False, after=after, until=until)

    return asyncio.run(go())
