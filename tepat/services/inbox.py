"""In-app inbox use cases: deliver an item, list, count, read, and the live stream.

The live stream wakes two ways: :class:`InboxNotifier` wakes this process's streams when
this process stores an item for their user; items other processes store are found by
polling every ``poll`` seconds. The store is the truth: a missed wake costs one poll.
A stream re-reads a short window behind its position (``settle``): on MongoDB two
writers may commit seqs out of order, and an item below one already sent is still sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tepat.clock import Clock
from tepat.domain.categories import Categories
from tepat.domain.errors import DomainError
from tepat.domain.inbox import InboxItem, check_link, inbox_item_id, parse_seq
from tepat.domain.validation import check_identifier
from tepat.ports.repositories.inbox import InboxRepository
from tepat.ports.repositories.users import UserRepository
from tepat.services.accounts import NotFound, get_user

STREAM_BATCH = 100
# What a refused stream is told to wait before trying again: streams are long-lived, so a
# slot frees rarely; a browser's EventSource waits about this long by itself anyway.
STREAMS_RETRY_AFTER_SECONDS = 30


class TooManyStreams(Exception):
    """A new stream over the cap: ``per_user`` (429: this user has enough open) or the
    process's total (503); ``retry_after`` seconds."""

    def __init__(self, message: str, *, per_user: bool) -> None:
        super().__init__(message)
        self.message = message
        self.per_user = per_user
        self.retry_after = STREAMS_RETRY_AFTER_SECONDS


@dataclass(frozen=True, slots=True)
class StreamTiming:
    """Real seconds (the stream talks to a live connection, not the service's clock)."""

    heartbeat: float = 15.0  # an SSE comment this often keeps proxies from closing it
    poll: float = 2.0  # how late an item stored by another process may appear
    settle: float = 5.0  # how far behind its position a stream looks for late commits


@dataclass(frozen=True, slots=True)
class Delivered:
    item: InboxItem
    created: bool  # False: the user already had this message (a retry)


@dataclass(frozen=True, slots=True)
class InboxPage:
    items: list[InboxItem]
    next_cursor: str | None
    unread_count: int


