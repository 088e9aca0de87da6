"""The outbox: which pending messages still have to go on the broker."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from tepat.domain.models import Message


class OutboxRepository(Protocol):
    """The transactional outbox over the messages: a message carries an "unpublished"
    mark from the write that inserts it or puts it back to ``pending``; one publisher
    (``tepat/services/outbox.py``) puts marked messages on the broker and clears it."""

    async def unpublished(
        self,
        limit: int,
        due_before: datetime | None = None,
        after: tuple[datetime, str] | None = None,
    ) -> list[Message]:
        """Pending messages carrying the outbox mark (due before ``due_before`` when
        given), by (``due_at``, id); ``after`` a (``due_at``, id) pair: only those
        after it (pages over messages a pass leaves marked)."""

    async def unpublished_counts(
        self, due_from: datetime, due_before: datetime
    ) -> dict[tuple[datetime, str, str, str | None], int]:
        """How many marked pending messages are due at each (``due_at``, category,
        channel, priority: what names their queue) in [``due_from``, ``due_before``)."""

    async def mark_published(self, published: Sequence[tuple[str, datetime]]) -> int:
        """Clear the outbox mark of each (id, due_at) whose ``due_at`` is unchanged
        (a message put back to pending meanwhile keeps its mark). Returns how many."""

    async def republish(self, message_ids: Sequence[str], due_at: datetime) -> int:
        """Pending messages back onto the outbox, due at ``due_at`` (sweeper re-drive)."""

    async def republish_all_pending(self) -> int:
        """Put every pending message back onto the outbox, keeping its ``due_at``
        (the embedded broker keeps nothing across restarts)."""
