"""Messages: one per notification to send; unique indexes, never check-then-insert, make
planning idempotent:

- ``messages.dedup_key`` unique: one document per intent and plan version;
- ``messages.live_key`` unique where set: at most one non-cancelled message per
  (user, reminder, local date) or (user, one-off idempotency key), ever;
- ``messages.slot_key`` unique among pending messages (``slot_key_for``: a
  reminder's (user, device, category, label, nominal instant); a one-off's intent).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from tepat.domain.models import Message, MessageStatus


@dataclass(frozen=True, slots=True)
class InsertResult:
    created: list[Message]  # the messages this call inserted, in input order
    existing: int  # how many were already there (any unique index)


@dataclass(frozen=True, slots=True)
class StatusChange:
    """One conditional status update, for :meth:`MessageRepository.transition_many`."""

    message_id: str
    to: MessageStatus
    reason: str | None = None
    ticket_id: str | None = None
    last_error: str | None = None
    scheduled_at: datetime | None = None
    release_live_key: bool = False
    # Going back to ``pending`` (retry, deferral, re-drive): when to dispatch it
    # next. The store sets the outbox mark in the same write.
    due_at: datetime | None = None
    # Set: the attempts the message has spent (a retry whose provider was never called
    # gives back the one its claim counted).
    attempts: int | None = None


@dataclass(frozen=True, slots=True)
class MessagePage:
    items: list[Message]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class MessageQuery:
    user_id: str
    statuses: frozenset[MessageStatus] = frozenset()
    scheduled_from: datetime | None = None  # inclusive
    scheduled_to: datetime | None = None  # exclusive
    limit: int = 50
    cursor: str | None = None  # opaque, from a previous page


@dataclass(frozen=True, slots=True)
class Counts:
    """Messages in the store by (status, category, channel)."""

    by_status_category_channel: dict[tuple[str, str, str], int] = field(default_factory=dict)


class MessageRepository(Protocol):
    async def insert_messages(self, messages: Sequence[Message]) -> InsertResult:
        """Insert in bulk; a message that violates any unique index is counted as
        existing, not raised (safe from several processes at once)."""

    async def get_message(self, message_id: str) -> Message | None: ...

    async def get_messages(self, message_ids: Sequence[str]) -> list[Message]: ...

    async def find_by_live_key(self, live_key: str) -> Message | None: ...

    async def claim(
        self, message_ids: Sequence[str], now: datetime, due_before: datetime | None = None
    ) -> list[Message]:
        """Atomically move each ``pending`` message to ``sending`` (``claimed_at=now``,
        ``attempts += 1``) and return those this call claimed (a second claimant gets
        nothing); ``due_before``: only those due before it."""

    async def renew_claims(self, message_ids: Sequence[str], now: datetime) -> int:
        """Restart the lease (``claimed_at=now``) of those still ``sending``, in one write:
        a batch that waits long to be sent is not taken for a dead consumer's. How many."""

    async def transition(
        self,
        message_id: str,
        to: MessageStatus,
        now: datetime,
        *,
        expect: Sequence[MessageStatus],
        reason: str | None = None,
        ticket_id: str | None = None,
        last_error: str | None = None,
        scheduled_at: datetime | None = None,
        release_live_key: bool = False,
        due_at: datetime | None = None,
    ) -> bool:
        """Conditional update, only if the current status is in ``expect`` *and* the
        transition table allows the move; else refused like a lost compare-and-set (False).
        ``release_live_key`` clears ``live_key`` (a cancelled date can be planned again).
        Moving to ``pending`` sets ``due_at`` (else ``scheduled_at``, else ``now``) and
        the outbox mark.
        """

    async def transition_many(
        self, changes: Sequence[StatusChange], now: datetime, *, expect: Sequence[MessageStatus]
    ) -> int:
        """:meth:`transition` for many messages in one round trip (a consumer records
        a whole provider request at once). Returns how many were applied."""

    async def pending_for_user(self, user_id: str) -> list[Message]:
        """Every pending message of one user (a re-plan compares them with the new plan)."""

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        """Newest ``scheduled_at`` first, then id; cursor-paginated."""

    async def due_pending(self, before: datetime, limit: int) -> list[Message]:
        """Published pending messages due (``due_at``) before ``before``, oldest first:
        the broker should have delivered them (sweeper)."""

    async def stuck_sending(self, claimed_before: datetime, limit: int) -> list[Message]: ...

    async def count_messages(self) -> Counts: ...

    async def dead_letters(self, limit: int) -> list[Message]:
        """Failed messages, most recently updated first."""
