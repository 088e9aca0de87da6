"""Push tickets and their receipts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tepat.adapters.sqlite.codecs import (
    _TICKET_COLUMNS,
    _placeholders,
    _ticket,
    _ticket_params,
    _ts,
)
from tepat.adapters.sqlite.connection import SqliteBase
from tepat.domain.models import Ticket

_SELECT = f"SELECT {_TICKET_COLUMNS} FROM tickets"


class TicketsMixin(SqliteBase):
    async def add_tickets(self, tickets: Sequence[Ticket]) -> None:
        sql = (
            f"INSERT INTO tickets ({_TICKET_COLUMNS}) VALUES ({_placeholders(9)}) "
            "ON CONFLICT(ticket_id) DO NOTHING"
        )
        params = [_ticket_params(t) for t in tickets]
        if params:
            await self._write(lambda c: c.executemany(sql, params).rowcount)

    async def tickets_awaiting_receipt(
        self, sent_before: datetime, limit: int, after: tuple[datetime, str] | None = None
    ) -> list[Ticket]:
        start = ("", "") if after is None else (_ts(after[0]), after[1])
        sql = (
            f"{_SELECT} WHERE receipt_status IS NULL AND sent_at < ? "
            "AND (sent_at, ticket_id) > (?, ?) ORDER BY sent_at, ticket_id LIMIT ?"
        )
        return await self._fetch(_ticket, sql, (_ts(sent_before), *start, limit))

    async def record_receipt(
        self, ticket_id: str, status: str, error: str | None, now: datetime
    ) -> bool:
        sql = (
            "UPDATE tickets SET receipt_status = ?, receipt_error = ?, checked_at = ? "
            "WHERE ticket_id = ? AND receipt_status IS NULL"
        )
        return await self._execute(sql, (status, error, _ts(now), ticket_id)) > 0

    async def tickets_for_message(self, message_id: str) -> list[Ticket]:
        sql = f"{_SELECT} WHERE message_id = ? ORDER BY sent_at, ticket_id"
        return await self._fetch(_ticket, sql, (message_id,))
