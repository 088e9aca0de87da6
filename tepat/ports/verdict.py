"""What one provider answer says about the provider itself (:class:`Verdict`): read by
its circuit breaker (:mod:`tepat.adapters.breaker_guard`) and by failover
(:mod:`tepat.domain.failover`), so both call the same answers the provider's failure."""

from __future__ import annotations

from collections.abc import Sequence

from tepat.domain.breaker import Verdict
from tepat.ports.channel import Accepted, Delivered, Refused
from tepat.ports.push import Rejected, TicketError, TicketOk, Tickets
from tepat.ports.try_again import TryAgain


def verdict_of(answer: object) -> Verdict:
    """The one place that decides which answers count as a provider-side failure:
    :class:`TryAgain`, *except* when ``throttled`` (a 429 is the provider working as
    designed). An acceptance, a recipient's refusal and a :class:`Rejected` request say
    the provider is up (a breaker can fix neither a recipient nor a configuration);
    :class:`Withheld` (nothing went out) says nothing.
    """
    match answer:
        case TryAgain(throttled=False):
            return Verdict.DOWN
        case Tickets() | TicketOk() | TicketError() | Rejected():
            return Verdict.UP
        case Accepted() | Delivered() | Refused():
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
