"""The inbox stream sends each item once even when seqs commit out of order.

On MongoDB two writers may take seqs 5 and 6 and commit 6 first (the counter and the
insert are two steps). A store stand-in makes that happen on demand; the stream must
still send 5 once, and never 6 again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from typing import cast

from tepat.clock import FakeClock
from tepat.domain.categories import Categories
from tepat.domain.inbox import InboxItem
from tepat.ports.store import Store
from tepat.services.inbox import STREAM_BATCH, InboxService, StreamTiming

T0 = datetime(2027, 3, 1, tzinfo=UTC)
WAIT = 10.0


class CommitOrderStore:
    """Only what the stream reads: items become visible when the test commits them."""

    def __init__(self) -> None:
        self.visible: list[InboxItem] = []

    def commit(self, seq: int, user: str = "alice") -> None:
        self.visible.append(
            InboxItem(f"i{seq}", user, f"m{seq}", "custom", f"t{seq}", "b", T0, seq=seq)
        )

    async def inbox_after(self, user_id: str, after_seq: int, limit: int) -> list[InboxItem]:
        mine = sorted((i for i in self.visible if i.user_id == user_id), key=lambda i: i.seq)
        return [i for i in mine if i.seq > after_seq][:limit]


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def service(store: CommitOrderStore, clock: Monotonic) -> InboxService:
    return InboxService(
        cast(Store, store),
        FakeClock(T0),
        Categories(),
        timing=StreamTiming(heartbeat=3600, poll=3600, settle=5),
        monotonic=clock,
    )


async def next_seqs(stream: AsyncGenerator[InboxItem | None, None], n: int) -> list[int]:
    out: list[int] = []
    for _ in range(n):
        item = await asyncio.wait_for(anext(stream), WAIT)
        assert item is not None
        out.append(item.seq)
    return out


async def test_a_late_commit_inside_the_window_is_sent_once() -> None:
    store, clock = CommitOrderStore(), Monotonic()
    inbox = service(store, clock)
    stream = inbox.stream("alice", 0)
    store.commit(6)  # 5 was taken first but commits later
    assert await next_seqs(stream, 1) == [6]
    store.commit(5)
    store.commit(7)
    inbox.notifier.notify("alice")
    assert await next_seqs(stream, 2) == [5, 7]
    store.commit(9)  # were 6 or 5 sent again, they would come before it
    inbox.notifier.notify("alice")
    assert await next_seqs(stream, 1) == [9]
    clock.now += 60  # the window moves past them all
    store.commit(10)
    inbox.notifier.notify("alice")
    assert await next_seqs(stream, 1) == [10]
    await stream.aclose()


async def test_a_resume_pages_through_many_waiting_items() -> None:
    store, clock = CommitOrderStore(), Monotonic()
    for seq in range(1, 2 * STREAM_BATCH + 11):
        store.commit(seq)
        store.commit(10_000 + seq, user="bob")
    inbox = service(store, clock)
    stream = inbox.stream("alice", 5)
    assert await next_seqs(stream, 2 * STREAM_BATCH + 5) == list(range(6, 2 * STREAM_BATCH + 11))
    await stream.aclose()
    assert inbox.notifier.streams() == 0
