"""Push as a :class:`~tepat.ports.channel.Channel`: one message, one request per device,
coalesced with every batch in hand's into provider-sized requests.

A consumer works on several broker batches at once (one per worker). Sent on their own,
a batch of 3 one-offs costs one provider request, and so does the next one a millisecond
later. Here the requests of every batch being worked on meet: a request goes out as soon
as a connection is free, carrying whatever waits then, up to ``max_batch`` (100 for
Expo). Nothing waits for others to join it (at a moderate rate that wait was most of a
send's lateness); while every connection is busy, what is submitted gathers into full
requests, so K notifications due together cost about K/100 requests whatever path
planned them.

A request whose ``still_sendable`` says no once it waited (for a free connection here,
for the provider's rate limiter there: :class:`~tepat.ports.push.GateClosed`) is not
sent, and its message is answered :class:`~tepat.ports.channel.Withheld`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import cast

from tepat import metrics
from tepat.clock import Clock
from tepat.domain.categories import Categories
from tepat.domain.models import Device, Message, Ticket
from tepat.domain.push_terms import push_terms
from tepat.domain.queues import PUSH, may_use_critical_reserve
from tepat.ports.channel import Accepted, ChannelOutcome, Outgoing, Refused, Withheld
from tepat.ports.push import (
    GateClosed,
    PushProvider,
    PushRequest,
    Rejected,
    SendResult,
    TicketError,
    TicketOk,
    TicketOutcome,
)
from tepat.ports.repositories.devices import DeviceRepository
from tepat.ports.try_again import TryAgain
from tepat.services.device_health import device_failed
from tepat.services.sending.channel_sender import gather_all
from tepat.services.sending.failover import FailoverRoute

Outcome = TicketOutcome | TryAgain | Rejected | Withheld
_Waiting = list[tuple[PushRequest, asyncio.Future[Outcome]]]
_Sender = asyncio.Task[None]


class PushBatcher:
    def __init__(
        self, push: PushProvider, clock: Clock, concurrency: int = 6, provider: str = "expo"
    ) -> None:
        self._push = push
        self._provider = provider  # the device kind it sends to: its metrics label
        self._clock = clock
        self._waiting: _Waiting = []
        # Senders started that have not yet taken their chunk (each takes up to max_batch):
        # the tasks themselves, not a count, since one cancelled before it ever ran (a hard
        # stop) runs none of its code, and a count it never took back made every later
        # submission start one sender too few, its last chunk left waiting for the next.
        self._senders_waiting: set[_Sender] = set()
        self._sending: set[asyncio.Task[None]] = set()
        # Requests in flight at once: Expo asks for about six connections.
        self._slots = asyncio.Semaphore(concurrency)

    def submit(self, requests: Sequence[PushRequest]) -> list[asyncio.Future[Outcome]]:
        """Queue ``requests``; each future resolves with that request's outcome (a
        ticket, or the whole provider request's TryAgain / Rejected)."""
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[Outcome]] = []
        for request in requests:
            fut: asyncio.Future[Outcome] = loop.create_future()
            self._waiting.append((request, fut))
            futures.append(fut)
        # A critical request does not queue for a slot behind others held at their share
        # of the rate: senders of their own take the critical ones without a slot (the
        # provider's own connections still bound them).
        critical = sum(r.critical for r in requests)
        for _ in range(-(-critical // self._push.max_batch)):
            self._start(critical=True)
        # Enough senders for what waits; each takes its chunk once it has a connection,
        # so what is submitted meanwhile (the same loop turn, or while all are busy) joins.
        wanted = -(-len(self._waiting) // self._push.max_batch)
        for _ in range(wanted - len(self._senders_waiting)):
            self._start(critical=False)
        return futures

    def _start(self, *, critical: bool) -> None:
        task = asyncio.create_task(self._send(critical))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)
        if not critical:
            self._senders_waiting.add(task)
            task.add_done_callback(self._senders_waiting.discard)

    def _take(self, n: int, critical: bool = False) -> _Waiting:
        """Up to ``n`` waiting requests; for a ``critical`` sender, critical ones only."""
        if not critical:
            chunk, self._waiting = self._waiting[:n], self._waiting[n:]
            return chunk
        chunk = [w for w in self._waiting if w[0].critical][:n]
        taken = {id(fut) for _, fut in chunk}
        self._waiting = [w for w in self._waiting if id(w[1]) not in taken]
        return chunk

    async def _send(self, critical: bool) -> None:
        chunk: _Waiting = []
        try:
            if not critical:
                try:
                    await self._slots.acquire()
                finally:  # its chunk taken below, or cancelled: no longer one of those to come
                    self._senders_waiting.discard(cast(_Sender, asyncio.current_task()))
            try:
                chunk = self._take(self._push.max_batch, critical)
                # Asked once a connection is free (a provider with a rate limiter asks again).
                chunk = _drop(chunk, {r.message_id for r, _ in chunk if not r.still_sendable()})
                result: SendResult | None = None
                while chunk and result is None:
                    started = self._clock.now()
                    try:
                        result = await self._push.send([r for r, _ in chunk])
                    except GateClosed as closed:  # nothing went out: the others go again
                        chunk = _drop(chunk, closed.message_ids)
                        continue
                    metrics.SEND_LATENCY.observe((self._clock.now() - started).total_seconds())
            finally:
                if not critical:
                    self._slots.release()
            if result is None:
                return
        except Exception as e:
            for _, fut in chunk:
                if not fut.done():
                    fut.set_exception(e)
            return
        except BaseException:
            for _, fut in chunk:
                fut.cancel()
            raise
        if isinstance(result, TryAgain | Rejected):
            metrics.count_provider_error(PUSH, result, self._provider)
            outcomes: Sequence[Outcome] = [result] * len(chunk)
        else:
            outcomes = result.outcomes
            for again in outcomes:
                if isinstance(again, TryAgain):  # one notification's, counted as a whole one's
                    metrics.count_provider_error(PUSH, again, self._provider)
        for (_, fut), outcome in zip(chunk, outcomes, strict=True):
            if not fut.done():
                fut.set_result(outcome)

    def abandon(self) -> None:
        """A hard stop: drop what waits and cancel what is in flight (as a crash would,
        nothing more is sent; the lease re-drives the claimed messages)."""
        for _, fut in self._take(len(self._waiting)):
            fut.cancel()
        for task in list(self._sending):
            task.cancel()
        self._senders_waiting.clear()  # none of them will take a chunk now


def _drop(chunk: _Waiting, lapsed: set[str]) -> _Waiting:
    """``chunk`` without the requests of ``lapsed`` messages, answered as not sent."""
    for request, fut in chunk:
        if request.message_id in lapsed and not fut.done():
            fut.set_result(Withheld())
    return [(r, fut) for r, fut in chunk if r.message_id not in lapsed]


class PushChannel:
    """Each item's ``devices`` are its requests, each sent by the provider of its device's
    kind (``providers``, by :attr:`~tepat.domain.models.Device.kind`); a message is one
    answer whatever its devices said (:func:`answer_of`), the tickets of providers with
    receipts kept (with the answer, after it is recorded) for the receipt poller."""

    name = PUSH

    def __init__(
        self,
        providers: Mapping[str, PushProvider],
        devices: DeviceRepository,
        clock: Clock,
        categories: Categories,
        *,
        device_max_failures: int = 3,
        concurrency: Mapping[str, int] | None = None,
    ) -> None:
        self._providers = providers
        self._devices = devices
        self._clock = clock
        self._categories = categories
        self._device_max_failures = device_max_failures
        # Per kind, the requests its batcher has in flight (tepat.runtime.push_concurrency);
        # 6 for a kind not named.
        limits = concurrency or {}
        self.batchers = {
            kind: PushBatcher(p, clock, limits.get(kind, 6), provider=kind)
            for kind, p in providers.items()
        }
        self._routes: dict[tuple[str, str], FailoverRoute] = {}

    @property
    def max_batch(self) -> int:
        return max(p.max_batch for p in self._providers.values())

    def set_rate_share(self, share: float) -> None:
        for provider in self._providers.values():
            provider.set_rate_share(share)

    def abandon(self) -> None:
        for batcher in self.batchers.values():
            batcher.abandon()

    async def close(self) -> None:
        """The provider is the runtime's to close: its receipts are polled with it too."""

    async def send(self, items: Sequence[Outgoing]) -> list[ChannelOutcome | Withheld]:
        pairs = [(item, device) for item in items for device in item.devices]
        outcomes = await _results(self._submit(pairs))
        # The device each outcome is from: its fallback's where it failed over.
        sent_to = [device for _, device in pairs]
        await self._fail_over(pairs, outcomes, sent_to)
        answered: dict[str, list[Outcome]] = {item.message.id: [] for item in items}
        tickets: dict[str, list[Ticket]] = {item.message.id: [] for item in items}
        accepted: dict[str, tuple[TicketOk, int]] = {}  # per kind: counted together
        # A provider with no receipts (FCM, APNs: they answer at send time) keeps none.
        receipts = {kind: bool(p.max_receipt_batch) for kind, p in self._providers.items()}
        for outcome, (item, _), device in zip(outcomes, pairs, sent_to, strict=True):
            answered[item.message.id].append(outcome)
            if isinstance(outcome, TicketOk):
                accepted[device.kind] = (outcome, accepted.get(device.kind, (outcome, 0))[1] + 1)
                if receipts[device.kind]:
                    tickets[item.message.id].append(
                        _ticket(item.message, device, outcome, self._clock.now())
                    )
                continue
            metrics.count_push_answer(device.kind, outcome)
            if isinstance(outcome, TicketError):
                await device_failed(self._devices, device, outcome, self._device_max_failures)
        for kind, (ok, n) in accepted.items():
            metrics.count_push_answer(kind, ok, n)
        return [answer_of(answered[item.message.id], tickets[item.message.id]) for item in items]

    async def _fail_over(
        self,
        pairs: Sequence[tuple[Outgoing, Device]],
        outcomes: list[Outcome],
        sent_to: list[Device],
    ) -> None:
        """Each device with a fallback token whose provider failed it (:mod:`failover
        <tepat.services.sending.failover>`) is sent to once more through its fallback
        kind's provider; ``outcomes`` and ``sent_to`` are updated in place."""
        routes: dict[tuple[str, str], list[int]] = {}
        for i, (_, device) in enumerate(pairs):
            to = device.fallback_kind
            if to is not None and to != device.kind and to in self.batchers:
                routes.setdefault((device.kind, to), []).append(i)

        async def fail_over(from_: str, to: str, indexes: list[int]) -> None:
            new = FailoverRoute(PUSH, from_, to, self._categories)
            route = self._routes.setdefault((from_, to), new)

            async def secondary(picked: Sequence[int]) -> list[Outcome]:
                now = self._clock.now()
                for i in picked:
                    sent_to[i] = replace(
                        pairs[i][1], kind=to, push_token=pairs[i][1].fallback_token or ""
                    )
                requests = [self._request(pairs[i][0], sent_to[i], now) for i in picked]
                return await _results(self.batchers[to].submit(requests))

            primary = [outcomes[i] for i in indexes]
            answers = await route.run(
                indexes, primary, lambda i: pairs[i][0].message.category, secondary
            )
            for i, before, answer in zip(indexes, primary, answers, strict=True):
                outcomes[i] = answer
                if answer is before:  # the fallback did not try: the primary's answer stands
                    sent_to[i] = pairs[i][1]

        await gather_all(*(fail_over(*route, indexes) for route, indexes in routes.items()))
        # A route's primary answering devices without a fallback says it is back too.
        for (from_, to), route in self._routes.items():
            if (from_, to) not in routes:
                route.saw([o for o, (_, d) in zip(outcomes, pairs, strict=True) if d.kind == from_])

    def _submit(self, pairs: Sequence[tuple[Outgoing, Device]]) -> list[asyncio.Future[Outcome]]:
        """Each pair's request to its device kind's batcher, the futures in ``pairs``
        order; a device of a kind no provider is configured for (any more) is refused,
        and kept: the configuration is wrong, not the device."""
        by_kind: dict[str, list[int]] = {}
        for i, (_, device) in enumerate(pairs):
            by_kind.setdefault(device.kind, []).append(i)
        futures: dict[int, asyncio.Future[Outcome]] = {}
        now = self._clock.now()
        for kind, indexes in by_kind.items():
            batcher = self.batchers.get(kind)
            if batcher is None:
                submitted = [_answered(Rejected(f"no {kind} push provider")) for _ in indexes]
            else:
                submitted = batcher.submit([self._request(*pairs[i], now) for i in indexes])
            futures.update(zip(indexes, submitted, strict=True))
        return [futures[i] for i in range(len(pairs))]

    def _request(self, item: Outgoing, device: Device, now: datetime) -> PushRequest:
        m = item.message
        terms = push_terms(m, self._categories.get(m.category), now)
        return PushRequest(
            m.id,
            device.push_token,
            m.title,
            m.body,
            {**m.data, "tepat_message_id": m.id, "category": m.category},
            m.category,
            ttl_seconds=terms.ttl_seconds,
            priority=terms.priority,
            still_sendable=item.still_sendable,
            critical=may_use_critical_reserve(m),
        )


async def _results(futures: Sequence[asyncio.Future[Outcome]]) -> list[Outcome]:
    # One at a time: a chunk's futures are answered together, so this wakes about once per
    # request, where a wait on them all had a callback scheduled for every future.
    for fut in futures:
        if not fut.done():
            await asyncio.wait((fut,))
    if any(fut.cancelled() for fut in futures):
        # A request was abandoned (a hard stop): fail the batch like any other send
        # error; the broker redelivers, the lease re-drives.
        raise ConnectionAbortedError("push request abandoned")
    return [fut.result() for fut in futures]  # a send that raised fails the batch: nack, lease


def _answered(outcome: Outcome) -> asyncio.Future[Outcome]:
    fut: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
    fut.set_result(outcome)
    return fut


def answer_of(
    outcomes: Sequence[Outcome], tickets: Sequence[Ticket] = ()
) -> ChannelOutcome | Withheld:
    """One message's answer from its devices' outcomes: not sent if one request was not
    (its lease ran out: never fully answered, left ``sending`` for the sweeper); accepted
    if any device's notification was; else worth another try if any failure was temporary
    (maybe sent, throttled or a 5xx if any ``TryAgain`` of a request or of one
    notification says so, never before the longest Retry-After); else refused."""
    if len(outcomes) == 1 and type(outcomes[0]) is TicketOk:  # one device took it: most
        return Accepted(outcomes[0].ticket_id, tickets=tuple(tickets))
    if any(isinstance(x, Withheld) for x in outcomes):
        return Withheld()
    ok = [x for x in outcomes if isinstance(x, TicketOk)]
    if ok:
        return Accepted(ok[0].ticket_id, tickets=tuple(tickets))
    error = "; ".join(
        f"{x.code}: {x.message}" if isinstance(x, TicketError) else x.reason
        for x in outcomes
        if not isinstance(x, TicketOk | Withheld)
    )
    error = error or "no device accepted the message"
    retryable = [
        x
        for x in outcomes
        if isinstance(x, TryAgain) or (isinstance(x, TicketError) and not x.permanent)
    ]
    if not retryable:
        return Refused(error)
    again = [x for x in retryable if isinstance(x, TryAgain)]
    return TryAgain(
        error,
        retry_after=max((x.retry_after or 0.0) for x in retryable),
        maybe_sent=any(x.maybe_sent for x in again),
        throttled=any(x.throttled for x in again),
        server_error=any(x.server_error for x in again),
        not_tried=all(isinstance(x, TryAgain) and x.not_tried for x in retryable),
        terms=next((x.terms for x in again if x.terms), None),
    )


def _ticket(m: Message, device: Device, ok: TicketOk, now: datetime) -> Ticket:
    return Ticket(ok.ticket_id, m.id, m.user_id, device.device_id, device.push_token, now)
