"""Handle one due batch: hold it until its instant, claim, and hand what it claimed to
the send path; return once every claimed message is recorded (then the broker delivery
is acked).

The order matters for "exactly once in effect": **claim** in the store (pending ->
sending, atomic: a repeated or concurrent delivery of the batch claims nothing and is
simply acked); then decide, send and record (:mod:`tepat.services.sending.channel_sender`).

The one duplicate window (docs/PRINCIPLES.md §9) is the provider boundary: a process
that dies after the provider accepted a request and before its record leaves its
messages ``sending``, and the sweeper re-drives them after the lease; a batch claimed
but still waiting to be sent keeps its lease (:mod:`tepat.services.sending.lease`); a
request whose answer was lost after it went out is "maybe sent", and the category's
``maybe_sent`` policy retries it or closes it as ``failed`` (``outcome_unknown``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from tepat import tracing
from tepat.clock import Clock
from tepat.domain.batches import Batch
from tepat.domain.models import MessageStatus
from tepat.ports.repositories.messages import MessageRepository
from tepat.services.sending.channel_sender import BeforeSend, ChannelSender
from tepat.services.sending.lease import ClaimsInHand

# Batches fire up to ~1 s early on ActiveMQ (its scheduler rounds to 500 ms and
# a batch covers a whole second); items due later than this belong to a later batch.
BATCH_SPAN = timedelta(seconds=1)


class Dispatcher:
    def __init__(
        self,
        store: MessageRepository,
        channels: ChannelSender,
        claims: ClaimsInHand,
        clock: Clock,
        claim_ahead: timedelta = timedelta(0),
    ) -> None:
        self._store = store
        # How long before its instant a message in hand is claimed (TEPAT_CLAIM_AHEAD_SECONDS).
        self._claim_ahead = claim_ahead
        self.channels = channels
        # The batches claimed and not yet recorded, whose lease the consumer keeps.
        self.claims = claims
        self._clock = clock

    async def handle(self, batch: Batch, before_send: BeforeSend | None = None) -> None:
        """Process one batch; returns once every message it claimed is recorded.

        A batch may arrive before its instant (published with a lead on either broker):
        it is held here, on the clock, and nothing is sent before the instant.
        ``claim_ahead`` before the instant its messages are claimed, then judged (who it
        goes to read in one gathered read, the send check decided as of the instant),
        so at the instant only the send is left: the claim's write, which waits for the
        store's writer, and the reads are out of the instant's path. A change that comes
        after that goes as judged; it applies from the next occurrence
        (docs/PRINCIPLES.md §9, "Re-plans are replacements").
        ``before_send`` is awaited before its requests go out (the consumer's
        priority order between batches): once per instant and channel, so it answers
        at once once its turn came.
        """
        now = self._clock.now()
        if batch.due + BATCH_SPAN <= now:
            # Its whole second has passed (a backlog): every item still meant for it
            # is due, so one claim, bounded like the candidates below, replaces the read.
            await self._claim_and_send(batch.ids, now, before_send, batch.due + BATCH_SPAN)
            return
        # A message moved since this batch was published (retried, deferred) waits
        # for the batch of its new instant.
        candidates = [
            m
            for m in await self._store.get_messages(batch.ids)
            if m.status is MessageStatus.PENDING and m.due < batch.due + BATCH_SPAN
        ]
        if not candidates:
            return
        # A batch covers a whole second: each item is held until its own instant within
        # it (one due at .0 must not wait for one due at .5); what is due within the
        # claim's lead by then is claimed together.
        waiting = sorted(candidates, key=lambda m: m.due)
        while waiting:
            await self._clock.sleep_until(waiting[0].due - self._claim_ahead)
            now = self._clock.now()
            due = [m for m in waiting if m.due - self._claim_ahead <= now]
            waiting = waiting[len(due) :]
            await self._claim_and_send([m.id for m in due], now, before_send)

    async def _claim_and_send(
        self,
        ids: Sequence[str],
        now: datetime,
        before_send: BeforeSend | None,
        due_before: datetime | None = None,
    ) -> None:
        with tracing.span("claim", messages=len(ids)):
            claimed = await self._store.claim(ids, now, due_before=due_before)
        if not claimed:
            return
        with self.claims.held(claimed), tracing.span("send", messages=len(claimed)):
            waiting = sorted(claimed, key=lambda m: m.due)
            while waiting:
                at = max(waiting[0].due, self._clock.now())
                due = [m for m in waiting if m.due <= at]
                waiting = waiting[len(due) :]
                prepared = await self.channels.prepare(due, None, at)
                await self._clock.sleep_until(at)
                await self.channels.fire(prepared, before_send)
