"""``python -m bench.consumer_host``: one consumer process for the embedded broker.

The embedded broker lives inside a process, so a separate ``tepat consumers`` would
never see what another process enqueued. This is ``tepat serve`` without the API and
the creator jobs: open the runtime, re-enqueue every pending message from the store
into the in-process broker (as ``serve`` does on start), then run the consumer, the
receipt poller and the outbox loop (which publishes each batch still filling once it
is soon due) until SIGTERM, and drain. It serves every registered app as ``tepat
consumers`` does, and ``/metrics`` on ``TEPAT_METRICS_PORT`` unless that is 0.
"""

from __future__ import annotations

import asyncio

from scheduler.jobs import run_outbox
from tepat.config import load_settings
from tepat.logging import configure_logging
from tepat.processes import CONSUMER_PARTS, metrics_parts, run_parts


def main() -> None:
    settings = load_settings()
    configure_logging(settings.log_level, settings.log_json)
    asyncio.run(
        run_parts(
            settings,
            [*CONSUMER_PARTS, run_outbox],
            once=metrics_parts(settings),
            restore_embedded=True,
        )
    )


if __name__ == "__main__":
    main()
