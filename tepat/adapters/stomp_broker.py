"""ActiveMQ Classic over STOMP 1.2 (stomp.py): the production :class:`~tepat.ports.broker.Broker`.

The broker instance this expects is ``deploy/activemq/conf/activemq.xml``
(started by ``scripts/activemq.sh``): ``schedulerSupport="true"`` (otherwise
``AMQ_SCHEDULED_DELAY`` is silently ignored), the redelivery plugin with an
individual dead-letter queue ``DLQ.<queue>``, and the statistics plugin.

How each part of the port maps onto ActiveMQ:

* ``publish``: a persistent ``SEND`` to ``/queue/<name>`` with
  ``AMQ_SCHEDULED_DELAY`` in milliseconds, awaited until the broker's
  ``RECEIPT`` (sent after the message is stored). Concurrent publishes
  pipeline on the one publishing connection.
* ``consume``: one STOMP connection per ``consume()`` context, one subscription
  to the composite destination ``/queue/a,/queue/b`` with
  ``ack: client-individual`` and ``activemq.prefetchSize = prefetch``, so the
  broker never has more than ``prefetch`` unacked messages out to it. Leaving
  the context disconnects that connection and the broker redelivers whatever
  was not acked (``redelivered: true``).
* Threads: stomp.py calls listeners on its receiver thread. The listener only
  hands the frame to the event loop (``call_soon_threadsafe``); every frame we
  *send* (ACK, NACK, SEND, SUBSCRIBE ...) goes through the connection's own
  single worker thread. Sending ACKs from the receiver thread deadlocked client
  and broker under a large backlog (``SCALE.md``); blocking socket writes on the
  event loop would stall everything else.
* Connection loss: heartbeats detect a dead peer; a consumer reconnects with
  exponential backoff and resubscribes. Deliveries from the lost connection are
  void (the broker redelivers them): acking one is a logged no-op, and those
  still buffered are dropped before the caller sees them.
* ``nack``: **not** a STOMP ``NACK``. Within one STOMP transaction on the
  consumer's connection the adapter sends a copy of the message back to its
  queue (due in ``redelivery_delay_seconds``) with ``tepat_nacks`` (nacks so
  far) and ``tepat_reason``, and acks the original; the nack after
  ``max_redeliveries`` sends the copy to ``DLQ.<queue>`` instead. Why not NACK
  and the broker's redelivery plugin (checked on this broker, 5.17.2):

  - a STOMP NACK carries no reason, and the DLQ copy gets no
    ``dlqDeliveryFailureCause``: the reason and attempt count would have to be
    kept somewhere else;
  - the plugin decides on the message's ``redeliveryCounter``, which ActiveMQ
    also raises when a consumer disconnects with the message unacked. A few
    consumer crashes (a bad deploy) would then dead-letter a good batch on its
    first real failure, which the port's contract forbids.

  The copy has a new message id, so the consumer sees ``redelivered`` from
  ``tepat_nacks`` as well as from the broker's ``redelivered`` header. The
  redelivery plugin stays in the broker config for other clients' NACKs.
* ``stats``: the statistics plugin (``ActiveMQ.Statistics.Destination.<q>``,
  reply as a ``jms-map-xml`` map on a temp queue) for ``size`` and
  ``inflightCount`` of the queue and of ``DLQ.<q>``; the scheduler's
  ``BROWSE`` action for not-yet-due messages. BROWSE sends back every
  scheduled job of the whole broker, bodies included, so one ``stats`` call
  costs about 1.3-2 s with 9-12k scheduled batches on a 2-core machine: poll it
  every few seconds at most. Batching (``tepat.domain.batches``) keeps the job
  count 100 times smaller than the notification count.
* ``ack``: an ``ACK`` with a receipt, so a ``stats`` right after sees it.
* ``dead_letters``: a STOMP queue browser (``browser: true``) on ``DLQ.<q>``:
  it never takes a message off the queue. ``DeadLetter.id`` is the JMS message id.
* ``replay_dead_letter``: found by a browser on ``DLQ.>`` selecting the JMS
  message id; then within one STOMP transaction send a fresh copy to
  the original queue and ack the DLQ message: the move is atomic.

The clock is used for reconnect backoff only; a real broker runs on real time.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from itertools import count
from typing import Any
from urllib.parse import unquote, urlsplit

import stomp
import structlog
from stomp.exception import StompException

from tepat.clock import Clock, SystemClock
from tepat.ports.broker import DeadLetter, Delivery, QueueStats

log = structlog.get_logger("tepat.broker.stomp")

DLQ_PREFIX = "DLQ."
# headers the adapter puts on a nacked message's copy
H_NACKS = "tepat_nacks"
H_REASON = "tepat_reason"
H_QUEUE = "tepat_queue"
H_FIRST_ID = "tepat_first_message_id"
_STATS_PREFIX = "/queue/ActiveMQ.Statistics.Destination."
_STATS_END = "ActiveMQ.Statistics.Destination.List.End.With.Null"
_SCHEDULER = "/topic/ActiveMQ.Scheduler.Management"
_FORBIDDEN_IN_NAMES = frozenset(",/*> \t\r\n'\"")
_MAX_REASON_CHARS = 2000
_link_ids = count(1)


class BrokerUnavailable(ConnectionError):
    """ActiveMQ could not be reached, or the connection broke mid-request."""


class BrokerClosed(ConnectionError):
    """The adapter was closed; call ``connect()`` again to use it."""


@dataclass(frozen=True, slots=True)
class StompTarget:
    host: str
    port: int
    user: str | None = None
    password: str | None = None


def parse_stomp_url(url: str) -> StompTarget:
    """``stomp://[user:pass@]host[:61613]`` -> :class:`StompTarget`; ``ValueError`` if bad."""
    parts = urlsplit(url)
    if parts.scheme != "stomp":
        raise ValueError(f"not a stomp:// URL: {url!r}")
    if not parts.hostname:
        raise ValueError(f"no host in broker URL {url!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"unexpected path or query in broker URL {url!r}")
    try:
        port = parts.port or 61613
    except ValueError:
        raise ValueError(f"bad port in broker URL {url!r}") from None
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return StompTarget(parts.hostname, port, user, password)


def _check_name(queue: str) -> str:
    if not queue or _FORBIDDEN_IN_NAMES.intersection(queue):
        raise ValueError(f"invalid queue name {queue!r}")
    return queue


def _selector_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _text(body: bytes | str) -> str:
    return body.decode("utf-8", "replace") if isinstance(body, bytes) else body


def _parse_map(body: bytes | str) -> dict[str, str]:
    """A ``jms-map-xml`` body (``<map><entry><string>k</string><long>v</long></entry>...``)."""
    text = _text(body).strip()
    if not text:
        return {}
    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        return {}
    result: dict[str, str] = {}
    for entry in root.findall("entry"):
        children = list(entry)
        if len(children) == 2 and children[0].text is not None:
            result[children[0].text] = children[1].text or ""
    return result


def _origin(headers: dict[str, str]) -> str:
    """The queue a dead letter belongs to, as a STOMP destination."""
    if headers.get(H_QUEUE):
        return f"/queue/{headers[H_QUEUE]}"
    original = headers.get("original-destination", "")
    if original.startswith("/queue/"):
        return original
    return "/queue/" + headers.get("destination", "").removeprefix(f"/queue/{DLQ_PREFIX}")


def _int(value: str | None) -> int:
    try:
        return int(float(value)) if value is not None else 0
    except ValueError:
        return 0


# --------------------------------------------------------------------------
# one STOMP connection
# --------------------------------------------------------------------------


class _Listener(stomp.ConnectionListener):  # type: ignore[misc]
    """Runs on stomp.py's receiver thread: forwards to the loop, never sends."""

    def __init__(self, link: _Link) -> None:
        self._link = link

    def on_message(self, frame: Any) -> None:
        self._link.from_thread(self._link.on_frame, frame)

    def on_receipt(self, frame: Any) -> None:
        self._link.from_thread(self._link.on_receipt, frame.headers.get("receipt-id", ""))

    def on_error(self, frame: Any) -> None:
        self._link.from_thread(self._link.on_error, dict(frame.headers), _text(frame.body))

    def on_disconnected(self) -> None:
        self._link.from_thread(self._link.on_disconnected)

    def on_heartbeat_timeout(self) -> None:
        self._link.from_thread(log.warning, "stomp heartbeat timeout", link=self._link.name)


class _Link:
    """One STOMP connection: its receiver thread, and one worker thread that writes to it.

    All methods except :meth:`from_thread` run on the event loop.
    """

    def __init__(
        self,
        target: StompTarget,
        name: str,
        *,
        heartbeat_ms: int,
        timeout: float,
        on_frame: Callable[[Any], None] | None = None,
        on_lost: Callable[[_Link], None] | None = None,
    ) -> None:
        self.id = next(_link_ids)
        self.name = f"{name}#{self.id}"
        self._target = target
        self._heartbeat_ms = heartbeat_ms
        self.timeout = timeout
        self._frame_handler = on_frame
        self._lost_handler = on_lost
        self._loop = asyncio.get_running_loop()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"stomp-{name}")
        self._receipts: dict[str, asyncio.Future[None]] = {}
        self.conn: Any = None
        self.connected = False
        self._closing = False

    # -- called on the receiver thread ----------------------------------------

    def from_thread(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        # a closed loop raises RuntimeError: nobody is listening any more
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(partial(fn, *args, **kwargs))

    # -- loop side ------------------------------------------------------------

    async def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await self._loop.run_in_executor(self._executor, partial(fn, *args, **kwargs))

    async def open(self) -> None:
        t = self._target
        conn = stomp.Connection12(
            [(t.host, t.port)],
            heartbeats=(self._heartbeat_ms, self._heartbeat_ms),
            # ActiveMQ skips a heart-beat when it wrote anything during the last
            # interval, so its silences last up to two intervals (measured: the
            # first beat 20 s after CONNECTED at 10 s): stomp.py's default
            # tolerance of 1.5 intervals dropped idle connections
            heart_beat_receive_scale=2.5,
            auto_decode=False,
            reconnect_attempts_max=1,
            timeout=self.timeout,
            prefer_localhost=False,
            try_loopback_connect=False,
        )
        conn.set_listener("tepat", _Listener(self))
        self.conn = conn
        try:
            await asyncio.wait_for(
                self._run(
                    conn.connect,
                    t.user,
                    t.password,
                    wait=True,
                    headers={"client-id": f"tepat-{self.name}-{uuid.uuid4().hex[:8]}"},
                ),
                self.timeout,
            )
        except (StompException, OSError, TimeoutError) as e:
            self._executor.submit(_quiet_disconnect, conn)
            self._executor.shutdown(wait=False)
            raise BrokerUnavailable(
                f"cannot connect to ActiveMQ at {t.host}:{t.port}: {type(e).__name__} {e}"
            ) from e
        self.connected = True

    async def request(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Send one frame from the worker thread and wait for the broker's RECEIPT."""
        if not self.connected:
            raise BrokerUnavailable(f"stomp connection {self.name} is down")
        receipt = uuid.uuid4().hex
        fut: asyncio.Future[None] = self._loop.create_future()
        self._receipts[receipt] = fut
        try:
            try:
                await self._run(getattr(self.conn, method), *args, receipt=receipt, **kwargs)
            except (StompException, OSError) as e:
                raise BrokerUnavailable(f"{method} failed on {self.name}: {e}") from e
            try:
                await asyncio.wait_for(fut, self.timeout)
            except TimeoutError:
                raise BrokerUnavailable(f"no receipt for {method} on {self.name}") from None
        finally:
            self._receipts.pop(receipt, None)

    async def send_frame(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Send one frame from the worker thread without waiting for a receipt."""
        if not self.connected:
            raise BrokerUnavailable(f"stomp connection {self.name} is down")
        try:
            await self._run(getattr(self.conn, method), *args, **kwargs)
        except (StompException, OSError) as e:
            raise BrokerUnavailable(f"{method} failed on {self.name}: {e}") from e

    async def close(self) -> None:
        """Disconnect (the broker then redelivers this connection's unacked messages)."""
        if self._closing:
            return
        self._closing = True
        was_connected, self.connected = self.connected, False
        if self.conn is not None and was_connected:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    self._run(self.conn.disconnect, receipt=uuid.uuid4().hex), self.timeout
                )
        if self.conn is not None:
            # the transport's threads must stop even if DISCONNECT got no answer
            self._executor.submit(_quiet_disconnect, self.conn)
        self._executor.shutdown(wait=False)
        self._fail_receipts("stomp connection closed")

    def on_frame(self, frame: Any) -> None:
        if self._frame_handler is not None and not self._closing:
            self._frame_handler(frame)

    def on_receipt(self, receipt: str) -> None:
        fut = self._receipts.get(receipt)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def on_error(self, headers: dict[str, str], body: str) -> None:
        message = headers.get("message", "") + (f": {body.strip()}" if body.strip() else "")
        receipt = headers.get("receipt-id")
        fut = self._receipts.get(receipt) if receipt else None
        if fut is not None and not fut.done():
            fut.set_exception(BrokerUnavailable(f"ActiveMQ error: {message}"))
        else:
            log.warning("stomp error frame", link=self.name, error=message)

    def on_disconnected(self) -> None:
        if self._closing or not self.connected:  # ours, or a connect that failed
            return
        self.connected = False
        self._fail_receipts("stomp connection lost")
        log.warning("stomp connection lost", link=self.name)
        if self._lost_handler is not None:
            self._lost_handler(self)

    def _fail_receipts(self, why: str) -> None:
        for fut in self._receipts.values():
            if not fut.done():
                fut.set_exception(BrokerUnavailable(why))


def _quiet_disconnect(conn: Any) -> None:
    with contextlib.suppress(Exception):
        conn.transport.disconnect_socket()


# --------------------------------------------------------------------------
# one consume() context
# --------------------------------------------------------------------------


@dataclass(eq=False)
class _Consumer:
    broker: StompBroker
    queues: tuple[str, ...]
    prefetch: int
    link: _Link | None = None
    closed: bool = False
    buffer: asyncio.Queue[tuple[int, Delivery] | None] = field(default_factory=asyncio.Queue)
    reconnecting: asyncio.Task[None] | None = None

    @property
    def destination(self) -> str:
        return ",".join(f"/queue/{q}" for q in self.queues)

    async def start(self) -> None:
        self.link = await self._subscribe()

    async def _subscribe(self) -> _Link:
        broker = self.broker
        link = _Link(
            broker.target,
            "consume",
            heartbeat_ms=broker.heartbeat_ms,
            timeout=broker.request_timeout,
            on_frame=self._on_frame,
            on_lost=self._on_lost,
        )
        await link.open()
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

    def _on_frame(self, frame: Any) -> None:
        link = self.link
        if self.closed or link is None:
            return
        headers = {str(k): str(v) for k, v in frame.headers.items()}
        ack_id = headers.get("ack") or headers.get("message-id", "")
        destination = headers.get("destination", "")
        queue = destination.removeprefix("/queue/")
        body = frame.body if isinstance(frame.body, bytes) else str(frame.body).encode()
        delivery = Delivery(
            queue=queue,
            body=body,
            delivery_id=ack_id,
            redelivered=headers.get("redelivered") == "true" or _int(headers.get(H_NACKS)) > 0,
            headers=headers,
        )
        self.broker.in_flight[ack_id] = (self, link)
        self.buffer.put_nowait((link.id, delivery))

    def _on_lost(self, link: _Link) -> None:
        if self.closed or link is not self.link or self.reconnecting is not None:
            return
        self.reconnecting = asyncio.get_running_loop().create_task(self._reconnect(link))

    async def _reconnect(self, lost: _Link) -> None:
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
                self.link = link
                log.info("stomp consumer resubscribed", queues=self.queues, attempts=attempt)
                return
        finally:
            self.reconnecting = None

    def __aiter__(self) -> _Consumer:
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


# --------------------------------------------------------------------------
# the adapter
# --------------------------------------------------------------------------


class StompBroker:
    """The :class:`~tepat.ports.broker.Broker` port on ActiveMQ Classic 5.17 over STOMP.

    ``url``: ``stomp://[user:pass@]host[:61613]``. A message is dead-lettered on
    its ``max_redeliveries + 1``-th nack; nacked messages come back after
    ``redelivery_delay_seconds``. ``publish`` retries on a broken connection for
    up to ``publish_retry_seconds`` before raising :class:`BrokerUnavailable`.
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
        max_redeliveries: int = 3,
        redelivery_delay_seconds: float = 1.0,
    ) -> None:
        self.target = parse_stomp_url(url)
        self.clock: Clock = clock or SystemClock()
        self.heartbeat_ms = heartbeat_ms
        self.request_timeout = request_timeout
        self._publish_retry_seconds = publish_retry_seconds
        self._max_backoff = max_backoff_seconds
        self._max_redeliveries = max_redeliveries
        self._redelivery_delay = redelivery_delay_seconds
        self._publisher: _Link | None = None
        self._publisher_lock: asyncio.Lock | None = None
        self._consumers: set[_Consumer] = set()
        self.in_flight: dict[str, tuple[_Consumer, _Link]] = {}
        self._closed = True

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
        headers = {"persistent": "true"}
        delay_ms = round(delay_seconds * 1000)
        if delay_ms > 0:
            headers["AMQ_SCHEDULED_DELAY"] = str(delay_ms)
        await self._send(f"/queue/{_check_name(queue)}", bytes(body), headers)

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

    async def _publishing_link(self) -> _Link:
        if self._closed:
            raise BrokerClosed("the STOMP broker adapter is closed")
        if self._publisher is not None and self._publisher.connected:
            return self._publisher
        if self._publisher_lock is None:
            self._publisher_lock = asyncio.Lock()
        async with self._publisher_lock:
            if self._publisher is not None and self._publisher.connected:
                return self._publisher
            old, self._publisher = self._publisher, None
            if old is not None:
                await old.close()
            link = _Link(
                self.target, "publish", heartbeat_ms=self.heartbeat_ms, timeout=self.request_timeout
            )
            await link.open()
            self._publisher = link
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
        consumer = _Consumer(self, tuple(_check_name(q) for q in queues), prefetch)
        await consumer.start()
        self._consumers.add(consumer)
        try:
            yield consumer
        finally:
            self._consumers.discard(consumer)
            await asyncio.shield(consumer.stop())

    def _live(self, delivery: Delivery) -> _Link | None:
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
        """Requeue a copy (due in ``redelivery_delay_seconds``) or dead-letter it, atomically.

        One STOMP transaction on the consumer's connection sends the copy and
        acks the original, so the message is never lost nor doubled by a crash
        in between. The copy carries ``tepat_nacks`` and ``tepat_reason``.
        """
        link = self._live(delivery)
        if link is None:
            return
        nacks = _int(delivery.headers.get(H_NACKS)) + 1
        headers = {
            "persistent": "true",
            H_NACKS: str(nacks),
            H_REASON: reason[:_MAX_REASON_CHARS],
            H_QUEUE: delivery.queue,
            H_FIRST_ID: delivery.headers.get(H_FIRST_ID) or delivery.headers.get("message-id", ""),
        }
        if nacks > self._max_redeliveries:
            destination = f"/queue/{DLQ_PREFIX}{delivery.queue}"
        else:
            destination = f"/queue/{delivery.queue}"
            delay_ms = round(self._redelivery_delay * 1000)
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

    @asynccontextmanager
    async def _admin(self, on_frame: Callable[[Any], None]) -> AsyncIterator[_Link]:
        if self._closed:
            raise BrokerClosed("the STOMP broker adapter is closed")
        link = _Link(
            self.target,
            "admin",
            heartbeat_ms=self.heartbeat_ms,
            timeout=self.request_timeout,
            on_frame=on_frame,
        )
        await link.open()
        try:
            yield link
        finally:
            await link.close()

    async def _open_inbox(self, link: _Link, inbox: _Inbox) -> None:
        """Subscribe the admin connection to its reply queue (maps arrive as XML)."""
        await link.request(
            "subscribe",
            inbox.reply_to,
            id="inbox",
            ack="auto",
            headers={"transformation": "jms-map-xml"},
        )

    async def _statistics(
        self, link: _Link, inbox: _Inbox, names: Sequence[str]
    ) -> dict[str, dict[str, str]]:
        """Statistics-plugin maps of the named destinations that exist."""
        reply_to = inbox.reply_to
        result: dict[str, dict[str, str]] = {}
        for name in names:
            await link.send_frame(
                "send",
                f"{_STATS_PREFIX}{name}",
                b"",
                headers={"reply-to": reply_to, _STATS_END: "true"},
            )
            while True:  # replies, then an empty map
                frame = await inbox.next(self.request_timeout)
                values = _parse_map(frame.body)
                if not values:
                    break
                dest = values.get("destinationName", "")
                result[dest.removeprefix("queue://")] = values
        return result

    async def _scheduled_counts(self, link: _Link, inbox: _Inbox) -> dict[str, int]:
        """Not-yet-due jobs per queue, from the scheduler's BROWSE action."""
        marker = uuid.uuid4().hex
        # the receipt comes after the broker has put every job on the reply
        # queue; the marker, sent after it, then arrives after the last job
        await link.request(
            "send",
            _SCHEDULER,
            b"",
            headers={"AMQ_SCHEDULER_ACTION": "BROWSE", "reply-to": inbox.reply_to},
        )
        await link.send_frame("send", inbox.reply_to, b"", headers={"tepat_marker": marker})
        counts: dict[str, int] = {}
        while True:
            frame = await inbox.next(self.request_timeout)
            if frame.headers.get("tepat_marker") == marker:
                return counts
            dest = str(frame.headers.get("original-destination", ""))
            if dest.startswith("/queue/"):
                queue = dest.removeprefix("/queue/")
                counts[queue] = counts.get(queue, 0) + 1

    async def stats(self, queues: Sequence[str]) -> list[QueueStats]:
        names = [_check_name(q) for q in queues]
        inbox = _Inbox()
        async with self._admin(inbox.put) as link:
            await self._open_inbox(link, inbox)
            maps = await self._statistics(
                link, inbox, [n for q in names for n in (q, DLQ_PREFIX + q)]
            )
            scheduled = await self._scheduled_counts(link, inbox)
        result = []
        for q in names:
            m = maps.get(q, {})
            size, in_flight = _int(m.get("size")), _int(m.get("inflightCount"))
            result.append(
                QueueStats(
                    queue=q,
                    ready=max(0, size - in_flight),
                    scheduled=scheduled.get(q, 0),
                    in_flight=in_flight,
                    dead_letters=_int(maps.get(DLQ_PREFIX + q, {}).get("size")),
                )
            )
        return result

    async def _browse(
        self, link: _Link, inbox: _Inbox, destination: str, selector: str | None = None
    ) -> list[Any]:
        """Every message a queue browser sees (never removes anything)."""
        sub = uuid.uuid4().hex
        headers = {"browser": "true"}
        if selector:
            headers["selector"] = selector
        await link.request("subscribe", destination, id=sub, ack="auto", headers=headers)
        frames: list[Any] = []
        try:
            while True:
                frame = await inbox.next(self.request_timeout)
                if frame.headers.get("subscription") != sub:
                    continue
                if frame.headers.get("browser") == "end":
                    return frames
                frames.append(frame)
        finally:
            with contextlib.suppress(BrokerUnavailable):
                await link.send_frame("unsubscribe", sub)

    async def dead_letters(self, queues: Sequence[str]) -> list[DeadLetter]:
        names = [_check_name(q) for q in queues]
        if not names:
            return []
        inbox = _Inbox()
        dead: list[tuple[str, Any]] = []
        async with self._admin(inbox.put) as link:
            await self._open_inbox(link, inbox)
            # only browse DLQs that exist: subscribing would create an empty one
            existing = await self._statistics(link, inbox, [DLQ_PREFIX + q for q in names])
            for q in names:
                if _int(existing.get(DLQ_PREFIX + q, {}).get("size")) > 0:
                    frames = await self._browse(link, inbox, f"/queue/{DLQ_PREFIX}{q}")
                    dead.extend((q, f) for f in frames)
        result = []
        for queue, frame in dead:
            headers = frame.headers
            result.append(
                DeadLetter(
                    id=str(headers.get("message-id", "")),
                    queue=queue,
                    body=frame.body if isinstance(frame.body, bytes) else str(frame.body).encode(),
                    # without our headers it was dead-lettered by the broker (a
                    # plain STOMP NACK from another client, or an expiry)
                    reason=str(headers.get(H_REASON) or "dead-lettered by the broker (no reason)"),
                    attempts=_int(headers.get(H_NACKS)) or self._max_redeliveries + 1,
                )
            )
        return result

    async def replay_dead_letter(self, dead_letter_id: str) -> bool:
        if not dead_letter_id or "'" in dead_letter_id:
            return False
        selector = f"JMSMessageID = {_selector_literal(dead_letter_id)}"
        inbox = _Inbox()
        async with self._admin(inbox.put) as link:
            await self._open_inbox(link, inbox)
            found = await self._browse(link, inbox, f"/queue/{DLQ_PREFIX}>", selector)
            if not found:
                return False
            # take it off the DLQ with a consumer that selects just this message
            await link.request(
                "subscribe",
                str(found[0].headers["destination"]),
                id="take",
                ack="client-individual",
                headers={"selector": selector, "activemq.prefetchSize": "1"},
            )
            frame = await inbox.next_from("take", self.request_timeout)
            original = _origin(frame.headers)
            tx = f"replay-{uuid.uuid4().hex}"
            await link.send_frame("begin", tx)
            await link.send_frame(
                "send",
                original,
                frame.body,
                headers={"persistent": "true", "tepat_replayed_from": dead_letter_id},
                transaction=tx,
            )
            await link.send_frame("ack", frame.headers["ack"], transaction=tx)
            await link.request("commit", tx)
            await link.send_frame("unsubscribe", "take")
        return True


class _Inbox:
    """Frames of an admin connection, in arrival order, on the event loop."""

    def __init__(self) -> None:
        self.reply_to = f"/temp-queue/tepat-{uuid.uuid4().hex}"
        self._frames: asyncio.Queue[Any] = asyncio.Queue()

    def put(self, frame: Any) -> None:
        self._frames.put_nowait(frame)

    async def next(self, within: float) -> Any:
        try:
            return await asyncio.wait_for(self._frames.get(), within)
        except TimeoutError:
            raise BrokerUnavailable("ActiveMQ did not answer in time") from None

    async def next_from(self, subscription: str, within: float) -> Any:
        while True:
            frame = await self.next(within)
            if frame.headers.get("subscription") == subscription:
                return frame
