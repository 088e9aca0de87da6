"""Operations on the broker: ``stats``, ``dead_letters`` and ``replay_dead_letter``.

Each call opens its own short-lived admin connection with a reply inbox.

* ``stats``: the statistics plugin (``ActiveMQ.Statistics.Destination.<q>``,
  reply as a ``jms-map-xml`` map on a temp queue) for ``size`` and
  ``inflightCount`` of the queue and of ``DLQ.<q>``; the scheduler's
  ``BROWSE`` action for not-yet-due messages. BROWSE sends back every
  scheduled job of the whole broker, bodies included, so one ``stats`` call
  costs about 1.3-2 s with 9-12k scheduled batches on a 2-core machine: poll it
  every few seconds at most. Batching (``tepat.domain.batches``) keeps the job
  count 100 times smaller than the notification count.
* ``dead_letters``: a STOMP queue browser (``browser: true``) on ``DLQ.<q>``:
  it never takes a message off the queue. ``DeadLetter.id`` is the JMS message id.
* ``replay_dead_letter``: found by a browser on ``DLQ.>`` (``DLQ.<prefix>>`` for
  one namespace's queues, ``tepat.adapters.namespaced_broker``) selecting the JMS
  message id; then within one STOMP transaction send a fresh copy to
  the original queue and ack the DLQ message: the move is atomic.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

from tepat.adapters.stomp.frames import (
    DLQ_PREFIX,
    H_NACKS,
    H_REASON,
    int_header,
    origin,
    parse_map,
)
from tepat.adapters.stomp.link import BrokerUnavailable, Link
from tepat.adapters.stomp.url import check_name, selector_literal
from tepat.ports.broker import BrokerClosed, DeadLetter, QueueStats

_STATS_PREFIX = "/queue/ActiveMQ.Statistics.Destination."
_STATS_END = "ActiveMQ.Statistics.Destination.List.End.With.Null"
_SCHEDULER = "/topic/ActiveMQ.Scheduler.Management"
# a message the broker's redeliveryPlugin dead-lettered was delivered this often
# (maximumRedeliveries="3" in deploy/activemq/conf/activemq.xml, plus the first)
_BROKER_PLUGIN_ATTEMPTS = 4


class LinkSource(Protocol):
    """What the admin (and each consumer) uses of its STOMP broker adapter."""

    @property
    def request_timeout(self) -> float: ...

    @property
    def closed(self) -> bool: ...

    async def open_link(
        self,
        name: str,
        on_frame: Callable[[Link, Any], None] | None = None,
        on_lost: Callable[[Link], None] | None = None,
    ) -> Link: ...


class StompAdmin:
    """The operations of one :class:`StompBroker`, on connections of their own."""

    def __init__(self, broker: LinkSource) -> None:
        self.broker = broker

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[tuple[Link, Inbox]]:
        """A connection of its own, subscribed to its reply queue (maps arrive as XML)."""
        if self.broker.closed:
            raise BrokerClosed("the STOMP broker adapter is closed")
        inbox = Inbox(self.broker.request_timeout)
        link = await self.broker.open_link("admin", lambda _link, frame: inbox.put(frame))
        try:
            await link.request(
                "subscribe",
                inbox.reply_to,
                id="inbox",
                ack="auto",
                headers={"transformation": "jms-map-xml"},
            )
            yield link, inbox
        finally:
            await link.close()

    async def _statistics(
        self, link: Link, inbox: Inbox, names: Sequence[str]
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
                frame = await inbox.next()
                values = parse_map(frame.body)
                if not values:
                    break
                dest = values.get("destinationName", "")
                result[dest.removeprefix("queue://")] = values
        return result

    async def _scheduled_counts(self, link: Link, inbox: Inbox) -> dict[str, int]:
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
            frame = await inbox.next()
            if frame.headers.get("tepat_marker") == marker:
                return counts
            dest = str(frame.headers.get("original-destination", ""))
            if dest.startswith("/queue/"):
                queue = dest.removeprefix("/queue/")
                counts[queue] = counts.get(queue, 0) + 1

    async def stats(self, queues: Sequence[str]) -> list[QueueStats]:
        names = [check_name(q) for q in queues]
        async with self._connection() as (link, inbox):
            maps = await self._statistics(
                link, inbox, [n for q in names for n in (q, DLQ_PREFIX + q)]
            )
            scheduled = await self._scheduled_counts(link, inbox)
        result = []
        for q in names:
            m = maps.get(q, {})
            size, in_flight = int_header(m.get("size")), int_header(m.get("inflightCount"))
            dead = int_header(maps.get(DLQ_PREFIX + q, {}).get("size"))
            ready = max(0, size - in_flight)
            result.append(QueueStats(q, ready, scheduled.get(q, 0), in_flight, dead))
        return result

    async def _browse(
        self, link: Link, inbox: Inbox, destination: str, selector: str | None = None
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
                frame = await inbox.next()
                if frame.headers.get("subscription") != sub:
                    continue
                if frame.headers.get("browser") == "end":
                    return frames
                frames.append(frame)
        finally:
            with contextlib.suppress(BrokerUnavailable):
                await link.send_frame("unsubscribe", sub)

    async def dead_letters(self, queues: Sequence[str]) -> list[DeadLetter]:
        names = [check_name(q) for q in queues]
        if not names:
            return []
        result: list[DeadLetter] = []
        async with self._connection() as (link, inbox):
            # only browse DLQs that exist: subscribing would create an empty one
            existing = await self._statistics(link, inbox, [DLQ_PREFIX + q for q in names])
            for q in names:
                if int_header(existing.get(DLQ_PREFIX + q, {}).get("size")) > 0:
                    frames = await self._browse(link, inbox, f"/queue/{DLQ_PREFIX}{q}")
                    result.extend(_dead_letter(q, f) for f in frames)
        return result

    async def replay_dead_letter(self, dead_letter_id: str, queue_prefix: str = "") -> bool:
        if not dead_letter_id or "'" in dead_letter_id:
            return False
        if queue_prefix and not queue_prefix.endswith("."):
            # ">" is a wildcard only as a whole segment: ``DLQ.app.b.>``, never ``DLQ.app.b>``
            raise ValueError(f"queue prefix {queue_prefix!r} must end with '.'")
        selector = f"JMSMessageID = {selector_literal(dead_letter_id)}"
        dlqs = f"/queue/{DLQ_PREFIX}{check_name(queue_prefix) if queue_prefix else ''}>"
        async with self._connection() as (link, inbox):
            found = await self._browse(link, inbox, dlqs, selector)
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
            frame = await inbox.next_from("take")
            original = origin(frame.headers)
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


def _dead_letter(queue: str, frame: Any) -> DeadLetter:
    headers = frame.headers
    return DeadLetter(
        id=str(headers.get("message-id", "")),
        queue=queue,
        body=frame.body if isinstance(frame.body, bytes) else str(frame.body).encode(),
        # without our headers it was dead-lettered by the broker (a
        # plain STOMP NACK from another client, or an expiry)
        reason=str(headers.get(H_REASON) or "dead-lettered by the broker (no reason)"),
        attempts=int_header(headers.get(H_NACKS)) or _BROKER_PLUGIN_ATTEMPTS,
    )


class Inbox:
    """Frames of an admin connection, in arrival order, on the event loop; each awaited
    for at most ``within`` seconds."""

    def __init__(self, within: float) -> None:
        self.within = within
        self.reply_to = f"/temp-queue/tepat-{uuid.uuid4().hex}"
        self._frames: asyncio.Queue[Any] = asyncio.Queue()

    def put(self, frame: Any) -> None:
        self._frames.put_nowait(frame)

    async def next(self) -> Any:
        try:
            return await asyncio.wait_for(self._frames.get(), self.within)
        except TimeoutError:
            raise BrokerUnavailable("ActiveMQ did not answer in time") from None

    async def next_from(self, subscription: str) -> Any:
        while True:
            frame = await self.next()
            if frame.headers.get("subscription") == subscription:
                return frame
