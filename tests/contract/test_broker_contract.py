"""The Broker contract: every adapter (embedded, ActiveMQ) must pass all of it.

Written to run on fake time and on real time alike. Tests never sleep to let
time pass: they call ``broker_harness.advance(...)`` (moves a FakeClock, a no-op
on a real broker) and then wait on a condition with a timeout. Real-time delays
stay at 1-3 s; ActiveMQ's scheduler is ~0.5 s coarse, so a timeout is never a
tight bound on arrival, only a guard against hanging.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, suppress
from datetime import timedelta

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tepat import tracing
from tepat.ports.broker import Broker, DeadLetter, Delivery, QueueStats
from tests.support.broker_factories import BrokerHarness
from tests.support.busy_loop import busy_event_loop

# Generous on purpose: only a failing test (or a slow real broker) waits this long.
ARRIVAL_TIMEOUT = 10.0
# ActiveMQ's scheduler rounds up to 0.5 s and may fire a little early or late.
SCHEDULER_SLACK = timedelta(seconds=0.1)


def quiet_period(harness: BrokerHarness) -> float:
    """How long to watch for a delivery that must not come.

    On fake time a wrong delivery would arrive within a few loop turns; on a
    real broker it needs a network round trip and a dispatch.
    """
    return 1.0 if harness.real_time else 0.05


async def _anext(iterator: AsyncIterator[Delivery]) -> Delivery:
    return await iterator.__anext__()


async def next_delivery(
    iterator: AsyncIterator[Delivery], within: float = ARRIVAL_TIMEOUT
) -> Delivery:
    try:
        return await asyncio.wait_for(_anext(iterator), within)
    except TimeoutError:
        pytest.fail(f"no delivery within {within} s")


async def expect_nothing(iterator: AsyncIterator[Delivery], within: float) -> None:
    try:
        delivery = await asyncio.wait_for(_anext(iterator), within)
    except TimeoutError:
        return
    pytest.fail(f"unexpected delivery on {delivery.queue}: {delivery.body!r}")


async def stats_eventually(
    broker: Broker, queue: str, within: float = ARRIVAL_TIMEOUT, **expected: int
) -> QueueStats:
    """Poll ``stats`` until the named counters match; a real broker's figures lag."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        [stats] = await broker.stats([queue])
        if all(getattr(stats, name) == value for name, value in expected.items()):
            return stats
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"{stats} never matched {expected}")
        await asyncio.sleep(0.05)


async def dead_letters_eventually(
    broker: Broker, queue: str, count: int, within: float = ARRIVAL_TIMEOUT
) -> list[DeadLetter]:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        dead = await broker.dead_letters([queue])
        if len(dead) == count:
            return dead
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"expected {count} dead letters on {queue}, have {dead}")
        await asyncio.sleep(0.05)


async def let_consumers_settle() -> None:
    """A few loop turns, so a consumer task reaches its wait before the test acts."""
    for _ in range(5):
        await asyncio.sleep(0)


# -- delivery and timing ------------------------------------------------------


async def test_ping_succeeds_on_a_connected_broker(broker: Broker) -> None:
    await broker.ping()


async def test_publish_without_delay_is_delivered(
    broker: Broker, broker_harness: BrokerHarness
) -> None:
    queue = broker_harness.unique_queue("now")
    await broker.publish(queue, b"hello")

    async with broker.consume([queue], prefetch=10) as deliveries:
        delivery = await next_delivery(deliveries)
        assert (delivery.queue, delivery.body, delivery.redelivered) == (queue, b"hello", False)
        await broker.ack(delivery)
        await expect_nothing(deliveries, quiet_period(broker_harness))


async def test_delayed_message_is_not_delivered_before_its_delay(
    broker: Broker, broker_harness: BrokerHarness
) -> None:
    queue = broker_harness.unique_queue("delayed")
    published_at = broker_harness.clock.now()
    await broker.publish(queue, b"later", delay_seconds=2)

    async with broker.consume([queue], prefetch=10) as deliveries:
        if not broker_harness.real_time:
            await broker_harness.advance(1.9)
            await expect_nothing(deliveries, quiet_period(broker_harness))
            await broker_harness.advance(0.2)
        delivery = await next_delivery(deliveries)
        # On a real broker this is the check: a broker that ignores the delay
        # (ActiveMQ without schedulerSupport) delivers at once.
        assert broker_harness.clock.now() - published_at >= timedelta(seconds=2) - SCHEDULER_SLACK
        assert delivery.body == b"later"
        await broker.ack(delivery)