class InboxNotifier:
    """Wakes this process's open streams of a user; :meth:`close` ends them all. Holds
    the stream caps: :meth:`reserve` takes a slot before the response starts, so a
    refusal is an HTTP status, not a stream that ends at once."""

    def __init__(self, max_streams: int = 500, max_streams_per_user: int = 5) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._closed = False
        self._max_streams = max_streams
        self._max_per_user = max_streams_per_user
        self._reserved: Counter[str] = Counter()

    def reserve(self, user_id: str) -> Callable[[], None]:
        """A stream slot for ``user_id`` (or :class:`TooManyStreams`); call what it returns,
        once, when the stream ends."""
        if self._reserved[user_id] >= self._max_per_user:
            raise TooManyStreams(
                f"{self._max_per_user} inbox streams of this user are open already: close one",
                per_user=True,
            )
        if self.reserved() >= self._max_streams:
            raise TooManyStreams(
                f"{self._max_streams} inbox streams are open on this server", per_user=False
            )
        self._reserved[user_id] += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._reserved[user_id] -= 1
                if not self._reserved[user_id]:
                    del self._reserved[user_id]

        return release

    @property
    def closed(self) -> bool:
        return self._closed

    @contextlib.contextmanager
    def subscribe(self, user_id: str) -> Iterator[asyncio.Event]:
        wake = asyncio.Event()
        self._waiters.setdefault(user_id, set()).add(wake)
        try:
            yield wake
        finally:
            waiters = self._waiters.get(user_id)
            if waiters is not None:
                waiters.discard(wake)
                if not waiters:
                    del self._waiters[user_id]

    def notify(self, user_id: str) -> None:
        for wake in self._waiters.get(user_id, ()):
            wake.set()

    def reserved(self) -> int:
        """Stream slots taken (streams open, or about to be)."""
        return self._reserved.total()

    def streams(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    def close(self) -> None:
        """On shutdown: every stream ends (clients reconnect elsewhere with Last-Event-ID)."""
        self._closed = True
        for waiters in self._waiters.values():
            for wake in waiters:
                wake.set()


class InboxRecords(InboxRepository, UserRepository, Protocol): ...


class InboxService:
    def __init__(
        self,
        store: InboxRecords,
        clock: Clock,
        categories: Categories,
        notifier: InboxNotifier | None = None,
        timing: StreamTiming | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._clock = clock
        self._categories = categories
        self.notifier = notifier or InboxNotifier()
        self.timing = timing or StreamTiming()
        self._monotonic = monotonic

    async def deliver(
        self,
        user_id: str,
        message_id: str,
        *,
        category: str,
        title: str,
        body: str,
        event_type: str | None = None,
        html: str | None = None,
        link: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> Delivered:
        """Store the rendered message in the user's inbox once: a repeat of
        ``message_id`` returns the stored item with ``created=False``."""
        await get_user(self, user_id)
        check_identifier(message_id, "message_id")
        self._categories.get(category, "category")
        if link is not None:
            link = check_link(link)
        item = InboxItem(
            item_id=inbox_item_id(user_id, message_id),
            user_id=user_id,
            message_id=message_id,
            event_type=event_type,
            category=category,
            title=title,
            body=body,
            html=html,
            link=link,
            data=dict(data or {}),
            created_at=self._clock.now(),
        )
        stored, created = await self.store.put_inbox_item(item)
        if created:
            self.notifier.notify(user_id)
        return Delivered(stored, created)

    async def page(
        self, user_id: str, cursor: str | None, limit: int, unread_only: bool = False
    ) -> InboxPage:
        """Newest first; ``next_cursor`` is None on the last page."""
        await get_user(self, user_id)
        before = None if cursor is None else parse_seq(cursor, "cursor")
        if not 1 <= limit <= 200:
            raise DomainError("limit", "must be between 1 and 200")
        # One more than asked tells whether another page exists.
        items = await self.store.list_inbox(user_id, limit + 1, before, unread_only)
        more = len(items) > limit
        items = items[:limit]
        next_cursor = str(items[-1].seq) if more else None
        return InboxPage(items, next_cursor, await self.store.inbox_unread_count(user_id))

    async def newest_seq(self, user_id: str) -> int:
        """Where a stream without a resume point starts: after the newest item (0: none)."""
        await get_user(self, user_id)
        newest = await self.store.list_inbox(user_id, 1)
        return newest[0].seq if newest else 0

    async def unread_count(self, user_id: str) -> int:
        await get_user(self, user_id)
        return await self.store.inbox_unread_count(user_id)

    async def read(self, user_id: str, item_id: str) -> InboxItem:
        """Mark read (forward-only: the first ``read_at`` stays)."""
        await get_user(self, user_id)
        item = await self.store.mark_inbox_read(user_id, item_id, self._clock.now())
        if item is None:
            raise NotFound("inbox item", item_id)
        return item

    async def read_all(self, user_id: str, up_to_seq: int | None = None) -> int:
        await get_user(self, user_id)
        return await self.store.mark_inbox_read_all(user_id, self._clock.now(), up_to_seq)

    async def open_stream(
        self, user_id: str, after_seq: int
    ) -> AsyncGenerator[InboxItem | None, None]:
        """Checks the user first (a 404 before the stream starts), then :meth:`stream`."""
        await get_user(self, user_id)
        return self.stream(user_id, after_seq)

    async def stream(self, user_id: str, after_seq: int) -> AsyncGenerator[InboxItem | None, None]:
        """The user's items with a seq above ``after_seq``, each once, oldest first, then
        as they arrive; ``None`` when a heartbeat is due. Ends on the notifier's close."""
        timing, now = self.timing, self._monotonic
        position = after_seq  # the highest seq sent (the resume point)
        # (when the position moved, where it was before): the floor of the re-read window.
        moves: deque[tuple[float, int]] = deque()
        sent: set[int] = set()  # seqs sent above the window's floor
        next_beat = now() + timing.heartbeat
        with self.notifier.subscribe(user_id) as wake:
            while not self.notifier.closed:
                wake.clear()  # before the query: a store after it sets it again
                while moves and moves[0][0] < now() - timing.settle:
                    moves.popleft()
                floor = moves[0][1] if moves else position
                sent = {s for s in sent if s > floor}
                cursor = floor
                while True:  # pages: a resume may find many items waiting
                    batch = await self.store.inbox_after(user_id, cursor, STREAM_BATCH)
                    for item in batch:
                        if item.seq in sent:
                            continue
                        if item.seq > position:
                            moves.append((now(), position))
                            position = item.seq
                        sent.add(item.seq)
                        yield item
                    if len(batch) < STREAM_BATCH:
                        break
                    cursor = batch[-1].seq
                if now() >= next_beat:
                    next_beat = now() + timing.heartbeat
                    yield None
                    continue
                timeout = max(0.0, min(timing.poll, next_beat - now()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout)
