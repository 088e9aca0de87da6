"""A circuit breaker around one provider: a :class:`~tepat.ports.push.PushProvider`
(:class:`GuardedPush`) or a :class:`~tepat.ports.channel.Channel` (:class:`GuardedChannel`).

While the breaker is open the provider is not called: every request is answered
``TryAgain`` *not sent*, with ``retry_after`` the time until the breaker probes again, so
its messages wait in ``pending`` and then go; nothing is lost and no attempt reaches a
provider that is down. The rule itself is :mod:`tepat.domain.breaker`; which answers
count as the provider's failure is :func:`~tepat.ports.verdict.verdict_of` (failover reads
it too: :mod:`tepat.services.sending.failover`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import structlog

from tepat import metrics
from tepat.clock import Clock
from tepat.domain.breaker import Breaker, BreakerSettings, Transition, Verdict
from tepat.ports.channel import Channel, ChannelOutcome, Outgoing, Withheld
from tepat.ports.push import PushProvider, PushRequest, ReceiptResult, SendResult
from tepat.ports.try_again import TryAgain
from tepat.ports.verdict import verdict_of, verdict_of_all

log = structlog.get_logger("tepat.breaker")

_Answer = TypeVar("_Answer")


class ProviderBreaker:
    """One provider's :class:`Breaker` on a clock, its transitions logged and counted."""

    def __init__(
        self, channel: str, provider: str, settings: BreakerSettings, clock: Clock
    ) -> None:
        self.provider = provider
        self.breaker = Breaker(settings)
        self._clock = clock
        self._labels = {"channel": channel, "provider": provider}
        metrics.BREAKER_STATE.labels(**self._labels).set(self.breaker.state)

    async def call(
        self,
        send: Callable[[], Awaitable[_Answer]],
        verdict: Callable[[_Answer], Verdict],
        closed: Callable[[TryAgain], Awaitable[_Answer]],
    ) -> _Answer:
        """``send()`` if the breaker lets it through, else ``closed`` of its TryAgain."""
        admission = self.breaker.admit(self._clock.now())
        self._note(admission.transition)
        if admission.wait is not None:
            return await closed(
                TryAgain(
                    f"breaker_open: {self.provider} is failing",
                    retry_after=admission.wait,
                    not_tried=True,
                )
            )
        answer_verdict = Verdict.NEITHER
        try:
            answer = await send()
            answer_verdict = verdict(answer)
            return answer
        finally:  # a call that raised still frees its probe slot
            self._note(
                self.breaker.record(answer_verdict, self._clock.now(), probe=admission.probe)
            )

    def _note(self, transition: Transition | None) -> None:
        if transition is None:
            return
        to = transition.to.name.lower()
        log.warning(
            "provider_breaker",
            **self._labels,
            **{"from": transition.from_.name.lower()},
            to=to,
            reason=transition.reason,
        )
        metrics.BREAKER_STATE.labels(**self._labels).set(transition.to)
        metrics.BREAKER_TRANSITIONS.labels(**self._labels, to=to).inc()


class GuardedPush:
    """A push provider behind a breaker: its sends only (reading receipts is idempotent and
    cheap, and the poller retries it on its own)."""

    def __init__(self, provider: PushProvider, breaker: ProviderBreaker) -> None:
        self.inner = provider
        self.breaker = breaker

    @property
    def max_batch(self) -> int:
        # Read through, never copied: Expo's and FCM's shrink while they are throttled.
        return self.inner.max_batch

    @property
    def max_receipt_batch(self) -> int:
        return self.inner.max_receipt_batch

    async def send(self, batch: Sequence[PushRequest]) -> SendResult:
        return await self.breaker.call(lambda: self.inner.send(batch), verdict_of, _answer)

    def set_rate_share(self, share: float) -> None:
        self.inner.set_rate_share(share)

    async def receipts(self, ticket_ids: Sequence[str]) -> ReceiptResult:
        return await self.inner.receipts(ticket_ids)

    async def close(self) -> None:
        await self.inner.close()


async def _answer(again: TryAgain) -> TryAgain:
    return again


class GuardedChannel:
    """A channel behind its provider's breaker. A channel with a secondary provider is
    two of these in a :class:`~tepat.services.sending.failover.FailoverChannel`."""

    def __init__(self, channel: Channel, breaker: ProviderBreaker) -> None:
        self.inner = channel
        self.breaker = breaker
        self.name = channel.name

    @property
    def max_batch(self) -> int:
        return self.inner.max_batch

    def __getattr__(self, name: str) -> Any:
        # The optional parts the sender looks up by name (``set_rate_share``, ``abandon``)
        # are the channel's own.
        return getattr(self.inner, name)

    async def send(self, items: Sequence[Outgoing]) -> Sequence[ChannelOutcome | Withheld]:
        async def closed(again: TryAgain) -> Sequence[ChannelOutcome | Withheld]:
            return [again] * len(items)

        return await self.breaker.call(lambda: self.inner.send(items), verdict_of_all, closed)

    async def close(self) -> None:
        await self.inner.close()
