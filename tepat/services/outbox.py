"""The transactional outbox: every pending message reaches the broker, batched.

A message is written with an "unpublished" mark in the same store write that inserts it
or puts it back to ``pending``. This publisher groups the marked messages per (queue, due
second), at most 100 ids a broker message, publishes them and clears the marks: a crash
or broker failure in between loses nothing (the mark stays for the next pass), and
publishing twice is harmless (the consumer's atomic claim decides).

A message is published once due within ``publish_ahead``, and beyond ``publish_soon``
only in *full* batches; a single write (an API re-plan, a one-off) publishes at once
only what is due within ``publish_soon``. Otherwise K API calls for one instant would
each leave as a one-id broker message, and the consumer would hold a few dozen
notifications at a time (issue 10) instead of about K/100 full batches.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import structlog

from tepat.clock import Clock
from tepat.domain.batches import MAX_BATCH, BatchBuilder
from tepat.domain.categories import Categories
from tepat.domain.queues import queue_for
from tepat.ports.repositories.outbox import OutboxRepository
from tepat.services.enqueue import Enqueuer

log = structlog.get_logger("tepat.outbox")

# Messages read per pass: large enough that a second's batch is rarely split
# across reads, small enough to keep memory flat on a planning run's backlog.
PAGE_SIZE = 5000


@dataclass(eq=False)
class Outbox:
    store: OutboxRepository
    enqueuer: Enqueuer
    categories: Categories
    clock: Clock
    publish_ahead: timedelta = timedelta(minutes=10)
    publish_soon: timedelta = timedelta(seconds=5)
    # One pass at a time in this process: concurrent writers queue behind the
    # pass in progress, and the next pass takes all of their messages at once,
    # so a burst of API calls is still published in full batches.
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)

    async def flush(self, everything: bool = False, within: timedelta | None = None) -> int:
        """Publish the marked messages due within ``within`` (by default
        ``publish_ahead``; all of them when ``everything``); returns how many."""
        ahead = self.publish_ahead if within is None else within
        async with self._lock:
            if everything:
                return await self._publish_all(None)
            now = self.clock.now()
            soon = min(ahead, self.publish_soon)
            total = await self._publish_all(now + soon)
            if ahead > soon:
                total += await self._publish_full(now + soon, now + ahead)
            return total

    async def _publish_all(self, horizon: datetime | None) -> int:
        total = 0
        while True:
            page = await self.store.unpublished(PAGE_SIZE, due_before=horizon)
            if not page:
                return total
            builder = BatchBuilder(self.categories)
            batches = builder.add(page) + builder.drain()
            await self.enqueuer.publish(batches, {m.id: m.trace_parent for m in page})
            await self.store.mark_published([(m.id, m.due) for m in page])
            total += len(page)
            if len(page) < PAGE_SIZE:
                return total

    async def _publish_full(self, start: datetime, horizon: datetime) -> int:
        """Publish the full batches among the marked messages due in [start, horizon):
        only the seconds the store counts a full batch in are read."""
        per_batch: collections.Counter[tuple[int, str]] = collections.Counter()
        counts = await self.store.unpublished_counts(start, horizon)
        for (due, category, channel, priority), n in counts.items():
            if category in self.categories:
                queue = queue_for(self.categories.get(category), channel, priority)
                per_batch[(int(due.timestamp()), queue)] += n
        seconds = sorted({second for (second, _), n in per_batch.items() if n >= MAX_BATCH})
        total = 0
        for second in seconds:
            at = datetime.fromtimestamp(second, UTC)
            total += await self._publish_full_second(max(at, start), at + timedelta(seconds=1))
        return total

    async def _publish_full_second(self, start: datetime, end: datetime) -> int:
        builder = BatchBuilder(self.categories)
        # the due_at read: a message moved meanwhile keeps its mark
        read: dict[str, datetime] = {}
        traces: dict[str, str | None] = {}
        total = 0
        after = (start, "")  # every id sorts after "": due at start or later
        while True:
            page = await self.store.unpublished(PAGE_SIZE, due_before=end, after=after)
            if page:
                after = (page[-1].due, page[-1].id)
            read.update((m.id, m.due) for m in page)
            traces.update((m.id, m.trace_parent) for m in page)
            full = builder.add(page)
            if full:
                await self.enqueuer.publish(full, traces)
                ids = [i for b in full for i in b.ids]
                await self.store.mark_published([(i, read[i]) for i in ids])
                total += len(ids)
            if len(page) < PAGE_SIZE:
                return total

    async def flush_quietly(self, within: timedelta | None = None) -> None:
        """:meth:`flush` for callers whose write already succeeded: a broker failure
        is logged and left to the publisher loop, never reported as a lost write."""
        try:
            await self.flush(within=within)
        except Exception as e:
            log.warning("outbox publish failed; the publisher loop retries", error=str(e))

    async def flush_soon(self) -> None:
        """After a single write: publish what is due within ``publish_soon``, quietly;
        the publisher loop batches the rest with whatever else was written meanwhile."""
        await self.flush_quietly(within=self.publish_soon)
