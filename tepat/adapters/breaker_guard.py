"""A circuit breaker around one provider: a :class:`~tepat.ports.push.PushProvider`
(:class:`GuardedPush`) or a :class:`~tepat.ports.channel.Channel` (:class:`GuardedChannel`).

While the breaker is open the provider is not called: every request is answered
``TryAgain`` *not sent*, with ``retry_after`` the time until the breaker probes again, so
its messages wait in ``pending`` and then go; nothing is lost and no attempt reaches a
provider that is down. The rule itself is :mod:`tepat.domain.breaker`; which answers
count as the provider's failure is :func:`verdict_of`, here because it reads the ports'
types.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import structlog

from tepat import metrics
from tepat.clock import Clock
from tepat.domain.breaker import Breaker, BreakerSettings, Transition, Verdict
from tepat.ports.channel import (
    Accepted,
    Channel,
    ChannelOutcome,
    Delivered,
    Outgoing,
    Refused,
    Withheld,
)
from tepat.ports.push import PushProvider, PushRequest, ReceiptResult, Rejected, SendResult, Tickets
from tepat.ports.try_again import TryAgain

log = structlog.get_logger("tepat.breaker")

_Answer = TypeVar("_Answer")


def verdict_of(answer: object) -> Verdict:
    """The one place that decides which answers count as a provider-side failure.

    * :class:`TryAgain` is a failure (connect errors, timeouts, 5xx, the provider's own
      "unavailable", a lost answer), *except* when ``throttled``: a 429 is the provider
      working as designed, and the adaptive rate already slows down for it.
    * An acceptance, a recipient's refusal (:class:`Refused`, push :class:`Tickets` even
      with a dead token's error) and a :class:`Rejected` whole request (bad credentials, a
      malformed request) say the provider is up: it answered, and a breaker can fix
      neither a recipient nor a configuration.
    * :class:`Withheld` (nothing went out) says nothing.
    """
    match answer:
        case TryAgain(throttled=False):
            return Verdict.DOWN
        case Tickets() | Rejected() | Accepted() | Delivered() | Refused():
            return Verdict.UP
    return Verdict.NEITHER


def verdict_of_all(answers: Sequence[object]) -> Verdict:
    """A channel's batch: up if the provider took or refused any item (it is answering),
    down if it failed them all, else nothing."""
    verdicts = {verdict_of(a) for a in answers}
    for verdict in (Verdict.UP, Verdict.DOWN):
        if verdict in verdicts:
            return verdict
    return Verdict.NEITHER


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
    """A channel behind its provider's breaker, and the ``secondary`` provider of the
    same channel (a second relay, a second account) it fails over to while the breaker
    is open, if any (itself best guarded by a breaker of its own).

    A request fails over only once the breaker refused it, never in the middle of a
    send: the primary's own answer, ambiguous ones included, is recorded first, so a
    message whose answer was lost after sending (``maybe_sent``) follows its category's
    policy (closed as ``outcome_unknown``, or retried: counted in
    ``tepat_maybe_sent_total``, a possible duplicate) before its next attempt goes
    through the secondary.
    """

    def __init__(
        self, channel: Channel, breaker: ProviderBreaker, secondary: Channel | None = None
    ) -> None:
        self.inner = channel
        self.breaker = breaker
        self.secondary = secondary
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
            if self.secondary is not None:
                return await self.secondary.send(items)
            return [again] * len(items)

        return await self.breaker.call(lambda: self.inner.send(items), verdict_of_all, closed)

    async def close(self) -> None:
        await self.inner.close()
        if self.secondary is not None:
            await self.secondary.close()
