"""Record what providers answered, for every channel, in one write order.

What each answer makes of the message is decided by the pure rules of
:mod:`tepat.domain.outcomes`; this service writes the results:

1. **terminal outcomes first**, in one write per kind: ``sent``/``delivered`` (also over
   ``pending``: a late answer still counts) then ``failed``. They close the duplicate
   window, so nothing may come before them;
2. what the answers say beside: the suppressions of dead targets a refusal named, the
   tickets of an accepted push (a failure costs receipts, never a second send);
3. **retries last**, back to ``pending`` with the outbox mark, then the outbox flush. A
   failure here costs only a later retry (the sweeper's lease re-drives the message),
   never a second send of a message the provider accepted.

Each answer written gets one INFO line, ``send recorded`` (:func:`log_sends`): the one
line that says what became of a send, whatever its channel.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import structlog

from tepat import metrics
from tepat.clock import Clock
from tepat.domain import outcomes
from tepat.domain.categories import Categories, MaybeSentPolicy
from tepat.domain.contacts import SuppressionReason
from tepat.domain.models import Message, MessageStatus
from tepat.domain.outcomes import Next, Stage
from tepat.domain.retry import RetryPolicy
from tepat.ports.channel import Accepted, ChannelOutcome, Delivered, Refused
from tepat.ports.repositories.contacts import ContactRepository
from tepat.ports.repositories.messages import MessageRepository, StatusChange
from tepat.ports.repositories.tickets import TicketRepository
from tepat.ports.try_again import TryAgain
from tepat.services.sending.message_log import log_lines, message_line

log = structlog.get_logger("tepat.recording")
SEND_RECORDED = "send recorded"


class OutcomeRecords(MessageRepository, ContactRepository, TicketRepository, Protocol): ...


@dataclass(frozen=True, slots=True)
class Answer:
    """A provider's answer for one message; ``target`` is where a refusal that names a
    dead target (:attr:`Refused.suppress`) records its suppression."""

    message: Message
    outcome: ChannelOutcome
    target: str = ""


class OutcomeRecorder:
    def __init__(
        self,
        store: OutcomeRecords,
        categories: Categories,
        clock: Clock,
        *,
        retry: RetryPolicy,
        retry_for: Mapping[str, RetryPolicy] | None = None,
        flush: Callable[[], Awaitable[None]],
        rng: random.Random | None = None,
    ) -> None:
        self._store = store
        self._categories = categories
        self._clock = clock
        self._retry = retry
        self._retry_for = dict(retry_for or {})
        self._flush = flush
        self._rng = rng or random.Random()

    def seed(self, rng: random.Random) -> None:
        """Draw the backoff's jitter from ``rng`` (a seeded one replays a run exactly)."""
        self._rng = rng

    def next_status(self, channel: str, answer: Answer, now: datetime) -> Next:
        """What ``answer`` makes of its message on ``channel``."""
        m = answer.message
        match answer.outcome:
            case Accepted(provider_id):
                return outcomes.after_accepted(provider_id)
            case Delivered():
                return outcomes.after_delivered()
            case Refused(reason):
                return outcomes.after_refused(reason)
            case TryAgain() as again:
                maybe_sent = outcomes.maybe_sent_matters(channel, again.maybe_sent)
                policy = self._categories.get(m.category).maybe_sent
                if maybe_sent:
                    closed = policy is MaybeSentPolicy.CLOSE
                    metrics.count_maybe_sent(m.category, "closed" if closed else "retried")
                    if closed:
                        # Not silent: the message reads failed/outcome_unknown in the API
                        # and its webhooks, and this line says which one and why.
                        log.warning(
                            "closed as outcome_unknown: the provider may have it",
                            channel=channel,
                            message_id=m.id,
                            category=m.category,
                            error=again.reason,
                        )
                elif again.server_error:
                    metrics.count_maybe_sent(m.category, "retried_5xx")
                return outcomes.after_failure(
                    m,
                    again.reason,
                    policy=policy,
                    retry=self._retry_for.get(channel, self._retry).under(again.terms),
                    retry_after=again.retry_after,
                    maybe_sent=maybe_sent,
                    now=now,
                    rng=self._rng,
                    not_tried=again.not_tried,
                )

    async def record(self, channel: str, answers: Sequence[Answer]) -> None:
        """Write every answer of ``answers`` (all of ``channel``), terminal ones first."""
        now = self._clock.now()
        by_stage: dict[Stage, list[tuple[Message, Next]]] = {stage: [] for stage in Stage}
        suppress: list[tuple[str, SuppressionReason]] = []
        # The sends that went through, counted per status made (one counter update for a
        # whole chunk's), and how late each was, per category.
        went: dict[MessageStatus, tuple[Answer, Next, int]] = {}
        lateness: dict[str, list[float]] = {}
        for answer in answers:
            m, outcome = answer.message, answer.outcome
            next_ = self.next_status(channel, answer, now)
            by_stage[next_.stage].append((m, next_))
            # Every channel's answers pass here, so each is counted once, by channel.
            if isinstance(outcome, Accepted | Delivered):
                late = max(0.0, (now - m.scheduled_at).total_seconds())
                lateness.setdefault(m.category, []).append(late)
                _, _, n = went.get(next_.to, (answer, next_, 0))
                went[next_.to] = (answer, next_, n + 1)
                continue
            metrics.count_answer(channel, m.category, outcome, next_)
            if isinstance(outcome, Refused) and outcome.suppress is not None:
                suppress.append((answer.target, SuppressionReason(outcome.suppress)))
        for answer, next_, n in went.values():
            metrics.count_answer(channel, answer.message.category, answer.outcome, next_, n)
        for category, seconds in lateness.items():
            metrics.observe_lateness(channel, category, *seconds)
        for stage in (Stage.ACCEPTED, Stage.CLOSED):
            await self._write(channel, stage, by_stage[stage], now)
        for target, reason in suppress:
            try:
                await self._store.add_suppression(channel, target, reason, now, source=channel)
            except Exception:
                log.exception("could not record a suppression", channel=channel)
        tickets = [t for a in answers if isinstance(a.outcome, Accepted) for t in a.outcome.tickets]
        if tickets:
            try:
                await self._store.add_tickets(tickets)
            except Exception:
                log.exception(
                    "could not store tickets; their receipts will not be polled", count=len(tickets)
                )
        if not by_stage[Stage.RETRY]:
            return
        try:
            await self._write(channel, Stage.RETRY, by_stage[Stage.RETRY], now)
        except Exception:
            log.exception("could not record retries; the sweeper re-drives them after the lease")
            return
        await self._flush()

    async def _write(
        self, channel: str, stage: Stage, written: list[tuple[Message, Next]], now: datetime
    ) -> None:
        if not written:
            return
        changes = [_change(m, n) for m, n in written]
        expect = list(outcomes.expected_from(stage))
        applied = await self._store.transition_many(changes, now, expect=expect)
        log_sends(channel, written, applied, now)


