"""Coalesce push requests from every batch in hand into provider-sized requests.

A consumer works on several broker batches at once (one per worker). Sent on
their own, a batch of 3 one-offs costs one provider request, and so does the
next one a millisecond later. Here the requests of every batch being worked
on meet: whatever is submitted within a few milliseconds goes out in requests
of up to ``max_batch`` (100 for Expo), sent concurrently, so K notifications
due together cost about K/100 requests whatever path planned them.

Each submitted request gets its own future, resolved with the provider's
outcome for it (a ticket, or the whole request's TryAgain / Rejected), so a
caller records each message as soon as its own request is answered: the
duplicate window stays one request long. A request whose message's lease ran out
while it waited (for a free connection here, for the provider's rate limiter there:
the provider asks the same gate, :class:`~tepat.ports.push.GateClosed`) is not sent:
its future resolves with :class:`~tepat.services.sending.lease.LeaseLapsed`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from tepat import metrics
from tepat.clock import Clock
from tepat.domain.queues import PUSH
from tepat.ports.push import (
    GateClosed,
    PushProvider,
    PushRequest,
    Rejected,
    SendGate,
    SendResult,
    TicketOutcome,
)
from tepat.ports.try_again import TryAgain
from tepat.services.sending.lease import LeaseLapsed

Outcome = TicketOutcome | TryAgain | Rejected | LeaseLapsed

# How long the first request waits for others to join it (real time: this is about
# other coroutines of this process submitting, not about the clock).
GATHER_WINDOW_SECONDS = 0.005


class PushBatcher:
    def __init__(
        self,
        push: PushProvider,
        clock: Clock,
        concurrency: int = 6,
        unsendable: SendGate | None = None,
    ) -> None:
        self._push = push
        self._clock = clock
        self._unsendable = unsendable
        self._waiting: list[tuple[PushRequest, asyncio.Future[Outcome]]] = []
        self._timer: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[None]] = set()
        # Requests in flight at once: Expo asks for about six connections.
        self._slots = asyncio.Semaphore(concurrency)

    def submit(self, requests: Sequence[PushRequest]) -> list[asyncio.Future[Outcome]]:
        """Queue ``requests``; each future resolves with that request's outcome."""
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[Outcome]] = []
        for request in requests:
            fut: asyncio.Future[Outcome] = loop.create_future()
            self._waiting.append((request, fut))
            futures.append(fut)
        while len(self._waiting) >= self._push.max_batch:
            self._start(self._take(self._push.max_batch))
        if self._waiting and self._timer is None:
            self._timer = asyncio.create_task(self._flush_after_window())
        return futures

    def _take(self, n: int) -> list[tuple[PushRequest, asyncio.Future[Outcome]]]:
        chunk, self._waiting = self._waiting[:n], self._waiting[n:]
        return chunk

    async def _flush_after_window(self) -> None:
        try:
            await asyncio.sleep(GATHER_WINDOW_SECONDS)
        finally:
            self._timer = None
        while self._waiting:
            self._start(self._take(self._push.max_batch))

    def _start(self, chunk: list[tuple[PushRequest, asyncio.Future[Outcome]]]) -> None:
        task = asyncio.create_task(self._send(chunk))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, chunk: list[tuple[PushRequest, asyncio.Future[Outcome]]]) -> None:
        try:
            async with self._slots:
                chunk = self._drop(chunk, self._unsendable_of(chunk))
                result: SendResult | None = None
                while chunk and result is None:
                    started = self._clock.now()
                    try:
                        result = await self._push.send([r for r, _ in chunk])
                    except GateClosed as closed:  # nothing went out: the others go again
                        chunk = self._drop(chunk, closed.message_ids)
                        continue
                    metrics.SEND_LATENCY.observe((self._clock.now() - started).total_seconds())
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
            metrics.count_provider_error(PUSH, result)
            outcomes: Sequence[Outcome] = [result] * len(chunk)
        else:
            outcomes = result.outcomes
        for (_, fut), outcome in zip(chunk, outcomes, strict=True):
            if not fut.done():
                fut.set_result(outcome)

    def _unsendable_of(self, chunk: list[tuple[PushRequest, asyncio.Future[Outcome]]]) -> set[str]:
        """Asked once a connection is free (a provider with a rate limiter asks again)."""
        if self._unsendable is None:
            return set()
        return self._unsendable((r.message_id for r, _ in chunk), PUSH)

    @staticmethod
    def _drop(
        chunk: list[tuple[PushRequest, asyncio.Future[Outcome]]], lapsed: set[str]
    ) -> list[tuple[PushRequest, asyncio.Future[Outcome]]]:
        """``chunk`` without the requests of ``lapsed`` messages, answered as not sent."""
        for request, fut in chunk:
            if request.message_id in lapsed and not fut.done():
                fut.set_result(LeaseLapsed())
        return [(r, fut) for r, fut in chunk if r.message_id not in lapsed]

    def abandon(self) -> None:
        """A hard stop: drop what waits and cancel what is in flight (as a crash would,
        nothing more is sent; the lease re-drives the claimed messages)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for _, fut in self._take(len(self._waiting)):
            fut.cancel()
        for task in list(self._sending):
            task.cancel()

    async def close(self) -> None:
        """Send what is waiting and wait for every request in flight."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._waiting:
            self._start(self._take(self._push.max_batch))
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)
