"""``python -m bench.chaos_host``: the one process of the embedded broker under chaos.

The embedded broker lives inside a process, so the sweeper and the outbox publisher
must run in the same process as the consumer for a re-drive to reach it. This is
``tepat serve`` minus the API and the creator job: restore the pending messages from the
store into the in-process broker, then consume, sweep and publish until SIGTERM (or a
SIGKILL from the bench). It also writes the broker's dead-letter count to
``$BENCH_CHAOS_STATS`` twice a second: nothing else outside this process can see it.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from scheduler.jobs import run_outbox, run_sweeper
from tepat.config import load_settings
from tepat.logging import configure_logging
from tepat.loops import wait_or_stop
from tepat.processes import CONSUMER_PARTS, run_parts
from tepat.runtime import Runtime

STATS_ENV = "BENCH_CHAOS_STATS"


async def report_dead_letters(rt: Runtime, stop: asyncio.Event) -> None:
    target = os.environ.get(STATS_ENV)
    if not target:
        return
    path = Path(target)
    queues = rt.queues
    while not stop.is_set():
        stats = await rt.broker.stats(queues)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"dead_letters": sum(s.dead_letters for s in stats)}))
        tmp.replace(path)
        await wait_or_stop(rt.clock, stop, 0.5)


def main() -> None:
    settings = load_settings()
    configure_logging(settings.log_level, settings.log_json)
    parts = [*CONSUMER_PARTS, run_sweeper, run_outbox, report_dead_letters]
    asyncio.run(run_parts(settings, parts, restore_embedded=True))


if __name__ == "__main__":
    main()