def log_sends(
    channel: str, written: Sequence[tuple[Message, Next]], applied: int, now: datetime
) -> None:
    """One INFO line per answer of one write: the line an operator greps a message id for.

    ``outcome`` is the status the answer made (``retry`` for back to ``pending``);
    ``reason`` is the one the API shows (``outcome_unknown``, a refusal's code, "gave up
    after N attempts: ..."), else the provider's error. ``lateness_ms`` counts from
    ``scheduled_at``, as the lateness metric does, but signed: an early batch shows.
    The store says how many of a write it applied, not which: a write that changed none
    (every message had moved on, e.g. a second answer) logs nothing, and a partial one
    says so on each of its lines (``applied``).
    """
    if applied <= 0:
        return
    partial = None if applied >= len(written) else f"{applied} of {len(written)}"
    log_lines(
        log,
        SEND_RECORDED,
        [
            message_line(
                SEND_RECORDED,
                m.id,
                m.user_id,
                channel,
                m.trace_parent,
                category=m.category,
                attempt=m.attempts,
                lateness_ms=round((now - m.scheduled_at).total_seconds() * 1000),
                outcome="retry" if n.stage is Stage.RETRY else n.to.value,
                reason=n.reason or n.last_error,
                applied=partial,
            )
            for m, n in written
        ],
    )


def _change(m: Message, n: Next) -> StatusChange:
    return StatusChange(
        m.id, n.to, n.reason, n.ticket_id, n.last_error, due_at=n.due_at, attempts=n.attempts
    )
