"""Failover to a channel's secondary provider, the one wrapper every channel uses: push
per device (:class:`~tepat.services.sending.push_channel.PushChannel`, to a device's
fallback token), e-mail and SMS per channel (:class:`FailoverChannel`).

Which answers fail over is :func:`tepat.domain.failover.failover_of`; here the items it
picks are sent once more through the secondary, right away (in the same attempt: a
provider that is down costs the message no retry delay), and the secondary's answer is
the one recorded. Each failover is counted in ``tepat_failovers_total``; the log says
when a route starts failing over and when its primary answers again, not each message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import structlog

from tepat import metrics
from tepat.domain.breaker import Verdict
from tepat.domain.categories import Categories
from tepat.domain.failover import Failover, failover_of
from tepat.ports.channel import Channel, ChannelOutcome, Outgoing, Withheld
from tepat.ports.try_again import TryAgain
from tepat.ports.verdict import verdict_of
from tepat.services.sending.channel_sender import call_each

log = structlog.get_logger("tepat.failover")

Item = TypeVar("Item")
Answer = TypeVar("Answer")


class FailoverRoute:
    """One channel's way from a primary provider (``from_``) to a secondary (``to``)."""

    def __init__(self, channel: str, from_: str, to: str, categories: Categories) -> None:
        self._labels = {"channel": channel, "from": from_, "to": to}
        self._categories = categories
        self.failing_over = False
        self._since = 0  # items failed over since it started

    async def run(
        self,
        items: Sequence[Item],
        answers: Sequence[Answer],
        category_of: Callable[[Item], str],
        secondary: Callable[[Sequence[Item]], Awaitable[Sequence[Answer]]],
    ) -> list[Answer]:
        """``answers`` (the primary's, one per item), those :func:`failover_of` picks
        replaced by the ``secondary``'s."""
        merged = list(answers)
        picked: list[tuple[int, Failover]] = []
        for i, (item, answer) in enumerate(zip(items, answers, strict=True)):
            decision = failover_of(
                verdict_of(answer),
                maybe_sent=isinstance(answer, TryAgain) and answer.maybe_sent,
                policy=self._categories.get(category_of(item)).maybe_sent,
            )
            if decision is not Failover.STAY:
                picked.append((i, decision))
        if not picked:
            self.saw(answers)
            return merged
        if not self.failing_over:
            self.failing_over, self._since = True, 0
            log.warning("failover_started", **self._labels, reason=_reason(answers))
        second = await secondary([items[i] for i, _ in picked])
        for (i, decision), answer in zip(picked, second, strict=True):
            if isinstance(answer, TryAgain) and answer.not_tried:
                # The secondary's breaker is open too: nothing went out, and the
                # primary's answer (its attempt, maybe sent) is the one to record.
                continue
            merged[i] = answer
            self._since += 1
            twice = "true" if decision is Failover.GO_MAYBE_TWICE else "false"
            metrics.FAILOVERS.labels(**self._labels, possible_duplicate=twice).inc()
        return merged

    def saw(self, answers: Sequence[object]) -> None:
        """The primary's ``answers`` to requests that did not fail over: failing over
        ends once the primary answers again."""
        if self.failing_over and Verdict.UP in map(verdict_of, answers):
            self.failing_over = False
            log.warning("failover_ended", **self._labels, failed_over=self._since)


def _reason(answers: Sequence[object]) -> str:
    return next((a.reason for a in answers if isinstance(a, TryAgain)), "")


class FailoverChannel:
    """A channel with a secondary provider (a second SMTP relay, a second Twilio account),
    each behind its own breaker: what the primary fails to send for provider-side reasons
    goes through the secondary."""

    def __init__(
        self, primary: Channel, secondary: Channel, categories: Categories, from_: str, to: str
    ) -> None:
        self.name = primary.name
        self.primary, self.secondary = primary, secondary
        self.route = FailoverRoute(primary.name, from_, to, categories)

    @property
    def max_batch(self) -> int:
        return min(self.primary.max_batch, self.secondary.max_batch)

    def set_rate_share(self, share: float) -> None:
        call_each((self.primary, self.secondary), "set_rate_share", share)

    def abandon(self) -> None:
        call_each((self.primary, self.secondary), "abandon")

    async def send(self, items: Sequence[Outgoing]) -> Sequence[ChannelOutcome | Withheld]:
        answers = await self.primary.send(items)
        return await self.route.run(
            items, answers, lambda item: item.message.category, self.secondary.send
        )

    async def close(self) -> None:
        await self.primary.close()
        await self.secondary.close()
