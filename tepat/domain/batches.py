"""Broker batches: message ids grouped per (queue, due second), at most 100 each.

One broker message per notification does not scale on ActiveMQ's scheduler
(``shared/reference/activemq/SCALE.md``: ~1.5k jobs/s, then late and out of
memory); one per (queue, due second) carrying up to 100 ids stayed on time at
16.7k notifications due per second. 100 is also Expo's per-request limit.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from tepat.domain.categories import Categories
from tepat.domain.models import Message, MessageStatus

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


def batch_messages(messages: Iterable[Message], categories: Categories) -> list[Batch]:
    """Group pending messages into batches per (category queue, due second)."""
    groups: dict[tuple[str, int], list[str]] = defaultdict(list)
    for m in messages:
        if m.status is not MessageStatus.PENDING or m.category not in categories:
            continue
        second = int(m.scheduled_at.timestamp())
        groups[(categories.get(m.category).queue_name, second)].append(m.id)
    batches = []
    for (queue, second), ids in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        due = datetime.fromtimestamp(second, UTC)
        for i in range(0, len(ids), MAX_BATCH):
            batches.append(Batch(queue, due, tuple(ids[i : i + MAX_BATCH])))
    return batches
