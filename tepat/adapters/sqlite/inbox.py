"""The in-app inbox on SQLite (migration 8): one row per (user, message id), ``seq`` the rowid."""

from __future__ import annotations

import json
from datetime import datetime

from tepat.adapters.sqlite.codecs import (
    Row,
    _decoder,
    _dt,
    _dt_opt,
    _encoder,
    _json,
    _ts,
)
from tepat.adapters.sqlite.connection import SqliteBase, _insert_new
from tepat.adapters.sqlite.schema import Conn
from tepat.domain.inbox import InboxItem

_COLUMNS = (
    "seq, item_id, user_id, message_id, event_type, category, title, body, html, link, "
    "data, created_at, read_at"
)
_SELECT = f"SELECT {_COLUMNS} FROM inbox"
_NEW_COLUMNS = _COLUMNS.split(", ", 1)[1]  # the store assigns seq
# Stored unread, whatever the item says.
_new_item = _encoder(
    _NEW_COLUMNS, data=lambda data: _json(dict(data)), created_at=_ts, read_at=lambda _: None
)


_item = _decoder(InboxItem, _COLUMNS, seq=int, data=json.loads, created_at=_dt, read_at=_dt_opt)


class InboxMixin(SqliteBase):
    async def put_inbox_item(self, item: InboxItem) -> tuple[InboxItem, bool]:
        values = _new_item(item)

        # The unique (user_id, message_id) decides; the insert and the read of whichever
        # row won share one write transaction.
        def run(conn: Conn) -> tuple[Row, bool]:
            inserted = _insert_new(conn, "inbox", _NEW_COLUMNS, values)
            row = conn.execute(
                f"{_SELECT} WHERE user_id = ? AND message_id = ?", (item.user_id, item.message_id)
            ).fetchone()
            return row, inserted

        row, created = await self._write(run)
        return _item(row), created

    async def list_inbox(
        self, user_id: str, limit: int, before_seq: int | None = None, unread_only: bool = False
    ) -> list[InboxItem]:
        where = ["user_id = ?"]
        params: list[object] = [user_id]
        if before_seq is not None:
            where.append("seq < ?")
            params.append(before_seq)
        if unread_only:
            where.append("read_at IS NULL")
        sql = f"{_SELECT} WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?"
        return await self._fetch(_item, sql, (*params, max(0, limit)))

    async def inbox_after(self, user_id: str, after_seq: int, limit: int) -> list[InboxItem]:
        sql = f"{_SELECT} WHERE user_id = ? AND seq > ? ORDER BY seq LIMIT ?"
        return await self._fetch(_item, sql, (user_id, after_seq, max(0, limit)))

    async def mark_inbox_read(self, user_id: str, item_id: str, now: datetime) -> InboxItem | None:
        def run(conn: Conn) -> Row | None:
            # Forward-only: a read item keeps its first read_at.
            conn.execute(
                "UPDATE inbox SET read_at = ? "
                "WHERE user_id = ? AND item_id = ? AND read_at IS NULL",
                (_ts(now), user_id, item_id),
            )
            row: Row | None = conn.execute(
                f"{_SELECT} WHERE user_id = ? AND item_id = ?", (user_id, item_id)
            ).fetchone()
            return row

        row = await self._write(run)
        return None if row is None else _item(row)

    async def mark_inbox_read_all(
        self, user_id: str, now: datetime, up_to_seq: int | None = None
    ) -> int:
        sql = "UPDATE inbox SET read_at = ? WHERE user_id = ? AND read_at IS NULL"
        params: tuple[object, ...] = (_ts(now), user_id)
        if up_to_seq is not None:
            sql += " AND seq <= ?"
            params = (*params, up_to_seq)
        return await self._execute(sql, params)

    async def inbox_unread_count(self, user_id: str) -> int:
        rows = await self._select(
            "SELECT count(*) FROM inbox WHERE user_id = ? AND read_at IS NULL", (user_id,)
        )
        return int(rows[0][0])