async def test_messages_in_one_queue_arrive_in_due_order(
    broker: Broker, broker_harness: BrokerHarness
) -> None:
    queue = broker_harness.unique_queue("order")
    await broker.publish(queue, b"second", delay_seconds=2)
    await broker.publish(queue, b"first", delay_seconds=1)

    async with broker.consume([queue], prefetch=10) as deliveries:
        await broker_harness.advance(3)
        got = [await next_delivery(deliveries) for _ in range(2)]
        assert [d.body for d in got] == [b"first", b"second"]
        for delivery in got:
            await broker.ack(delivery)


async def test_a_new_due_message_wakes_a_consumer_waiting_for_a_later_one(
    broker: Broker, broker_harness: BrokerHarness
) -> None:
    queue = broker_harness.unique_queue("wake")
    await broker.publish(queue, b"in a minute", delay_seconds=60)

    async with broker.consume([queue], prefetch=10) as deliveries:
        waiting = asyncio.create_task(next_delivery(deliveries))
        await let_consumers_settle()
        assert not waiting.done()
        # Time does not move: only the publish itself may wake the consumer.
        await broker.publish(queue, b"now")
        delivery = await waiting
        assert delivery.body == b"now"
        await broker.ack(delivery)


# -- acknowledgement and redelivery -------------------------------------------


async def test_acked_messages_never_come_back(
    broker: Broker, broker_harness: BrokerHarness
) -> None:
    queue = broker_harness.unique_queue("acked")
    for body in (b"a", b"b", b"c"):
        await broker.publish(queue, body)

    async with broker.consume([queue], prefetch=10) as deliveries:
        for _ in range(3):
            await broker.ack(await next_delivery(deliveries))

    async with broker.consume([queue], prefetch=10) as deliveries:
        # The marker proves this consumer receives; anything before it came back.
        await broker.publish(queue, b"marker")
        delivery = await next_delivery(deliveries)
        assert delivery.body == b"marker"
        await broker.ack(delivery)
        await expect_nothing(deliveries, quiet_period(broker_harness))


async def test_unacked_delivery_goes_to_the_next_consumer_marked_redelivered(
    broker: Broker, broker_harness: BrokerHarness
) -> None:
    queue = broker_harness.unique_queue("unacked")
    await broker.publish(queue, b"job")

    async with broker.consume([queue], prefetch=10) as deliveries:
        first = await next_delivery(deliveries)
        assert not first.redelivered
        # leave without acking

    async with broker.consume([queue], prefetch=10) as deliveries:
        again = await next_delivery(deliveries)
        assert (again.body, again.redelivered) == (b"job", True)
        await broker.ack(again)
        await expect_nothing(deliveries, quiet_period(broker_harness))


async def test_a_cancelled_consumer_returns_its_unacked_deliveries(
    broker: Broker, broker_harness: BrokerHarness
) -> None:
    queue = broker_harness.unique_queue("cancelled")
    await broker.publish(queue, b"job")
    received = asyncio.Event()

    async def crash_mid_work() -> None:
        async with broker.consume([queue], prefetch=10) as deliveries:
            await next_delivery(deliveries)
            received.set()
            await asyncio.Event().wait()  # stuck until cancelled

    task = asyncio.create_task(crash_mid_work())
    await asyncio.wait_for(received.wait(), ARRIVAL_TIMEOUT)
    task.cancel()
    with suppress(asyncio.CancelledError):
        await task

    async with broker.consume([queue], prefetch=10) as deliveries:
        again = await next_delivery(deliveries)
        assert (again.body, again.redelivered) == (b"job", True)
        await broker.ack(again)


async def redelivery_after(
    deliveries: AsyncIterator[Delivery], harness: BrokerHarness, nacks: int
) -> Delivery:
    """The delivery that comes back after the ``nacks``-th nack, no sooner than the policy says.

    On fake time the test moves the clock to just before the shortest delay the
    policy allows (nothing may arrive), then to the longest.
    """
    low, high = harness.redelivery.bounds(nacks)
    nacked_at = harness.clock.now()
    if not harness.real_time:
        await harness.advance(low * 0.999)
        await expect_nothing(deliveries, quiet_period(harness))
        await harness.advance(high - low * 0.999)
    delivery = await next_delivery(deliveries, within=high + ARRIVAL_TIMEOUT)
    assert harness.clock.now() - nacked_at >= timedelta(seconds=low) - SCHEDULER_SLACK
    return delivery


