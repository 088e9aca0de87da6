"""Reading messages: by id or live key, the user's pages, due, stuck and failed ones."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any

from tepat.adapters.message_cursor import decode_cursor, message_page
from tepat.adapters.sqlite.codecs import (
    _MESSAGE_COLUMNS,
    _dt,
    _message,
    _placeholders,
    _ts,
)
from tepat.adapters.sqlite.connection import SqliteBase
from tepat.adapters.store_results import in_asked_order
from tepat.domain.errors import DomainError
from tepat.domain.models import Message
from tepat.ports.repositories.messages import Counts, MessagePage, MessageQuery

_SELECT = f"SELECT {_MESSAGE_COLUMNS} FROM messages"
PENDING_FOR_USER = f"{_SELECT} WHERE user_id = ? AND status = 'pending' ORDER BY nominal_at, id"


class MessagesReadMixin(SqliteBase):
    async def get_message(self, message_id: str) -> Message | None:
        return await self._fetch_one(_message, f"{_SELECT} WHERE id = ?", (message_id,))

    async def get_messages(self, message_ids: Sequence[str]) -> list[Message]:
        rows = await self._select_in(f"{_SELECT} WHERE id IN ({{ids}})", message_ids)
        return in_asked_order(message_ids, map(_message, rows), attrgetter("id"))

    async def find_by_live_key(self, live_key: str) -> Message | None:
        return await self._fetch_one(_message, f"{_SELECT} WHERE live_key = ?", (live_key,))

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        if query.limit < 1:
            raise DomainError("limit", "must be at least 1")
        where = ["user_id = ?"]
        params: list[Any] = [query.user_id]
        if query.statuses:
            where.append(f"status IN ({_placeholders(len(query.statuses))})")
            params.extend(sorted(s.value for s in query.statuses))
        if query.scheduled_from is not None:
            where.append("scheduled_at >= ?")
            params.append(_ts(query.scheduled_from))
        if query.scheduled_to is not None:
            where.append("scheduled_at < ?")
            params.append(_ts(query.scheduled_to))
        if query.cursor is not None:
            at, message_id = decode_cursor(query.cursor)
            where.append("(scheduled_at, id) < (?, ?)")
            params.extend((_ts(at), message_id))
        sql = f"{_SELECT} WHERE {' AND '.join(where)} ORDER BY scheduled_at DESC, id DESC LIMIT ?"
        return message_page(
            await self._fetch(_message, sql, (*params, query.limit + 1)), query.limit
        )

    async def due_pending(self, before: datetime, limit: int) -> list[Message]:
        sql = (
            f"{_SELECT} INDEXED BY ix_messages_pending_due_at "
            "WHERE status = 'pending' AND due_at < ? AND publish_pending = 0 "
            "ORDER BY due_at, id LIMIT ?"
        )
        return await self._fetch(_message, sql, (_ts(before), limit))

    async def pending_for_user(self, user_id: str) -> list[Message]:
        return await self._fetch(_message, PENDING_FOR_USER, (user_id,))

    async def unpublished(
        self,
        limit: int,
        due_before: datetime | None = None,
        after: tuple[datetime, str] | None = None,
    ) -> list[Message]:
        # "~" sorts after every timestamp: no bound; "" before every one.
        bound = "~" if due_before is None else _ts(due_before)
        start = ("", "") if after is None else (_ts(after[0]), after[1])
        sql = (
            f"{_SELECT} INDEXED BY ix_messages_outbox "
            "WHERE publish_pending = 1 AND due_at < ? AND (due_at, id) > (?, ?) "
            "AND status = 'pending' ORDER BY due_at, id LIMIT ?"
        )
        return await self._fetch(_message, sql, (bound, *start, limit))

    async def unpublished_counts(
        self, due_from: datetime, due_before: datetime
    ) -> dict[tuple[datetime, str, str, str | None], int]:
        rows = await self._select(
            "SELECT due_at, category, channel, priority, count(*) FROM messages "
            "INDEXED BY ix_messages_outbox "
            "WHERE publish_pending = 1 AND due_at >= ? AND due_at < ? AND status = 'pending' "
            "GROUP BY due_at, category, channel, priority",
            (_ts(due_from), _ts(due_before)),
        )
        return {(_dt(due), cat, channel, prio): n for due, cat, channel, prio, n in rows}

    async def stuck_sending(self, claimed_before: datetime, limit: int) -> list[Message]:
        sql = (
            f"{_SELECT} WHERE status = 'sending' AND claimed_at < ? ORDER BY claimed_at, id LIMIT ?"
        )
        return await self._fetch(_message, sql, (_ts(claimed_before), limit))

    async def count_messages(self) -> Counts:
        # Kept by the triggers of schema migration 16: no scan of the messages.
        rows = await self._select(
            "SELECT status, category, channel, n FROM message_counts WHERE n > 0"
        )
        return Counts(by_status_category_channel={(s, c, ch): n for s, c, ch, n in rows})

    async def dead_letters(self, limit: int) -> list[Message]:
        sql = f"{_SELECT} WHERE status = 'failed' ORDER BY updated_at DESC, id DESC LIMIT ?"
        return await self._fetch(_message, sql, (limit,))
