"""The ActiveMQ adapter itself (its parts: the package's docstring): lifecycle, publishing,
consuming, ack and nack.

* ``publish``: a persistent ``SEND`` to ``/queue/<name>`` with
  ``AMQ_SCHEDULED_DELAY`` in milliseconds, awaited until the broker's
  ``RECEIPT`` (sent after the message is stored). Concurrent publishes
  pipeline on the one publishing connection. The delay is shortened by
  ``lead_seconds`` (``TEPAT_BROKER_LEAD_SECONDS``, 1 s): ActiveMQ's scheduler
  fires a few hundred milliseconds late, so a batch is published to arrive a
  little *before* its instant and the consumer holds it until the instant
  (``consumers/worker.py``; docs/ACTIVEMQ.md). A consumer never sends before
  the instant the batch carries, whatever the broker does.
* ``ack``: an ``ACK`` with a receipt, so a ``stats`` right after sees it.
* ``nack``: **not** a STOMP ``NACK``. Within one STOMP transaction on the
  consumer's connection the adapter sends a copy of the message back to its
  queue, due after the :class:`~tepat.ports.broker.RedeliveryPolicy` delay for
  its number of nacks (``AMQ_SCHEDULED_DELAY``), with ``tepat_nacks`` (nacks so
  far), ``tepat_first_failure_ms`` (when the first nack happened, on the
  adapter's clock) and ``tepat_reason``, and acks the original; a nack once the
  message has been failing for the policy's retry age sends the copy to
  ``DLQ.<queue>`` instead. Why not NACK and the broker's redelivery plugin
  (checked on this broker, 5.17.2):

  - a STOMP NACK carries no reason, and the DLQ copy gets no
    ``dlqDeliveryFailureCause``: the reason and attempt count would have to be
    kept somewhere else;
  - the plugin decides on the message's ``redeliveryCounter``, which ActiveMQ
    also raises when a consumer disconnects with the message unacked. A few
    consumer crashes (a bad deploy) would then dead-letter a good batch on its
    first real failure, which the port's contract forbids;
  - its delays and limit are per broker, not a retry age that outlasts a store
    outage of minutes.

  The copy has a new message id, so the consumer sees ``redelivered`` from
  ``tepat_nacks`` as well as from the broker's ``redelivered`` header. The
  redelivery plugin stays in the broker config for other clients' NACKs.

The clock is used for reconnect backoff and for the age of a failing message;
a real broker runs its delays on real time.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import structlog

from tepat import tracing
from tepat.adapters.stomp.admin import StompAdmin
from tepat.adapters.stomp.consumer import Consumer
from tepat.adapters.stomp.frames import (
    DLQ_PREFIX,
    H_FIRST_FAILURE,
    H_FIRST_ID,
    H_NACKS,
    H_QUEUE,
    H_REASON,
    MAX_REASON_CHARS,
    instant_header,
    instant_value,
    int_header,
)
from tepat.adapters.stomp.link import BrokerUnavailable, Link
from tepat.adapters.stomp.url import TlsFiles, check_name, parse_stomp_url
from tepat.clock import Clock, SystemClock
from tepat.ports.broker import BrokerClosed, DeadLetter, Delivery, QueueStats, RedeliveryPolicy

log = structlog.get_logger("tepat.broker.stomp")


class StompBroker:
    """The :class:`~tepat.ports.broker.Broker` port on ActiveMQ Classic 5.17 over STOMP.

    ``url`` and ``tls``: :func:`.url.parse_stomp_url` (by default the system's CAs, the
    broker's certificate and host name verified). ``publish`` retries on a broken
    connection for up to ``publish_retry_seconds`` before raising :class:`BrokerUnavailable`.
    """

    def __init__(
        self,
        url: str,
        *,
        clock: Clock | None = None,
        heartbeat_ms: int = 10_000,
        request_timeout: float = 10.0,
        publish_retry_seconds: float = 30.0,
        max_backoff_seconds: float = 10.0,
        redelivery: RedeliveryPolicy | None = None,
        tls: TlsFiles | None = None,
        lead_seconds: float = 0.0,
    ) -> None:
        self.target = parse_stomp_url(url, tls)
        self.lead_seconds = lead_seconds
        self.clock: Clock = clock or SystemClock()
        self.heartbeat_ms = heartbeat_ms
        self.request_timeout = request_timeout
        self._publish_retry_seconds = publish_retry_seconds
        self._max_backoff = max_backoff_seconds
        self._redelivery = redelivery or RedeliveryPolicy()
        self._publisher: Link | None = None
        self._publisher_lock = asyncio.Lock()
        self._consumers: set[Consumer] = set()
        self.in_flight: dict[str, tuple[Consumer, Link]] = {}
        self._closed = True
        self._admin = StompAdmin(self)

    def backoff(self, attempt: int) -> float:
        """Exponential backoff with jitter: 0.1 s, 0.2 s, 0.4 s ... capped at ``max_backoff``."""
        base: float = min(self._max_backoff, 0.1 * 2 ** min(attempt - 1, 16))
        return base * random.uniform(0.75, 1.25)

    # -- lifecycle ---------------------------------------------------------

    async def connect(self) -> None:
        self._closed = False
        await self._publishing_link()

    async def close(self) -> None:
        """Stop every consumer (their unacked messages are redelivered), then disconnect."""
        self._closed = True
        await asyncio.gather(*(c.stop() for c in list(self._consumers)), return_exceptions=True)
        self._consumers.clear()
        link, self._publisher = self._publisher, None
        if link is not None:
            await link.close()

    async def ping(self) -> None:
        """A round trip to the broker (BEGIN/ABORT of an empty transaction, with receipt)."""
        link = await self._publishing_link()
        tx = f"ping-{uuid.uuid4().hex}"
        await link.request("begin", tx)
        await link.send_frame("abort", tx)

    # -- producing ---------------------------------------------------------

    async def publish(self, queue: str, body: bytes, delay_seconds: float = 0.0) -> None:
        # The span publishing it (the outbox's) goes on in the consumer that takes it.
        headers = {**tracing.headers(), "persistent": "true"}
        delay_ms = round((delay_seconds - self.lead_seconds) * 1000)
        if delay_ms > 0:
            headers["AMQ_SCHEDULED_DELAY"] = str(delay_ms)
        await self._send(f"/queue/{check_name(queue)}", bytes(body), headers)

    async def _send(self, destination: str, body: bytes, headers: dict[str, str]) -> None:
        """Send with receipt; on a broken connection reconnect and resend until the deadline.

        A resend after a lost receipt may duplicate the message: delivery is at
        least once anyway, and the store's claim makes a repeat harmless.
        """
        deadline = time.monotonic() + self._publish_retry_seconds
        attempt = 0
        while True:
            attempt += 1
            try:
                link = await self._publishing_link()
                await link.request("send", destination, body, headers=headers)
                return
            except BrokerUnavailable as e:
                if self._closed or time.monotonic() >= deadline:
                    raise
                delay = self.backoff(attempt)
                log.warning(
                    "stomp publish retry", attempt=attempt, retry_in=round(delay, 2), error=str(e)
                )
                await self.clock.sleep(delay)

    async def _publishing_link(self) -> Link:
        if self._closed:
            raise BrokerClosed("the STOMP broker adapter is closed")
        if self._publisher is not None and self._publisher.connected:
            return self._publisher
        async with self._publisher_lock:
            if self._publisher is not None and self._publisher.connected:
                return self._publisher
            old, self._publisher = self._publisher, None
            if old is not None:
                await old.close()
            self._publisher = await self.open_link("publish")
            return self._publisher

    async def open_link(
        self,
        name: str,
        on_frame: Callable[[Link, Any], None] | None = None,
        on_lost: Callable[[Link], None] | None = None,
    ) -> Link:
        """A new connection to the broker, for publishing, a consumer or the admin."""
        link = Link(
            self.target,
            name,
            heartbeat_ms=self.heartbeat_ms,
            timeout=self.request_timeout,
            on_frame=on_frame,
            on_lost=on_lost,
        )
        await link.open()
        return link

    # -- consuming ---------------------------------------------------------

    @asynccontextmanager
    async def consume(
        self, queues: Sequence[str], prefetch: int
    ) -> AsyncIterator[AsyncIterator[Delivery]]:
        if self._closed:
            raise BrokerClosed("the STOMP broker adapter is closed")
        if not queues:
            raise ValueError("consume needs at least one queue")
        if prefetch < 1:
            raise ValueError("prefetch must be >= 1")
        consumer = Consumer(self, tuple(check_name(q) for q in queues), prefetch)
        await consumer.start()
        self._consumers.add(consumer)
        try:
            yield consumer
        finally:
            self._consumers.discard(consumer)
            await asyncio.shield(consumer.stop())

    def _live(self, delivery: Delivery) -> Link | None:
        entry = self.in_flight.pop(delivery.delivery_id, None)
        if entry is None:
            return None
        consumer, link = entry
        if consumer.closed or consumer.link is not link or not link.connected:
            log.info(
                "ack/nack for a delivery whose connection is gone: it will be redelivered",
                queue=delivery.queue,
                delivery_id=delivery.delivery_id,
            )
            return None
        return link

    async def ack(self, delivery: Delivery) -> None:
        link = self._live(delivery)
        if link is None:
            return
        try:
            await link.request("ack", delivery.delivery_id)
        except BrokerUnavailable as e:
            log.warning(
                "ack lost: the message will be redelivered", queue=delivery.queue, error=str(e)
            )

    async def nack(self, delivery: Delivery, reason: str) -> None:
        # One transaction: never lost nor doubled by a crash in between (the module's docstring).
        link = self._live(delivery)
        if link is None:
            return
        now = self.clock.now()
        nacks = int_header(delivery.headers.get(H_NACKS)) + 1
        first_failure = instant_header(delivery.headers.get(H_FIRST_FAILURE)) or now
        headers = {
            "persistent": "true",
            H_NACKS: str(nacks),
            H_FIRST_FAILURE: instant_value(first_failure),
            H_REASON: reason[:MAX_REASON_CHARS],
            H_QUEUE: delivery.queue,
            H_FIRST_ID: delivery.headers.get(H_FIRST_ID) or delivery.headers.get("message-id", ""),
        }
        if tracing.HEADER in delivery.headers:  # the copy stays in its batch's trace
            headers[tracing.HEADER] = delivery.headers[tracing.HEADER]
        if self._redelivery.dead(first_failure, now):
            destination = f"/queue/{DLQ_PREFIX}{delivery.queue}"
        else:
            destination = f"/queue/{delivery.queue}"
            delay_ms = round(self._redelivery.delay(nacks) * 1000)
            if delay_ms > 0:
                headers["AMQ_SCHEDULED_DELAY"] = str(delay_ms)
        tx = f"nack-{uuid.uuid4().hex}"
        try:
            await link.send_frame("begin", tx)
            await link.send_frame(
                "send", destination, delivery.body, headers=headers, transaction=tx
            )
            await link.send_frame("ack", delivery.delivery_id, transaction=tx)
            await link.request("commit", tx)
        except BrokerUnavailable as e:
            # the transaction dies with the connection: the original comes back
            log.warning(
                "nack lost: the message will be redelivered", queue=delivery.queue, error=str(e)
            )

    # -- operations --------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    async def stats(self, queues: Sequence[str]) -> list[QueueStats]:
        return await self._admin.stats(queues)

    async def dead_letters(self, queues: Sequence[str]) -> list[DeadLetter]:
        return await self._admin.dead_letters(queues)

    async def replay_dead_letter(self, dead_letter_id: str, *, queue_prefix: str = "") -> bool:
        return await self._admin.replay_dead_letter(dead_letter_id, queue_prefix)