async def test_the_publishing_span_comes_with_the_delivery_and_its_redelivery(
    broker: Broker, broker_harness: BrokerHarness
) -> None:
    # The W3C traceparent in the headers (tepat/tracing.py): a nacked batch's copy keeps it.
    queue = broker_harness.unique_queue("headers")
    tracing.start([InMemorySpanExporter()], batch=False)
    try:
        with tracing.span("outbox publish"):
            traceparent = tracing.current_traceparent()
            await broker.publish(queue, b"traced")
    finally:
        tracing.stop()
    assert traceparent is not None

    async with broker.consume([queue], prefetch=10) as deliveries:
        delivery = await next_delivery(deliveries)
        assert delivery.headers["traceparent"] == traceparent
        await broker.nack(delivery, "transient")
        again = await redelivery_after(deliveries, broker_harness, nacks=1)
        assert (again.body, again.headers["traceparent"]) == (b"traced", traceparent)
        await broker.ack(again)


def age_slack(harness: BrokerHarness) -> timedelta:
    """How far the test's measure of a message's age may be from the broker's.

    On fake time both read one clock that stands still in between; on real time
    the broker reads it a moment after the test.
    """
    return SCHEDULER_SLACK if harness.real_time else timedelta(0)


async def test_consumer_crashes_do_not_count_toward_dead_lettering(
    broker: Broker, broker_harness: BrokerHarness
) -> None:
    queue = broker_harness.unique_queue("crashes")
    await broker.publish(queue, b"innocent")

    for _ in range(5):
        async with broker.consume([queue], prefetch=10) as deliveries:
            await next_delivery(deliveries)  # and "crash": leave without ack
        # a crash starts no retry age: crashing for longer than it dead-letters nothing
        await broker_harness.advance(broker_harness.redelivery.retry_age.total_seconds())

    async with broker.consume([queue], prefetch=10) as deliveries:
        delivery = await next_delivery(deliveries)
        assert (delivery.body, delivery.redelivered) == (b"innocent", True)
        # Had the crashes counted, this first real failure would dead-letter it.
        await broker.nack(delivery, "transient")
        again = await redelivery_after(deliveries, broker_harness, nacks=1)
        assert again.body == b"innocent"
        await broker.ack(again)
    assert await broker.dead_letters([queue]) == []


async def test_store_outage_of_minutes_dead_letters_nothing(
    broker: Broker, broker_harness: BrokerHarness
) -> None:
    # Defect 9 (issue 9): a nack came back after a fixed 1 s and the 4th one
    # dead-lettered, so a store outage of about 4 s sent every batch in flight to
    # the DLQ. Now the delays grow and only the retry age dead-letters: an outage
    # of 90 % of it (13.5 minutes with the production policy) only delays a batch.
    old_dead_lettering_nack = 4
    queue = broker_harness.unique_queue("outage")
    await broker.publish(queue, b"batch")

    nacks = 0
    async with broker.consume([queue], prefetch=10) as deliveries:
        delivery = await next_delivery(deliveries)
        outage_ends = broker_harness.clock.now() + broker_harness.redelivery.retry_age * 0.9
        while broker_harness.clock.now() < outage_ends:
            await broker.nack(delivery, "OperationalError: the store is unreachable")
            nacks += 1
            delivery = await redelivery_after(deliveries, broker_harness, nacks)
            assert (delivery.body, delivery.redelivered) == (b"batch", True)
        await broker.ack(delivery)  # the store is back
        await expect_nothing(deliveries, quiet_period(broker_harness))

    assert nacks > old_dead_lettering_nack
    assert await broker.dead_letters([queue]) == []
    await stats_eventually(broker, queue, ready=0, scheduled=0, in_flight=0, dead_letters=0)


async def nack_until_dead_lettered(
    broker: Broker, harness: BrokerHarness, deliveries: AsyncIterator[Delivery], delivery: Delivery
) -> int:
    """Nack ``delivery`` and each of its redeliveries (reason ``bad batch #<n>``) until
    the retry age dead-letters it; the number of nacks."""
    retry_age, slack = harness.redelivery.retry_age, age_slack(harness)
    nacks = 0
    first_failure = harness.clock.now()
    while True:
        age = harness.clock.now() - first_failure
        nacks += 1
        await broker.nack(delivery, f"bad batch #{nacks}")
        if age >= retry_age + slack:
            break  # dead-lettered
        if age >= retry_age - slack:
            # too close to the retry age to tell which side the broker saw
            try:
                again = await asyncio.wait_for(_anext(deliveries), ARRIVAL_TIMEOUT)
            except TimeoutError:
                break
        else:
            again = await redelivery_after(deliveries, harness, nacks)
        assert (again.body, again.redelivered) == (delivery.body, True)
        delivery = again
    await expect_nothing(deliveries, quiet_period(harness))
    return nacks


