"""The in-app inbox."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from tepat.domain.inbox import InboxItem


class InboxRepository(Protocol):
    """The in-app inbox (``tepat/domain/inbox.py``): unique on (user, message id); ``seq``
    assigned from one increasing sequence per store; ``read_at`` set once."""

    async def put_inbox_item(self, item: InboxItem) -> tuple[InboxItem, bool]:
        """Store ``item`` (its ``seq`` ignored) and return it as stored with ``True``; if
        the user already has an item for ``item.message_id``, change nothing and return
        that one with ``False``. Concurrent puts of one message store one item."""

    async def list_inbox(
        self, user_id: str, limit: int, before_seq: int | None = None, unread_only: bool = False
    ) -> list[InboxItem]:
        """The user's items, newest (highest seq) first, below ``before_seq`` when given."""

    async def inbox_after(self, user_id: str, after_seq: int, limit: int) -> list[InboxItem]:
        """The user's items with a seq above ``after_seq``, oldest first (a stream's resume)."""

    async def mark_inbox_read(self, user_id: str, item_id: str, now: datetime) -> InboxItem | None:
        """Set ``read_at`` to ``now`` unless already read; the item, or None if the user
        has no such item."""

    async def mark_inbox_read_all(
        self, user_id: str, now: datetime, up_to_seq: int | None = None
    ) -> int:
        """Mark every unread item of the user (up to ``up_to_seq`` when given) read at
        ``now``; how many changed."""

    async def inbox_unread_count(self, user_id: str) -> int: ...
