"""Send claimed messages: the one send path of every channel (tepat/ports/channel.py).

The dispatcher claims (``pending -> sending``, atomic) and hands the claimed messages
here. Per message: **decide** against the current state (``tepat/domain/sendcheck.py``,
docs/PRINCIPLES.md §1 principle 3; webhook deliveries skip it: they belong to an app,
not a user); resolve the **target** now (a contact changed or suppressed since the
message was created wins; push's: the user's active devices); **send** through the
channel's adapter in chunks of its ``max_batch``, each adapter asking an item's
``still_sendable`` right before its request (a message whose lease ran out while it
waited is left ``sending`` for the sweeper); **record** each chunk's answers through the
one recorder (:mod:`tepat.services.sending.recording`). What is not sent (skipped,
missed, deferred, superseded) is recorded while the requests are out.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Protocol

import structlog

from tepat import metrics
from tepat.clock import Clock
from tepat.domain.categories import Categories, QuietPolicy
from tepat.domain.models import Device, Message, MessageStatus, Reminder, SkipReason, User
from tepat.domain.planning import intended_on
from tepat.domain.queues import CRITICAL, PUSH, WEBHOOK
from tepat.domain.retry import RetryPolicy
from tepat.domain.sendcheck import Decision, Defer, Missed, Send, Skip, Supersede, decide
from tepat.ports.channel import Channel, Outgoing, Refused, Withheld
from tepat.ports.repositories.devices import DeviceRepository
from tepat.ports.repositories.messages import StatusChange
from tepat.ports.repositories.preferences import PreferenceRepository
from tepat.ports.repositories.reminders import ReminderRepository
from tepat.ports.repositories.users import UserRepository
from tepat.ports.try_again import TryAgain
from tepat.services.sending.lease import SendGate
from tepat.services.sending.recording import Answer, OutcomeRecorder, OutcomeRecords
from tepat.services.targets import resolve_targets

log = structlog.get_logger("tepat.channels")

INBOX = "inbox"
#: ``status_reason`` of a message whose channel has no adapter in this process.
CHANNEL_UNAVAILABLE = "channel_unavailable"

# Builds the one-click unsubscribe URL of a (user, category, channel); None: no link.
UnsubscribeUrl = Callable[[str, str, str], str]
BeforeSend = Callable[[], Awaitable[None]]


async def gather_all(*aws: Awaitable[None]) -> None:
    """Run ``aws`` together and wait for every one of them, then raise the first error.

    ``asyncio.gather`` raises as soon as one fails and leaves the others running
    unawaited: a channel whose adapter failed would hand the batch back (nack) while
    another channel's sends of the same batch were still out, unrecorded when the
    batch came back. Cancelling this cancels them all (a hard stop).

    One (a batch of one channel, a chunk) is awaited as it is: no task of its own, and
    no turn of the event loop to start it, at the instant the batch is sent."""
    if len(aws) == 1:
        await aws[0]
        return
    results = await asyncio.gather(*aws, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


def call_each(channels: Iterable[object], method: str, *args: object) -> None:
    """``method(*args)`` of each of ``channels`` that has it (not every adapter has a rate
    or holds requests)."""
    for channel in channels:
        call = getattr(channel, method, None)
        if call is not None:
            call(*args)


class SendRecords(
    OutcomeRecords,
    UserRepository,
    DeviceRepository,
    ReminderRepository,
    PreferenceRepository,
    Protocol,
): ...


@dataclass(frozen=True)
class Recipients:
    users: dict[str, User]
    prefs: dict[str, dict[str, bool]]
    devices: dict[str, list[Device]]
    reminders: dict[str, list[Reminder]]


@dataclass
class _Unsent:
    closed: list[StatusChange]
    deferred: list[tuple[Message, datetime]]
    superseded: list[tuple[Message, Message | None]]


@dataclass(frozen=True)
class Prepared:
    """One channel's share of claimed messages, decided: what goes out, and what does not."""

    adapter: Channel | None
    outgoing: list[Outgoing]
    unsent: _Unsent
    recipients: Recipients
    now: datetime  # the instant it was decided for


