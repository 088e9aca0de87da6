"""Handle one due batch: claim, re-check, send through the push provider, record.

The order matters for "exactly once in effect": **claim** in the store (pending ->
sending, atomic: a repeated or concurrent delivery of the batch claims nothing and is
simply acked); **decide** against the current state (docs/PRINCIPLES.md §1 principle 3);
**send** in provider-sized chunks and **record** each message's answer as every
channel's is (:mod:`tepat.services.sending.recording`); **ack** the broker delivery only
after every claimed message was recorded.

The one duplicate window (docs/PRINCIPLES.md §9) is the provider boundary: a process
that dies after the provider accepted a request and before its record leaves its
messages ``sending``, and the sweeper re-drives them after the lease; a batch claimed
but still waiting to be sent keeps its lease (:mod:`tepat.services.sending.lease`); a
request whose answer was lost after it went out is "maybe sent", and the category's
``maybe_sent`` policy retries it or closes it as ``failed`` (``outcome_unknown``).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import structlog

from tepat import metrics, tracing
from tepat.clock import Clock
from tepat.domain.batches import Batch
from tepat.domain.categories import Categories, QuietPolicy
from tepat.domain.models import Device, Message, MessageStatus, Reminder, SkipReason, Ticket, User
from tepat.domain.planning import intended_on
from tepat.domain.queues import CRITICAL, PUSH
from tepat.domain.retry import RetryPolicy
from tepat.domain.sendcheck import Defer, Missed, Send, Skip, Supersede, decide
from tepat.ports.channel import Accepted, ChannelOutcome, Refused
from tepat.ports.push import (
    PushProvider,
    PushRequest,
    Rejected,
    TicketError,
    TicketOk,
    TicketOutcome,
)
from tepat.ports.repositories.messages import StatusChange
from tepat.ports.try_again import TryAgain
from tepat.services.device_health import device_failed
from tepat.services.outbox import Outbox
from tepat.services.sending.channel_sender import ChannelSender, gather_all
from tepat.services.sending.lease import ClaimsInHand, LeaseLapsed
from tepat.services.sending.push_batcher import Outcome, PushBatcher
from tepat.services.sending.recording import Answer, OutcomeRecorder
from tepat.services.sending.records import DispatchRecords

log = structlog.get_logger("tepat.dispatcher")

# Batches fire up to ~1 s early on ActiveMQ (its scheduler rounds to 500 ms and
# a batch covers a whole second); items due later than this belong to a later batch.
BATCH_SPAN = timedelta(seconds=1)


@dataclass(frozen=True)
class _Recipients:
    users: dict[str, User]
    prefs: dict[str, dict[str, bool]]
    devices: dict[str, list[Device]]
    reminders: dict[str, list[Reminder]]


class _Once:
    """``before_send`` awaited once per batch: its later instants already had their turn."""

    def __init__(self, before_send: Callable[[], Awaitable[None]] | None) -> None:
        self._before_send = before_send

    async def __call__(self) -> None:
        before_send, self._before_send = self._before_send, None
        if before_send is not None:
            await before_send()


@dataclass
class _Outgoing:
    message: Message
    devices: list[Device]
    outcomes: list[TicketOutcome | TryAgain | Rejected] = field(default_factory=list)


class Dispatcher:
    def __init__(
        self,
        store: DispatchRecords,
        push: PushProvider,
        outbox: Outbox,
        categories: Categories,
        clock: Clock,
        retry: RetryPolicy | None = None,
        device_max_failures: int = 3,
        rng: random.Random | None = None,
        batcher: PushBatcher | None = None,
        channels: ChannelSender | None = None,
        claims: ClaimsInHand | None = None,
    ) -> None:
        self._store = store
        # The batches claimed and not yet recorded, whose lease the consumer keeps.
        self.claims = claims if claims is not None else ClaimsInHand(store, clock)
        self._push = push
        self._outbox = outbox
        self._batcher = batcher or PushBatcher(push, clock, unsendable=self.claims.unsendable)
        # A provider with a rate limiter asks the same after its wait (Expo's adapter).
        set_send_gate = getattr(push, "set_send_gate", None)
        if set_send_gate is not None:
            set_send_gate(self.claims.unsendable)
        self._categories = categories
        self._clock = clock
        self._retry = retry or RetryPolicy()
        self._device_max_failures = device_max_failures
        # Every push answer is recorded as every other channel's (sending/recording.py).
        self.recorder = OutcomeRecorder(
            store, categories, clock, retry=self._retry, flush=outbox.flush_quietly, rng=rng
        )
        # Every channel but push (inbox, email, SMS, webhooks): claimed here, sent there.
        self.channels = channels or ChannelSender(
            store,
            categories,
            clock,
            {},
            retry=self._retry,
            defer=self.defer,
            flush=outbox.flush_quietly,
            recorder=self.recorder,
            unsendable=self.claims.unsendable,
        )

    def abandon_sends(self) -> None:
        """A hard stop: send nothing more (see :meth:`PushBatcher.abandon`)."""
        self._batcher.abandon()

    async def handle(
        self, batch: Batch, before_send: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Process one batch; returns once every message it claimed is recorded.

        A batch may arrive before its instant (published with a lead on ActiveMQ):
        it is held here, on the clock, and nothing is claimed or sent before the
        instant. While it waits, who it goes to is read (one gathered read), so at
        the instant only the claim, the decision and the send remain.
        ``before_send`` is awaited before its requests go out (the consumer's
        priority order between batches).
        """
        now = self._clock.now()
        turn = _Once(before_send)
        if batch.due + BATCH_SPAN <= now:
            # Its whole second has passed (a backlog): every item still meant for it
            # is due, so one claim, bounded like the candidates below, replaces the
            # read. A message moved since (retried, deferred) stays for its new batch.
            await self._claim_and_send(batch.ids, now, None, turn, batch.due + BATCH_SPAN)
            return
        early = batch.due > now
        # A message moved since this batch was published (retried, deferred) waits
        # for the batch of its new instant.
        candidates = [
            m
            for m in await self._store.get_messages(batch.ids)
            if m.status is MessageStatus.PENDING and m.due < batch.due + BATCH_SPAN
        ]
        if not candidates:
            return
        recipients = None
        if early:
            recipients = await self._recipients(sorted({m.user_id for m in candidates}))
        # A batch covers a whole second: each item is held until its own instant within
        # it (one due at .0 must not wait for one due at .5); what is due by then goes
        # together, so items already due are one claim and one send.
        waiting = sorted(candidates, key=lambda m: m.due)
        while waiting:
            await self._clock.sleep_until(waiting[0].due)
            now = self._clock.now()
            due = [m for m in waiting if m.due <= now]
            waiting = waiting[len(due) :]
            await self._claim_and_send([m.id for m in due], now, recipients, turn)
            recipients = None  # read ahead for the first instant only: later ones read afresh

    async def _claim_and_send(
        self,
        ids: Sequence[str],
        now: datetime,
        recipients: _Recipients | None,
        turn: _Once,
        due_before: datetime | None = None,
    ) -> None:
        with tracing.span("claim", messages=len(ids)):
            claimed = await self._store.claim(ids, now, due_before=due_before)
        if claimed:
            with self.claims.held(claimed), tracing.span("send", messages=len(claimed)):
                await self.process_claimed(claimed, recipients, turn)

    async def _recipients(self, user_ids: list[str]) -> _Recipients:
        """Users, preferences, active devices and reminders of ``user_ids``: the four
        reads are issued together (one trip through the store's queue)."""
        users, prefs, devices, reminders = await asyncio.gather(
            self._store.get_users(user_ids),
            self._store.preferences_for_users(user_ids),
            self._store.active_devices(user_ids),
            self._store.reminders_for_users(user_ids),
        )
        return _Recipients(users, prefs, devices, reminders)

    async def process_claimed(
        self,
        claimed: Sequence[Message],
        recipients: _Recipients | None = None,
        before_send: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Decide and send ``claimed``; ``recipients`` read ahead (covering every
        claimed message's user) saves the read."""
        if recipients is None:
            recipients = await self._recipients(sorted({m.user_id for m in claimed}))
        others = [m for m in claimed if m.channel != PUSH]
        if others:
            # The other channels go their own way (their own providers and limits); the
            # turn is shared, so a batch's requests still leave in the consumer's order.
            claimed = [m for m in claimed if m.channel == PUSH]
            if before_send is not None:
                await before_send()
            await gather_all(
                self.channels.process(others, recipients.users, recipients.prefs),
                self.process_claimed(claimed, recipients) if claimed else _none(),
            )
            return
        users, prefs, devices, reminders = (
            recipients.users,
            recipients.prefs,
            recipients.devices,
            recipients.reminders,
        )
        now = self._clock.now()
        outgoing: list[_Outgoing] = []
        closed: list[StatusChange] = []
        superseded: list[tuple[Message, Message | None]] = []
        deferred: list[tuple[Message, datetime]] = []
        for m in claimed:
            targets = [
                d
                for d in devices.get(m.user_id, [])
                if m.device_id is None or d.device_id == m.device_id
            ]
            reminder = _find_reminder(reminders.get(m.user_id, []), m.reminder_id)
            policy = self._categories.get(m.category)
            if m.priority == CRITICAL:
                # A critical event's message was placed ignoring quiet hours, and its
                # other channels send through them (channel_sender): so does push.
                policy = replace(policy, quiet_hours=QuietPolicy.BYPASS)
            decision = decide(
                m,
                users.get(m.user_id),
                reminder,
                prefs.get(m.user_id, {}),
                len(targets),
                policy,
                now,
            )
            match decision:
                case Send():
                    outgoing.append(_Outgoing(m, targets))
                case Skip(reason):
                    closed.append(StatusChange(m.id, MessageStatus.SKIPPED, reason=reason.value))
                case Supersede(replacement):
                    superseded.append((m, replacement))
                case Missed(late):
                    closed.append(StatusChange(m.id, MessageStatus.MISSED, f"late by {late:.0f}s"))
                case Defer(until):
                    deferred.append((m, until))
        if outgoing:
            # Sent first: what is not sent is recorded while the requests are out.
            if before_send is not None:
                await before_send()
            sending = asyncio.ensure_future(self._send(outgoing))
        try:
            await self._close_unsent(closed, deferred, superseded, users, reminders, now)
        finally:
            if outgoing:
                await sending

    async def _close_unsent(
        self,
        closed: list[StatusChange],
        deferred: list[tuple[Message, datetime]],
        superseded: list[tuple[Message, Message | None]],
        users: dict[str, User],
        reminders: dict[str, list[Reminder]],
        now: datetime,
    ) -> None:
        await self._store.transition_many(closed, now, expect=[MessageStatus.SENDING])
        for m, until in deferred:
            await self.defer(m, until)
        if deferred:
            await self._outbox.flush_quietly()
        if superseded:
            await self._supersede(superseded, users, reminders)

    async def _supersede(
        self,
        superseded: list[tuple[Message, Message | None]],
        users: dict[str, User],
        reminders: dict[str, list[Reminder]],
    ) -> None:
        """Close messages their reminder no longer intends, and plan what it intends now.

        The live key is released in the same write, so the replacement (what the
        reminder intends for the same local date, if it is still ahead) can take
        it: a re-plan that could not cancel a claimed message loses nothing.
        """
        now = self._clock.now()
        replacements: list[Message] = []
        for m, replacement in superseded:
            closed = await self._store.transition(
                m.id,
                MessageStatus.SKIPPED,
                now,
                expect=[MessageStatus.SENDING],
                reason=SkipReason.SUPERSEDED.value,
                release_live_key=True,
            )
            reminder = _find_reminder(reminders.get(m.user_id, []), m.reminder_id)
            user = users.get(m.user_id)
            if not closed or replacement is None or reminder is None or user is None:
                continue
            if replacement.local_date is None:
                continue
            # Planned again under the reminder's own category policy (it may have moved).
            fresh = intended_on(user, reminder, self._categories, replacement.local_date, now)
            if fresh is not None:
                replacements.append(fresh)
        if replacements:
            await self._store.insert_messages(replacements)
            await self._outbox.flush_quietly()

    async def _send(self, outgoing: list[_Outgoing]) -> None:
        """Send every (message, device) request through the shared batcher, and record
        each message as soon as all of its requests are answered: the window in which
        a crash could make the sweeper send it again stays one request long."""
        pairs = [(o, d) for o in outgoing for d in o.devices]
        futures = self._batcher.submit([_request(o.message, d) for o, d in pairs])
        pending: dict[asyncio.Future[Outcome], tuple[_Outgoing, Device]] = dict(
            zip(futures, pairs, strict=True)
        )
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            tickets: list[Ticket] = []
            answered: dict[int, _Outgoing] = {}
            for fut in done:
                o, device = pending.pop(fut)
                if fut.cancelled():
                    # Its request was abandoned (a hard stop): fail the batch like any
                    # other send error; the broker redelivers, the lease re-drives.
                    raise ConnectionAbortedError("push request abandoned")
                outcome = fut.result()  # a send that raised fails the batch: nack, lease
                if not isinstance(outcome, LeaseLapsed):
                    # One request not sent (its lease ran out) leaves the message never
                    # fully answered: not recorded, left `sending` for the sweeper.
                    o.outcomes.append(outcome)
                if isinstance(outcome, TicketOk):
                    tickets.append(_ticket(o.message, device, outcome, self._clock.now()))
                elif isinstance(outcome, TicketError):
                    metrics.count_provider_error(PUSH, outcome)
                    await device_failed(self._store, device, outcome, self._device_max_failures)
                if len(o.outcomes) == len(o.devices):
                    answered[id(o)] = o
            await self._record(list(answered.values()))
            await self._keep_tickets(tickets)

    async def _keep_tickets(self, tickets: list[Ticket]) -> None:
        """Store tickets for the receipt poller. The sends are already recorded, so a
        failure here costs receipts (the messages stay ``sent``), never a second send."""
        if not tickets:
            return
        try:
            await self._store.add_tickets(tickets)
        except Exception:
            log.exception(
                "could not store tickets; their receipts will not be polled", count=len(tickets)
            )

    async def _record(self, answered: list[_Outgoing]) -> None:
        """Record the outcome of messages whose every request was answered: a message
        is one answer, whatever its devices said (:func:`answer_of`), recorded as every
        channel's answers are (:class:`OutcomeRecorder`)."""
        answers = [Answer(o.message, answer_of(o.outcomes)) for o in answered]
        await self.recorder.record(PUSH, answers)

    async def defer(self, m: Message, until: datetime) -> None:
        """Back to ``pending`` at the end of quiet hours (the outbox publishes it).

        The nominal instant, and so the pending slot, stays: deferring several
        messages to one end of quiet hours collides with nothing. Should the store
        still refuse, the message ends ``failed`` with the reason, never left in
        ``sending`` for the sweeper to re-drive into the same refusal.
        """
        now = self._clock.now()
        error = "the store refused the deferral"
        try:
            if await self._store.transition(
                m.id,
                MessageStatus.PENDING,
                now,
                expect=[MessageStatus.SENDING],
                reason="deferred:quiet_hours",
                scheduled_at=until,
                due_at=until,
            ):
                return
        except Exception as e:
            log.exception("deferral refused by the store", message_id=m.id)
            error = f"{type(e).__name__}: {e}"
        await self._store.transition(
            m.id,
            MessageStatus.FAILED,
            now,
            expect=[MessageStatus.SENDING],
            reason="deferral_failed",
            last_error=error,
        )


async def _none() -> None:
    return None


def _find_reminder(reminders: list[Reminder], reminder_id: str | None) -> Reminder | None:
    if reminder_id is None:
        return None
    return next((r for r in reminders if r.reminder_id == reminder_id), None)


def _ticket(m: Message, device: Device, ok: TicketOk, now: datetime) -> Ticket:
    return Ticket(
        ticket_id=ok.ticket_id,
        message_id=m.id,
        user_id=m.user_id,
        device_id=device.device_id,
        push_token=device.push_token,
        sent_at=now,
    )


def _request(m: Message, device: Device) -> PushRequest:
    return PushRequest(
        message_id=m.id,
        push_token=device.push_token,
        title=m.title,
        body=m.body,
        data={**m.data, "tepat_message_id": m.id, "category": m.category},
        category=m.category,
    )


def _describe(outcomes: Sequence[TicketOutcome | TryAgain | Rejected]) -> str:
    parts = []
    for x in outcomes:
        if isinstance(x, TicketError):
            parts.append(f"{x.code}: {x.message}")
        elif isinstance(x, TryAgain | Rejected):
            parts.append(x.reason)
    return "; ".join(parts) or "no device accepted the message"


def answer_of(outcomes: Sequence[TicketOutcome | TryAgain | Rejected]) -> ChannelOutcome:
    """One message's answer from its devices' outcomes: accepted if any device's
    notification was; else worth another try if any failure was temporary (maybe sent if
    any request may have gone through, never before the longest Retry-After); else refused."""
    ok = [x for x in outcomes if isinstance(x, TicketOk)]
    if ok:
        return Accepted(ok[0].ticket_id)
    error = _describe(outcomes)
    retryable = [
        x
        for x in outcomes
        if isinstance(x, TryAgain) or (isinstance(x, TicketError) and not x.permanent)
    ]
    if not retryable:
        return Refused(error)
    return TryAgain(
        error,
        retry_after=max((x.retry_after or 0.0) for x in retryable),
        maybe_sent=any(isinstance(x, TryAgain) and x.maybe_sent for x in outcomes),
        server_error=any(isinstance(x, TryAgain) and x.server_error for x in outcomes),
    )
