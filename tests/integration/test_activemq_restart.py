"""Restart ActiveMQ while delayed batches wait and are being published: nothing is lost.

Needs a broker managed by ``scripts/activemq.sh`` (the test restarts it):

    scripts/activemq.sh start .broker
    TEPAT_TEST_STOMP_URL=stomp://127.0.0.1:61613 TEPAT_TEST_ACTIVEMQ_BASE=.broker \\
        .venv/bin/pytest tests/integration/test_activemq_restart.py -q -s

50 messages are published with a 4 s delay, one every 0.1 s; after the 20th
the broker is restarted (stop, then start) while publishing goes on, so some
publishes meet a dead connection and must reconnect and retry. One consumer
runs throughout and has to reconnect and resubscribe by itself.

Every message must be delivered. Duplicates are allowed (a publish whose
receipt was lost is resent; the store's claim makes a repeat harmless); the
test prints how many there were.

The second test restarts the broker while a consumer holds a prefetch and a
backlog waits behind it: the consumer must resubscribe and hand out every
message exactly once, with no stall (issue 9, defect 2).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from pathlib import Path

import pytest

from tepat.adapters.stomp import StompBroker
from tests.support.activemq_factory import stomp_url
from tests.support.busy_loop import busy_event_loop
from tests.support.waiting import eventually

# serial: it restarts the broker every other ActiveMQ test shares, so it runs alone
pytestmark = [pytest.mark.activemq, pytest.mark.serial]

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "activemq.sh"
TOTAL = 50
DELAY_SECONDS = 4.0
RESTART_AFTER = 20
DELIVERY_TIMEOUT = 90.0


def broker_base() -> Path:
    base = os.environ.get("TEPAT_TEST_ACTIVEMQ_BASE", "").strip()
    if not base:
        pytest.skip(
            "TEPAT_TEST_ACTIVEMQ_BASE is not set: name the broker base dir that "
            "`scripts/activemq.sh start BASE` manages (this test restarts that broker)"
        )
    return Path(base).resolve()


async def restart_broker(base: Path) -> str:
    proc = await asyncio.create_subprocess_exec(
        str(SCRIPT),
        "restart",
        str(base),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    text = out.decode(errors="replace")
    assert proc.returncode == 0, f"scripts/activemq.sh restart failed:\n{text}"
    return text


async def test_broker_restart_loses_no_delayed_message() -> None:
    url = stomp_url()
    base = broker_base()
    broker = StompBroker(url, request_timeout=5.0, publish_retry_seconds=60.0)
    await broker.connect()
    queue = f"restart.{time.time_ns()}"
    expected = {f"m{i:02d}".encode() for i in range(TOTAL)}
    seen: list[bytes] = []
    all_seen = asyncio.Event()
    subscribed = asyncio.Event()

    async def consume() -> None:
        async with broker.consume([queue], prefetch=100) as deliveries:
            subscribed.set()
            async for delivery in deliveries:
                seen.append(delivery.body)
                await broker.ack(delivery)
                if expected <= set(seen):
                    all_seen.set()

    consumer = asyncio.create_task(consume())
    restart: asyncio.Task[str] | None = None
    try:
        await asyncio.wait_for(subscribed.wait(), 10)
        started = time.monotonic()
        for i in range(TOTAL):
            if i == RESTART_AFTER:
                restart = asyncio.create_task(restart_broker(base))
            await broker.publish(queue, f"m{i:02d}".encode(), delay_seconds=DELAY_SECONDS)
            await asyncio.sleep(0.1)
        publish_seconds = time.monotonic() - started
        assert restart is not None
        restart_log = await restart
        try:
            await asyncio.wait_for(all_seen.wait(), DELIVERY_TIMEOUT)
        except TimeoutError:
            missing = sorted(expected - set(seen))
            pytest.fail(
                f"{len(missing)} of {TOTAL} never delivered after the restart: {missing}"
                f"\nconsumer: {consumer.exception() if consumer.done() else 'running'}"
            )
        # a moment for late duplicates, so the count below is honest
        await asyncio.sleep(3)
        [stats] = await broker.stats([queue])
    finally:
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
        if restart is not None and not restart.done():
            await asyncio.gather(restart, return_exceptions=True)
        await broker.close()

    counts = Counter(seen)
    duplicates = sum(n - 1 for n in counts.values())
    print(
        f"\nactivemq restart: {TOTAL} published in {publish_seconds:.1f} s across the restart, "
        f"{len(counts)} distinct delivered, {duplicates} duplicate deliveries, "
        f"final stats {stats}\n{restart_log.strip()}"
    )
    assert set(counts) == expected
    assert (stats.ready, stats.scheduled, stats.in_flight) == (0, 0, 0)


async def test_consumer_on_a_backlog_handles_every_message_once_across_a_broker_restart() -> None:
    url = stomp_url()
    base = broker_base()
    prefetch = 10
    total = 3 * prefetch
    broker = StompBroker(url, request_timeout=5.0)
    await broker.connect()
    queue = f"restart.backlog.{time.time_ns()}"
    expected = {f"m{i:02d}".encode() for i in range(total)}
    seen: list[bytes] = []
    subscribed, go, all_seen = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def consume() -> None:
        async with broker.consume([queue], prefetch=prefetch) as deliveries:
            subscribed.set()
            # hold the prefetch unhandled, so that the restart meets a full one
            await go.wait()
            async for delivery in deliveries:
                seen.append(delivery.body)
                await broker.ack(delivery)
                if len(seen) >= total:
                    all_seen.set()

    async def holding(in_flight: int, ready: int) -> bool:
        try:
            [stats] = await broker.stats([queue])
        except ConnectionError:  # the broker is restarting
            return False
        return (stats.in_flight, stats.ready) == (in_flight, ready)

    consumer = asyncio.create_task(consume())
    try:
        await asyncio.wait_for(subscribed.wait(), 10)
        for body in sorted(expected):
            await broker.publish(queue, body)
        await eventually(lambda: holding(prefetch, total - prefetch), 20, "a full prefetch")
        # a busy loop lets the backlog's frames overtake the resubscription's receipt
        async with busy_event_loop():
            await restart_broker(base)
            await eventually(
                lambda: holding(prefetch, total - prefetch),
                DELIVERY_TIMEOUT,
                "the consumer to resubscribe and take a prefetch of the backlog",
            )
        go.set()
        try:
            await asyncio.wait_for(all_seen.wait(), 30)
        except TimeoutError:
            pytest.fail(
                f"consumer stalled after the restart: {len(seen)} of {total} handled"
                f"\nconsumer: {consumer.exception() if consumer.done() else 'running'}"
            )
        # every message acked once: nothing comes back, nothing is left
        await eventually(lambda: holding(0, 0), 20, "an empty queue")
    finally:
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
        await broker.close()

    assert Counter(seen) == Counter(expected)