async def test_nack_past_the_retry_age_dead_letters_and_replay_delivers_once(
    broker: Broker, broker_harness: BrokerHarness
) -> None:
    queue = broker_harness.unique_queue("poison")
    await broker.publish(queue, b"poison")

    async with broker.consume([queue], prefetch=10) as deliveries:
        delivery = await next_delivery(deliveries)
        assert not delivery.redelivered
        nacks = await nack_until_dead_lettered(broker, broker_harness, deliveries, delivery)

    [dead] = await dead_letters_eventually(broker, queue, 1)
    assert (dead.queue, dead.body, dead.reason, dead.attempts) == (
        queue,
        b"poison",
        f"bad batch #{nacks}",
        nacks,
    )
    await stats_eventually(broker, queue, dead_letters=1, ready=0, scheduled=0, in_flight=0)

    assert not await broker.replay_dead_letter("no-such-dead-letter")
    assert await broker.replay_dead_letter(dead.id)
    async with broker.consume([queue], prefetch=10) as deliveries:
        replayed = await next_delivery(deliveries)
        assert replayed.body == b"poison"
        await broker.ack(replayed)
        await expect_nothing(deliveries, quiet_period(broker_harness))
    await dead_letters_eventually(broker, queue, 0)
    assert not await broker.replay_dead_letter(dead.id)


# -- flow control and competing consumers -------------------------------------


async def test_consumer_started_on_a_backlog_handles_every_message_once(
    broker: Broker, broker_harness: BrokerHarness
) -> None:
    # Defect 2 (issue 9): frames the broker dispatched while SUBSCRIBE awaited its
    # receipt were dropped yet stayed unacked on the connection, so a backlog of a
    # prefetch or more stalled the consumer until the sweeper re-drove the messages.
    queue = broker_harness.unique_queue("backlog")
    prefetch = 10
    expected = [f"m{i:02d}".encode() for i in range(3 * prefetch)]
    for body in expected:
        await broker.publish(queue, body)
    await stats_eventually(broker, queue, ready=len(expected), in_flight=0)

    seen: list[bytes] = []
    async with AsyncExitStack() as stack:
        # a busy loop lets the backlog's frames overtake the SUBSCRIBE receipt
        async with busy_event_loop():
            deliveries = await stack.enter_async_context(broker.consume([queue], prefetch=prefetch))
        for _ in expected:
            delivery = await next_delivery(deliveries)
            seen.append(delivery.body)
            await broker.ack(delivery)
        await expect_nothing(deliveries, quiet_period(broker_harness))

    assert sorted(seen) == expected
    await stats_eventually(broker, queue, ready=0, in_flight=0, dead_letters=0)


async def test_prefetch_bounds_unacked_deliveries(
    broker: Broker, broker_harness: BrokerHarness
) -> None:
    queue = broker_harness.unique_queue("prefetch")
    for i in range(5):
        await broker.publish(queue, f"m{i}".encode())

    async with broker.consume([queue], prefetch=2) as deliveries:
        first = await next_delivery(deliveries)
        second = await next_delivery(deliveries)
        await expect_nothing(deliveries, quiet_period(broker_harness))
        await stats_eventually(broker, queue, in_flight=2, ready=3)

        await broker.ack(first)
        third = await next_delivery(deliveries)
        await expect_nothing(deliveries, quiet_period(broker_harness))
        assert len({first.body, second.body, third.body}) == 3
        for delivery in (second, third):
            await broker.ack(delivery)


