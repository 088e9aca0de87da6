"""The consumer loop: take batches off every category queue and hand them to the dispatcher."""

from __future__ import annotations

import asyncio

import structlog

from tepat.domain.batches import BadBatch, decode_batch
from tepat.ports.broker import Delivery
from tepat.runtime import Runtime
from tepat.services.loops import wait_or_stop

log = structlog.get_logger("tepat.consumer")


async def handle_delivery(rt: Runtime, delivery: Delivery) -> None:
    """Dispatch one broker delivery, then ack it; a failure hands it back (nack)."""
    try:
        batch = decode_batch(delivery.queue, delivery.body)
    except BadBatch as e:
        log.error("unreadable broker message", queue=delivery.queue, error=str(e))
        await rt.broker.nack(delivery, str(e))
        return
    try:
        await rt.dispatcher.handle(batch)
    except Exception as e:  # the store or provider client failed unexpectedly
        log.exception("batch failed; handing it back", queue=delivery.queue)
        await rt.broker.nack(delivery, f"{type(e).__name__}: {e}")
        return
    await rt.broker.ack(delivery)


async def run_consumer(rt: Runtime, stop: asyncio.Event, concurrency: int = 8) -> None:
    """Consume until ``stop`` is set, then finish the batches in hand (drain) and return."""
    queues = rt.categories.queues()  # highest priority first
    slots = asyncio.Semaphore(concurrency)
    in_flight: set[asyncio.Task[None]] = set()

    async def run(delivery: Delivery) -> None:
        try:
            await handle_delivery(rt, delivery)
        finally:
            slots.release()

    async with rt.broker.consume(queues, prefetch=rt.settings.consumer_prefetch) as deliveries:
        iterator = deliveries.__aiter__()
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                await slots.acquire()
                nxt = asyncio.ensure_future(iterator.__anext__())
                done, _ = await asyncio.wait({nxt, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if nxt not in done:
                    nxt.cancel()
                    slots.release()
                    break
                try:
                    delivery = nxt.result()
                except StopAsyncIteration:
                    slots.release()
                    break
                task = asyncio.create_task(run(delivery))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
        except asyncio.CancelledError:
            # A hard stop (not a drain): abandon the batches in hand. Their claimed
            # messages stay `sending` until the sweeper's lease re-drives them.
            for task in in_flight:
                task.cancel()
            raise
        finally:
            stopping.cancel()
            if in_flight:
                log.info("draining", batches=len(in_flight))
                await asyncio.gather(*in_flight, return_exceptions=True)


async def run_receipt_poller(rt: Runtime, stop: asyncio.Event) -> None:
    interval = rt.settings.receipt_poll_interval_seconds
    while not stop.is_set():
        try:
            await rt.receipts.poll_all()
        except Exception:
            log.exception("receipt poll failed")
        await wait_or_stop(rt.clock, stop, interval)
