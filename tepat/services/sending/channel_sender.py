"""Send claimed messages of every channel but push: the one shared path for inbox, email,
SMS and webhook deliveries (tepat/ports/channel.py).

The dispatcher claims (the same atomic ``pending -> sending`` for every channel) and
hands the non-push messages here. Per message: **decide** with the push path's rules
(``tepat/domain/sendcheck.py``; webhook deliveries skip them: they belong to an app, not
a user); resolve the **target** now (a contact changed or suppressed since the message
was created wins); **send** through the channel's adapter in chunks of its
``max_batch``, but not the messages whose lease ran out while they waited (asked per
chunk, and by an adapter after its own waits: ``still_sendable``); those are left
``sending`` for the sweeper; **record** each chunk's answers through the one
recorder push uses too (:mod:`tepat.services.sending.recording`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

import structlog

from tepat import metrics
from tepat.clock import Clock
from tepat.domain.categories import Categories, QuietPolicy
from tepat.domain.models import Message, MessageStatus, User
from tepat.domain.preferences import allowed
from tepat.domain.queues import CRITICAL, WEBHOOK
from tepat.domain.retry import RetryPolicy
from tepat.domain.sendcheck import Defer, Missed, Send, Skip, Supersede, decide
from tepat.ports.channel import Channel, Outgoing, Refused, Withheld
from tepat.ports.push import SendGate
from tepat.ports.repositories.messages import StatusChange
from tepat.ports.try_again import TryAgain
from tepat.services.sending.recording import Answer, OutcomeRecorder
from tepat.services.sending.records import ChannelSendRecords
from tepat.services.targets import SKIP_REASONS, resolve_targets

log = structlog.get_logger("tepat.channels")

INBOX = "inbox"
#: ``status_reason`` of a message whose channel has no adapter in this process.
CHANNEL_UNAVAILABLE = "channel_unavailable"

# Builds the one-click unsubscribe URL of a (user, category, channel); None: no link.
UnsubscribeUrl = Callable[[str, str, str], str]
Defer_ = Callable[[Message, datetime], Awaitable[None]]


async def gather_all(*aws: Awaitable[None]) -> None:
    """Run ``aws`` together and wait for every one of them, then raise the first error.

    ``asyncio.gather`` raises as soon as one fails and leaves the others running
    unawaited: a channel whose adapter failed would hand the batch back (nack) while
    another channel's sends of the same batch were still out, unrecorded when the
    batch came back. Cancelling this cancels them all (a hard stop)."""
    results = await asyncio.gather(*aws, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


class ChannelSender:
    def __init__(
        self,
        store: ChannelSendRecords,
        categories: Categories,
        clock: Clock,
        channels: Mapping[str, Channel],
        *,
        retry: RetryPolicy,
        retry_for: Mapping[str, RetryPolicy] | None = None,
        defer: Defer_,
        flush: Callable[[], Awaitable[None]],
        unsubscribe_url: UnsubscribeUrl | None = None,
        require_verified: bool = False,
        rng: random.Random | None = None,
        recorder: OutcomeRecorder | None = None,
        unsendable: SendGate | None = None,
    ) -> None:
        self._store = store
        self._unsendable = unsendable
        self._categories = categories
        self._clock = clock
        self._channels = dict(channels)
        # What the providers answered is recorded as for push: one recorder, one order.
        self.recorder = recorder or OutcomeRecorder(
            store, categories, clock, retry=retry, retry_for=retry_for, flush=flush, rng=rng
        )
        self._defer = defer
        self._flush = flush
        self._unsubscribe_url = unsubscribe_url
        self._require_verified = require_verified

    @property
    def channels(self) -> list[str]:
        return list(self._channels)

    def set_rate_share(self, share: float) -> None:
        """Each provider's configured rate is the deployment's: a process sends its share
        (the channels whose adapter has a rate: e-mail, SMS)."""
        for channel in self._channels.values():
            set_share = getattr(channel, "set_rate_share", None)
            if set_share is not None:
                set_share(share)

    async def close(self) -> None:
        for channel in self._channels.values():
            try:
                await channel.close()
            except Exception:
                log.exception("closing a channel failed", channel=channel.name)

    async def process(
        self,
        claimed: Sequence[Message],
        users: Mapping[str, User],
        prefs: Mapping[str, Mapping[str, bool]],
        before_send: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        by_channel: dict[str, list[Message]] = {}
        for m in claimed:
            by_channel.setdefault(m.channel, []).append(m)
        await gather_all(
            *(
                self._process_channel(channel, ms, users, prefs, before_send)
                for channel, ms in by_channel.items()
            )
        )

    async def _process_channel(
        self,
        channel: str,
        claimed: list[Message],
        users: Mapping[str, User],
        prefs: Mapping[str, Mapping[str, bool]],
        before_send: Callable[[], Awaitable[None]] | None,
    ) -> None:
        now = self._clock.now()
        adapter = self._channels.get(channel)
        closed: list[StatusChange] = []
        deferred: list[tuple[Message, datetime]] = []
        sendable: list[Message] = []
        for m in claimed:
            if adapter is None:
                # Routed to a queue whose channel this process cannot send on (a
                # configuration changed under it): said plainly rather than retried forever.
                closed.append(StatusChange(m.id, MessageStatus.FAILED, CHANNEL_UNAVAILABLE))
                continue
            if channel == WEBHOOK:
                sendable.append(m)
                continue
            match self._decide(m, users.get(m.user_id), prefs.get(m.user_id, {}), now):
                case Send():
                    sendable.append(m)
                case Skip(reason):
                    closed.append(StatusChange(m.id, MessageStatus.SKIPPED, reason=reason.value))
                case Missed(late):
                    closed.append(StatusChange(m.id, MessageStatus.MISSED, f"late by {late:.0f}s"))
                case Defer(until):
                    deferred.append((m, until))
                case Supersede(_):  # only reminder messages are superseded; none come here
                    closed.append(StatusChange(m.id, MessageStatus.SKIPPED, "superseded"))
        outgoing: list[Outgoing] = []
        if sendable and adapter is not None:
            targets = await self._targets(channel, sendable)
            for m in sendable:
                target = targets.get(m.id)
                if target is None or target.startswith("skip:"):
                    why = (target or "skip:no_contact").removeprefix("skip:")
                    closed.append(StatusChange(m.id, MessageStatus.SKIPPED, reason=why))
                else:
                    outgoing.append(
                        Outgoing(
                            m,
                            target,
                            self._unsubscribe_for(m),
                            still_sendable=self._gate_for(m.id, channel),
                        )
                    )
        await self._store.transition_many(closed, now, expect=[MessageStatus.SENDING])
        for m, until in deferred:
            await self._defer(m, until)
        if deferred:
            await self._flush()
        if not outgoing or adapter is None:
            return
        if before_send is not None:
            await before_send()
        size = max(1, adapter.max_batch)
        for start in range(0, len(outgoing), size):
            chunk = outgoing[start : start + size]
            if self._unsendable is not None:
                # Asked per chunk: the ones before it took their time at the provider.
                lapsed = self._unsendable((o.message.id for o in chunk), channel)
                chunk = [o for o in chunk if o.message.id not in lapsed]
                if not chunk:
                    continue
            outcomes = await adapter.send(chunk)
            if len(outcomes) != len(chunk):
                raise RuntimeError(
                    f"{channel} adapter answered {len(outcomes)} outcomes for {len(chunk)} items"
                )
            answers = []
            for item, outcome in zip(chunk, outcomes, strict=True):
                if isinstance(outcome, Withheld):
                    continue  # left sending for the sweeper, counted by the gate
                if isinstance(outcome, Refused | TryAgain):
                    metrics.count_provider_error(channel, outcome)
                answers.append(Answer(item.message, outcome, item.target))
            await self.recorder.record(channel, answers)

    def _gate_for(self, message_id: str, channel: str) -> Callable[[], bool]:
        """The adapter's last check before its request, after its own waits."""
        unsendable = self._unsendable
        if unsendable is None:
            return lambda: True
        return lambda: not unsendable((message_id,), channel)

    def _decide(
        self, m: Message, user: User | None, prefs: Mapping[str, bool], now: datetime
    ) -> object:
        policy = self._categories.get(m.category)
        if m.priority == CRITICAL:
            # OTPs and safety alerts are never held by quiet hours.
            policy = replace(policy, quiet_hours=QuietPolicy.BYPASS)
        # decide() reads the category's switch; the (category, channel) one is the answer.
        switch = {m.category: allowed(prefs, m.category, m.channel)}
        return decide(m, user, None, switch, 1, policy, now)

    async def _targets(self, channel: str, messages: list[Message]) -> dict[str, str]:
        """Each message's target, or ``skip:<reason>``."""
        if channel == INBOX:
            return {m.id: m.user_id for m in messages}
        if channel == WEBHOOK:
            return {m.id: str(m.content.get("subscription_id", "")) for m in messages}
        resolved = await resolve_targets(
            self._store,
            channel,
            sorted({m.user_id for m in messages}),
            require_verified=self._require_verified,
        )
        return {
            m.id: f"skip:{t}" if (t := resolved[m.user_id]) in SKIP_REASONS else t for m in messages
        }

    def _unsubscribe_for(self, m: Message) -> str | None:
        if self._unsubscribe_url is None or m.priority == CRITICAL or m.channel == WEBHOOK:
            return None
        return self._unsubscribe_url(m.user_id, m.category, m.channel)
