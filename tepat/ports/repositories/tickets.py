"""Tickets: the push provider's receipts to poll for, one per accepted notification."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from tepat.domain.models import Ticket


class TicketRepository(Protocol):
    async def add_tickets(self, tickets: Sequence[Ticket]) -> None: ...

    async def tickets_awaiting_receipt(
        self, sent_before: datetime, limit: int, after: tuple[datetime, str] | None = None
    ) -> list[Ticket]:
        """Tickets without a receipt sent before ``sent_before``, by (sent_at, ticket_id),
        after the key ``after``: a backlog of receipts not ready never hides newer ones."""

    async def record_receipt(
        self, ticket_id: str, status: str, error: str | None, now: datetime
    ) -> bool:
        """Set a ticket's receipt once; returns False if it already had one."""

    async def tickets_for_message(self, message_id: str) -> list[Ticket]: ...
