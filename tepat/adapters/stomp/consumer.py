"""One ``consume()`` context: its subscription, reconnects and the iteration over deliveries.

One STOMP connection per context, one subscription to the composite
destination ``/queue/a,/queue/b`` with ``ack: client-individual`` and
``activemq.prefetchSize = prefetch``, so the broker never has more than
``prefetch`` unacked messages out to it. Leaving the context disconnects that
connection and the broker redelivers whatever was not acked (``redelivered:
true``).

Connection loss: a consumer reconnects with exponential backoff and
resubscribes. Deliveries from the lost connection are void (the broker
redelivers them): acking one is a logged no-op, and those still buffered are
dropped before the caller sees them. So each frame is tagged with the
connection that received it, and a new connection becomes the consumer's
before its SUBSCRIBE goes out: a backlog the broker dispatches ahead of the
SUBSCRIBE receipt is this connection's to hand out and ack. (Tagging frames
with the consumer's link of the moment dropped up to a prefetch of them at
every start or resubscribe; left unacked on the live connection, they stalled
the consumer.)
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from tepat.adapters.stomp.admin import LinkSource
from tepat.adapters.stomp.frames import H_NACKS, int_header
from tepat.adapters.stomp.link import BrokerUnavailable, Link
from tepat.clock import Clock
from tepat.ports.broker import Delivery

log = structlog.get_logger("tepat.broker.stomp")


class ConsumerBroker(LinkSource, Protocol):
    """What a consumer uses of its :class:`~tepat.adapters.stomp.broker.StompBroker`."""

    @property
    def clock(self) -> Clock: ...

    @property
    def in_flight(self) -> dict[str, tuple[Consumer, Link]]: ...

    def backoff(self, attempt: int) -> float: ...


@dataclass(eq=False)
class Consumer:
    broker: ConsumerBroker
    queues: tuple[str, ...]
    prefetch: int
    link: Link | None = None
    closed: bool = False
    buffer: asyncio.Queue[tuple[int, Delivery] | None] = field(default_factory=asyncio.Queue)
    reconnecting: asyncio.Task[None] | None = None

    @property
    def destination(self) -> str:
        return ",".join(f"/queue/{q}" for q in self.queues)

    async def start(self) -> None:
        try:
            await self._subscribe()
        except BaseException:
            # a connection lost mid-subscribe must not leave a reconnect loop behind
            await self.stop()
            raise

    async def _subscribe(self) -> Link:
        """Connect and subscribe; the new connection is ``self.link`` from before SUBSCRIBE.

        The broker dispatches a waiting backlog (up to a prefetch) as soon as it
        has the subscription, and those frames may reach the loop before the
        SUBSCRIBE receipt does: they must already count as this consumer's.
        """
        self.link = link = await self.broker.open_link("consume", self._on_frame, self._on_lost)
        try:
            await link.request(
                "subscribe",
                self.destination,
                id="tepat",
                ack="client-individual",
                headers={"activemq.prefetchSize": str(self.prefetch)},
            )
        except BaseException:
            await link.close()
            raise
        return link

    def _on_frame(self, link: Link, frame: Any) -> None:
        """``link`` is the connection that received the frame: only it can ack the message."""
        if self.closed:
            return
        headers = {str(k): str(v) for k, v in frame.headers.items()}
        ack_id = headers.get("ack") or headers.get("message-id", "")
        queue = headers.get("destination", "").removeprefix("/queue/")
        body = frame.body if isinstance(frame.body, bytes) else str(frame.body).encode()
        again = headers.get("redelivered") == "true" or int_header(headers.get(H_NACKS)) > 0
        delivery = Delivery(queue, body, ack_id, again, headers)
        self.broker.in_flight[ack_id] = (self, link)
        self.buffer.put_nowait((link.id, delivery))

    def _on_lost(self, link: Link) -> None:
        if self.closed or link is not self.link or self.reconnecting is not None:
            return
        self.reconnecting = asyncio.get_running_loop().create_task(self._reconnect(link))

    async def _reconnect(self, lost: Link) -> None:
        attempt = 0
        try:
            await lost.close()
            while not self.closed:
                attempt += 1
                try:
                    link = await self._subscribe()
                except BrokerUnavailable as e:
                    delay = self.broker.backoff(attempt)
                    log.warning(
                        "stomp consumer reconnect failed",
                        queues=self.queues,
                        attempt=attempt,
                        retry_in=round(delay, 2),
                        error=str(e),
                    )
                    await self.broker.clock.sleep(delay)
                    continue
                if self.closed:
                    await link.close()
                    return
                log.info("stomp consumer resubscribed", queues=self.queues, attempts=attempt)
                return
        finally:
            self.reconnecting = None

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Delivery:
        while True:
            item = await self.buffer.get()
            if item is None or self.closed:
                self.buffer.put_nowait(None)  # wake any other waiter too
                raise StopAsyncIteration
            link_id, delivery = item
            if self.link is not None and link_id == self.link.id:
                return delivery
            # from a connection that was lost: the broker redelivers it
            self.broker.in_flight.pop(delivery.delivery_id, None)

    async def stop(self) -> None:
        if self.closed:
            return
        self.closed = True
        task, self.reconnecting = self.reconnecting, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.link is not None:
            await self.link.close()
        for ack_id, (consumer, _) in list(self.broker.in_flight.items()):
            if consumer is self:
                del self.broker.in_flight[ack_id]
        self.buffer.put_nowait(None)