async def test_competing_consumers_each_get_a_message_once(
    broker: Broker, broker_harness: BrokerHarness
) -> None:
    queue = broker_harness.unique_queue("compete")
    total = 200
    seen: list[bytes] = []
    all_seen, too_many = asyncio.Event(), asyncio.Event()
    subscribed = [asyncio.Event(), asyncio.Event()]

    async def work(ready: asyncio.Event) -> None:
        async with broker.consume([queue], prefetch=10) as deliveries:
            ready.set()
            async for delivery in deliveries:
                seen.append(delivery.body)
                await broker.ack(delivery)
                if len(seen) >= total:
                    all_seen.set()
                if len(seen) > total:
                    too_many.set()

    workers = [asyncio.create_task(work(ready)) for ready in subscribed]
    try:
        for ready in subscribed:
            await asyncio.wait_for(ready.wait(), ARRIVAL_TIMEOUT)
        for i in range(total):
            await broker.publish(queue, f"m{i}".encode())
        try:
            await asyncio.wait_for(all_seen.wait(), 3 * ARRIVAL_TIMEOUT)
        except TimeoutError:
            failed = [w.exception() for w in workers if w.done()]
            pytest.fail(f"only {len(seen)} of {total} delivered; worker errors: {failed}")
        with suppress(TimeoutError):
            await asyncio.wait_for(too_many.wait(), quiet_period(broker_harness))
    finally:
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)

    duplicates = [body for body, n in Counter(seen).items() if n > 1]
    assert duplicates == []
    assert sorted(seen) == sorted(f"m{i}".encode() for i in range(total))


# -- observability --------------------------------------------------------------


async def test_stats_count_scheduled_ready_and_in_flight(
    broker: Broker, broker_harness: BrokerHarness
) -> None:
    queue = broker_harness.unique_queue("stats")
    unused = broker_harness.unique_queue("unused")
    assert await broker.stats([unused]) == [QueueStats(unused, 0, 0, 0, 0)]

    # Checked first, while "later" is still 3 s away even on real time.
    await broker.publish(queue, b"later", delay_seconds=3)
    await broker.publish(queue, b"a")
    await broker.publish(queue, b"b")
    await stats_eventually(broker, queue, ready=2, scheduled=1, in_flight=0, dead_letters=0)

    async with broker.consume([queue], prefetch=1) as deliveries:
        delivery = await next_delivery(deliveries)
        await stats_eventually(broker, queue, ready=1, scheduled=1, in_flight=1)
        await broker.ack(delivery)
    await stats_eventually(broker, queue, ready=1, scheduled=1, in_flight=0)

    await broker_harness.advance(3)
    await stats_eventually(broker, queue, ready=2, scheduled=0, in_flight=0)


# -- priority across queues -----------------------------------------------------

# Adapters that cannot order deliveries across queues, and why.
NO_CROSS_QUEUE_PRIORITY = {
    "activemq": "ActiveMQ dispatches each queue's subscription independently over the "
    "network, so which queue's due message reaches the client first is not guaranteed",
}


async def test_the_first_listed_queue_drains_first(
    broker: Broker, broker_harness: BrokerHarness
) -> None:
    if reason := NO_CROSS_QUEUE_PRIORITY.get(broker_harness.name):
        pytest.skip(reason)
    safety = broker_harness.unique_queue("safety")
    meal = broker_harness.unique_queue("meal")
    await broker.publish(meal, b"m1")
    await broker.publish(meal, b"m2")
    await broker.publish(safety, b"s1")
    await broker.publish(safety, b"s2")
    # Queue order beats due time: s3 is due after m3 yet comes first.
    await broker.publish(meal, b"m3", delay_seconds=1)
    await broker.publish(safety, b"s3", delay_seconds=2)

    async with broker.consume([safety, meal], prefetch=10) as deliveries:
        got = [await next_delivery(deliveries) for _ in range(4)]
        await broker_harness.advance(3)
        got += [await next_delivery(deliveries) for _ in range(2)]
        assert [d.body for d in got] == [b"s1", b"s2", b"m1", b"m2", b"s3", b"m3"]
        for delivery in got:
            await broker.ack(delivery)


# -- lifecycle ------------------------------------------------------------------


async def test_close_ends_consumers_and_returns_their_deliveries(
    broker: Broker, broker_harness: BrokerHarness
) -> None:
    queue = broker_harness.unique_queue("close")
    await broker.publish(queue, b"in flight")

    async with broker.consume([queue], prefetch=10) as deliveries:
        await next_delivery(deliveries)
        await broker.close()
        # A consumer loop must end on close, or shutdown would hang.
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(_anext(deliveries), ARRIVAL_TIMEOUT)

    await broker.connect()
    async with broker.consume([queue], prefetch=10) as deliveries:
        again = await next_delivery(deliveries)
        assert (again.body, again.redelivered) == (b"in flight", True)
        await broker.ack(again)