class ChannelSender:
    def __init__(
        self,
        store: SendRecords,
        categories: Categories,
        clock: Clock,
        channels: Mapping[str, Channel],
        *,
        retry: RetryPolicy,
        retry_for: Mapping[str, RetryPolicy] | None = None,
        flush: Callable[[], Awaitable[None]],
        unsubscribe_url: UnsubscribeUrl | None = None,
        require_verified: bool = False,
        rng: random.Random | None = None,
        may_send: SendGate = lambda message_id, channel: True,
    ) -> None:
        self._store = store
        self._may_send = may_send
        self._categories = categories
        self._clock = clock
        self._channels = dict(channels)
        self.recorder = OutcomeRecorder(
            store, categories, clock, retry=retry, retry_for=retry_for, flush=flush, rng=rng
        )
        self._flush = flush
        self._unsubscribe_url = unsubscribe_url
        self._require_verified = require_verified

    @property
    def channels(self) -> list[str]:
        return list(self._channels)

    def set_rate_share(self, share: float) -> None:
        """Each provider's configured rate is the deployment's: a process sends its share
        (the channels whose adapter has a rate: push, e-mail, SMS)."""
        call_each(self._channels.values(), "set_rate_share", share)

    def abandon(self) -> None:
        """A hard stop: send nothing more (an adapter that holds requests drops them)."""
        call_each(self._channels.values(), "abandon")

    async def close(self) -> None:
        for channel in self._channels.values():
            try:
                await channel.close()
            except Exception:
                log.exception("closing a channel failed", channel=channel.name)

    async def recipients(self, user_ids: list[str]) -> Recipients:
        """Users, preferences, active devices and reminders of ``user_ids``: the four
        reads are issued together (one trip through the store's queue)."""
        users, prefs, devices, reminders = await asyncio.gather(
            self._store.get_users(user_ids),
            self._store.preferences_for_users(user_ids),
            self._store.active_devices(user_ids),
            self._store.reminders_for_users(user_ids),
        )
        return Recipients(users, prefs, devices, reminders)

    async def process(
        self,
        claimed: Sequence[Message],
        recipients: Recipients | None = None,
        before_send: BeforeSend | None = None,
    ) -> None:
        """Decide, send and record ``claimed`` now; ``recipients`` read ahead (covering
        every claimed message's user) saves the read. ``before_send`` (the consumer's
        order between batches) is awaited before each channel's requests go out."""
        await self.fire(await self.prepare(claimed, recipients, self._clock.now()), before_send)

    async def prepare(
        self, claimed: Sequence[Message], recipients: Recipients | None, at: datetime
    ) -> list[Prepared]:
        """Decide what of ``claimed`` goes out at ``at`` and to whom, per channel: done
        before the instant when the messages were claimed ahead, so that at the instant
        only :meth:`fire` is left."""
        if recipients is None:
            recipients = await self.recipients(sorted({m.user_id for m in claimed}))
        by_channel: dict[str, list[Message]] = {}
        for m in claimed:
            by_channel.setdefault(m.channel, []).append(m)
        return [
            await self._prepare_channel(channel, ms, recipients, at)
            for channel, ms in by_channel.items()
        ]

    async def fire(self, prepared: Sequence[Prepared], before_send: BeforeSend | None) -> None:
        """Send what :meth:`prepare` decided and record it. Each channel goes its own way
        (its own provider and limits)."""
        await gather_all(*(self._fire_channel(p, before_send) for p in prepared))

    async def _prepare_channel(
        self, channel: str, claimed: list[Message], r: Recipients, now: datetime
    ) -> Prepared:
        adapter = self._channels.get(channel)
        unsent = _Unsent([], [], [])
        sendable: list[Message] = []
        for m in claimed:
            if adapter is None:
                # Routed to a queue whose channel this process cannot send on (a
                # configuration changed under it): said plainly rather than retried forever.
                unsent.closed.append(StatusChange(m.id, MessageStatus.FAILED, CHANNEL_UNAVAILABLE))
                continue
            if channel == WEBHOOK:
                sendable.append(m)
                continue
            match self._decide(m, r, now):
                case Send():
                    sendable.append(m)
                case Skip(reason):
                    unsent.closed.append(StatusChange(m.id, MessageStatus.SKIPPED, reason.value))
                case Missed(late):
                    unsent.closed.append(
                        StatusChange(m.id, MessageStatus.MISSED, f"late by {late:.0f}s")
                    )
                case Defer(until):
                    unsent.deferred.append((m, until))
                case Supersede(replacement):
                    unsent.superseded.append((m, replacement))
        outgoing = await self._outgoing(channel, sendable, r, unsent.closed)
        return Prepared(adapter, outgoing, unsent, r, now)

    async def _fire_channel(self, p: Prepared, before_send: BeforeSend | None) -> None:
        unsent = p.unsent
        # What is not sent is recorded while the requests wait for their turn and go out.
        closing = None
        if unsent.closed or unsent.deferred or unsent.superseded:
            closing = asyncio.ensure_future(self._close_unsent(unsent, p.recipients, p.now))
        try:
            if p.outgoing and p.adapter is not None:
                if before_send is not None:
                    await before_send()
                await self._send(p.adapter, p.outgoing)
        finally:
            if closing is not None:
                await closing

    def _decide(self, m: Message, r: Recipients, now: datetime) -> Decision:
        policy = self._categories.get(m.category)
        if m.priority == CRITICAL:
            # OTPs and safety alerts are never held by quiet hours: a critical event's
            # message was placed ignoring them, and it is sent through them on every channel.
            policy = replace(policy, quiet_hours=QuietPolicy.BYPASS)
        reminder = _reminder_of(m, r)
        # A target other than push's is resolved once the message is to be sent.
        targets = len(_devices_of(m, r)) if m.channel == PUSH else 1
        user = r.users.get(m.user_id)
        return decide(m, user, reminder, r.prefs.get(m.user_id, {}), targets, policy, now)

    async def _outgoing(
        self, channel: str, sendable: list[Message], r: Recipients, closed: list[StatusChange]
    ) -> list[Outgoing]:
        """What goes out of ``sendable``; a message without a target now goes to
        ``closed``, skipped with the reason."""
        if not sendable:
            return []
        targets = await self._targets(channel, sendable)
        outgoing: list[Outgoing] = []
        for m in sendable:
            target = targets[m.id]
            if isinstance(target, SkipReason):
                closed.append(StatusChange(m.id, MessageStatus.SKIPPED, reason=target.value))
                continue
            devices = tuple(_devices_of(m, r)) if channel == PUSH else ()
            # The adapter's last check before its request, after its own waits.
            gate = partial(self._may_send, m.id, channel)
            outgoing.append(Outgoing(m, target, self._unsubscribe_for(m), devices, gate))
        return outgoing

    async def _send(self, adapter: Channel, outgoing: list[Outgoing]) -> None:
        size = max(1, adapter.max_batch)
        chunks = [outgoing[start : start + size] for start in range(0, len(outgoing), size)]
        if adapter.name == PUSH:
            # Together: push's adapter bounds the requests in flight and coalesces them
            # with every other batch's; each chunk is recorded as soon as it is answered.
            await gather_all(*(self._send_chunk(adapter, chunk) for chunk in chunks))
            return
        for chunk in chunks:
            await self._send_chunk(adapter, chunk)

    async def _send_chunk(self, adapter: Channel, chunk: list[Outgoing]) -> None:
        channel = adapter.name
        outcomes = await adapter.send(chunk)
        if len(outcomes) != len(chunk):
            raise RuntimeError(
                f"{channel} adapter answered {len(outcomes)} outcomes for {len(chunk)} items"
            )
        answers = []
        for item, outcome in zip(chunk, outcomes, strict=True):
            if isinstance(outcome, Withheld):
                continue  # left sending for the sweeper, counted by the gate
            # Push counts its errors where they arise: per device, per whole request.
            if isinstance(outcome, Refused | TryAgain) and channel != PUSH:
                metrics.count_provider_error(channel, outcome)
            answers.append(Answer(item.message, outcome, item.target))
        await self.recorder.record(channel, answers)

    async def _targets(self, channel: str, messages: list[Message]) -> dict[str, str]:
        """Each message's target, or the :class:`SkipReason` it has none for."""
        if channel in (INBOX, PUSH):
            return {m.id: m.user_id for m in messages}
        if channel == WEBHOOK:
            return {m.id: str(m.content.get("subscription_id", "")) for m in messages}
        resolved = await resolve_targets(
            self._store,
            channel,
            sorted({m.user_id for m in messages}),
            require_verified=self._require_verified,
        )
        return {m.id: resolved[m.user_id] for m in messages}

    def _unsubscribe_for(self, m: Message) -> str | None:
        if self._unsubscribe_url is None or m.priority == CRITICAL or m.channel in (WEBHOOK, PUSH):
            return None
        return self._unsubscribe_url(m.user_id, m.category, m.channel)

    async def _close_unsent(self, unsent: _Unsent, r: Recipients, now: datetime) -> None:
        await self._store.transition_many(unsent.closed, now, expect=[MessageStatus.SENDING])
        for m, until in unsent.deferred:
            await self._defer(m, until)
        if unsent.deferred:
            await self._flush()
        if unsent.superseded:
            await self._supersede(unsent.superseded, r)

    async def _supersede(
        self, superseded: list[tuple[Message, Message | None]], r: Recipients
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
            user = r.users.get(m.user_id)
            day = None if replacement is None else replacement.local_date
            if not closed or user is None or day is None:
                continue
            # Planned again under the reminder's own category policy (it may have moved).
            fresh = intended_on(user, _reminder_of(m, r), self._categories, day, now)
            if fresh is not None:
                replacements.append(fresh)
        if replacements:
            await self._store.insert_messages(replacements)
            await self._flush()

    async def _defer(self, m: Message, until: datetime) -> None:
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
        failed = StatusChange(m.id, MessageStatus.FAILED, "deferral_failed", last_error=error)
        await self._store.transition_many([failed], now, expect=[MessageStatus.SENDING])


def _devices_of(m: Message, r: Recipients) -> list[Device]:
    """Push's targets: the user's active devices (the list read, not to be changed), or
    the one the message names."""
    devices = r.devices.get(m.user_id, [])
    if m.device_id is None:
        return devices
    return [d for d in devices if d.device_id == m.device_id]


def _reminder_of(m: Message, r: Recipients) -> Reminder | None:
    if m.reminder_id is None:  # a one-off
        return None
    reminders = r.reminders.get(m.user_id, [])
    return next((x for x in reminders if x.reminder_id == m.reminder_id), None)
