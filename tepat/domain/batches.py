"""Broker batches: message ids grouped per (queue, due second), at most 100 each.

One broker message per notification does not scale on ActiveMQ's scheduler
(``docs/ACTIVEMQ.md``: ~1.5k jobs/s, then late and out of
memory); one per (queue, due second) carrying up to 100 ids stayed on time at
16.7k notifications due per second. 100 is also Expo's per-request limit.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from tepat.domain.categories import Categories
from tepat.domain.models import Message, MessageStatus
from tepat.domain.queues import queue_for, queue_priority

MAX_BATCH = 100


@dataclass(frozen=True, slots=True)
class Batch:
    queue: str
    due: datetime  # whole second, UTC; items may be due up to a second later
    ids: tuple[str, ...]

    def encode(self) -> bytes:
        return json.dumps(
            {"v": 1, "due": int(self.due.timestamp()), "ids": list(self.ids)},
            separators=(",", ":"),
        ).encode()


class BadBatch(ValueError):
    pass


def decode_batch(queue: str, body: bytes) -> Batch:
    try:
        doc = json.loads(body)
        ids = doc["ids"]
        due = datetime.fromtimestamp(int(doc["due"]), UTC)
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise TypeError("ids")
    except (ValueError, KeyError, TypeError, OverflowError, OSError) as e:
        raise BadBatch(f"not a Tepat batch: {e}") from None
    return Batch(queue, due, tuple(ids))


class BatchBuilder:
    """Groups message ids per (queue, due second) across many calls, handing out full
    batches as they fill: a long planning run sends about one broker message per
    (queue, second), not one per page, holding only partial batches."""

    def __init__(self, categories: Categories) -> None:
        self._categories = categories
        self._groups: dict[tuple[int, int, str], list[str]] = {}

    def add(self, messages: Iterable[Message]) -> list[Batch]:
        """Take ``messages`` (pending ones only); return the batches that became full."""
        full = []
        for m in messages:
            if m.status is not MessageStatus.PENDING or m.category not in self._categories:
                continue
            policy = self._categories.get(m.category)
            queue = queue_for(policy, m.channel, m.priority)
            key = (int(m.due.timestamp()), queue_priority(queue, self._categories), queue)
            ids = self._groups.setdefault(key, [])
            ids.append(m.id)
            if len(ids) == MAX_BATCH:
                full.append(_batch(key, ids))
                del self._groups[key]
        return full

    def drain(self) -> list[Batch]:
        """The partial batches, by due second and then category priority (safety first)."""
        batches = [_batch(key, ids) for key, ids in sorted(self._groups.items())]
        self._groups.clear()
        return batches


def _batch(key: tuple[int, int, str], ids: list[str]) -> Batch:
    second, _, queue = key
    return Batch(queue, datetime.fromtimestamp(second, UTC), tuple(ids))


def batch_messages(messages: Iterable[Message], categories: Categories) -> list[Batch]:
    """Group pending messages into batches per (queue, due second), ≤100 ids each,
    ordered by due second and then category priority."""
    builder = BatchBuilder(categories)
    batches = builder.add(messages) + builder.drain()
    return sorted(batches, key=lambda b: (b.due, queue_priority(b.queue, categories)))
