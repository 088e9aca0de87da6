"""What a provider's answer makes of a message being sent: the exactly-once rules, one
set for every channel, pure (:mod:`tepat.services.sending.recording` writes the results
stage by stage). A temporary failure is the only hard case (:func:`after_failure`).
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from tepat.domain.categories import OUTCOME_UNKNOWN, MaybeSentPolicy
from tepat.domain.models import Message, MessageStatus
from tepat.domain.queues import WEBHOOK
from tepat.domain.retry import RetryPolicy


class Stage(enum.IntEnum):
    """When a result is written, in this order: what closes the duplicate window first,
    retries last (a failure to write them costs only a later retry, never a second send)."""

    ACCEPTED = 0  # sent, delivered
    CLOSED = 1  # failed
    RETRY = 2  # back to pending


@dataclass(frozen=True, slots=True)
class Next:
    """The status a message moves to after its answer, with what is recorded on it
    (``due_at``: back to ``pending``, marked for the outbox in the same write)."""

    to: MessageStatus
    reason: str | None = None
    last_error: str | None = None
    ticket_id: str | None = None
    due_at: datetime | None = None
    attempts: int | None = None  # set: the attempts the message has spent, as written

    @property
    def stage(self) -> Stage:
        if self.to is MessageStatus.PENDING:
            return Stage.RETRY
        if self.to in (MessageStatus.SENT, MessageStatus.DELIVERED):
            return Stage.ACCEPTED
        return Stage.CLOSED


def after_delivered() -> Next:
    return Next(MessageStatus.DELIVERED)


def after_accepted(provider_id: str | None) -> Next:
    return Next(MessageStatus.SENT, ticket_id=provider_id)


def after_refused(reason: str) -> Next:
    return Next(MessageStatus.FAILED, reason, last_error=reason)


def after_failure(
    message: Message,
    error: str,
    *,
    policy: MaybeSentPolicy,
    retry: RetryPolicy,
    retry_after: float | None,
    maybe_sent: bool,
    now: datetime,
    rng: random.Random,
    not_tried: bool = False,
) -> Next:
    """A temporary failure (``error``): close it, give up, or try again later. On
    ``maybe_sent`` the category's ``policy`` weighs a possible duplicate against a
    possibly missing notification; ``not_tried`` (the breaker was open) gives back the
    attempt the claim counted."""
    if maybe_sent and policy is MaybeSentPolicy.CLOSE:
        return Next(MessageStatus.FAILED, OUTCOME_UNKNOWN, last_error=error)
    spent = max(0, message.attempts - 1) if not_tried else message.attempts
    if retry.gives_up(spent, message.scheduled_at, now):
        reason = f"gave up after {spent} attempts: {error}"
        return Next(MessageStatus.FAILED, reason, last_error=error)
    delay = retry.delay(spent, retry_after, rng)
    return Next(
        MessageStatus.PENDING,
        last_error=error,
        due_at=now + timedelta(seconds=delay),
        attempts=spent if not_tried else None,
    )


def maybe_sent_matters(channel: str, maybe_sent: bool) -> bool:
    """Whether a maybe-sent answer is one (the category's policy applies): not for a
    webhook delivery, whose receiver dedupes on its id."""
    return maybe_sent and channel != WEBHOOK


def expected_from(stage: Stage) -> tuple[MessageStatus, ...]:
    """The statuses a message may be in for a result of ``stage`` to be written: a late
    acceptance is still the truth, even over the ``pending`` the sweeper put it back to
    when the lease ran out (recording it ``sent`` stops a second send); anything else
    only over the ``sending`` this process claimed."""
    if stage is Stage.ACCEPTED:
        return (MessageStatus.SENDING, MessageStatus.PENDING)
    return (MessageStatus.SENDING,)
