"""Reminders and per-category preferences."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter, itemgetter

from tepat.adapters.sqlite.codecs import (
    _REMINDER_COLUMNS,
    Row,
    _placeholders,
    _reminder,
    _reminder_params,
)
from tepat.adapters.sqlite.connection import SqliteBase
from tepat.adapters.sqlite.schema import Conn
from tepat.adapters.store_results import grouped
from tepat.domain.models import Reminder

_SELECT = f"SELECT {_REMINDER_COLUMNS} FROM reminders"
LIST_REMINDERS = f"{_SELECT} WHERE user_id = ? ORDER BY reminder_id"
# Shared with the bulk import ({values}: the VALUES rows), which writes reminders alike.
UPSERT_REMINDER = (
    f"INSERT INTO reminders ({_REMINDER_COLUMNS}) VALUES {{values}} "
    "ON CONFLICT(user_id, reminder_id) DO UPDATE SET category = excluded.category, "
    "local_time = excluded.local_time, title = excluded.title, body = excluded.body, "
    "label = excluded.label, days = excluded.days, data = excluded.data, "
    "enabled = excluded.enabled, version = excluded.version, updated_at = excluded.updated_at"
)


class RemindersMixin(SqliteBase):
    async def upsert_reminder(self, reminder: Reminder) -> tuple[Reminder, bool]:
        exists = "SELECT 1 FROM reminders WHERE user_id = ? AND reminder_id = ?"
        values = f"({_placeholders(13)})"
        upsert = f"{UPSERT_REMINDER.format(values=values)} RETURNING {_REMINDER_COLUMNS}"
        params = _reminder_params(reminder, self._now())

        def run(conn: Conn) -> tuple[Row, bool]:
            # In the write transaction: no other write lands between the look and the upsert.
            existed = conn.execute(exists, params[:2]).fetchone() is not None
            return conn.execute(upsert, params).fetchone(), not existed

        row, inserted = await self._write(run)
        return _reminder(row), inserted

    async def get_reminder(self, user_id: str, reminder_id: str) -> Reminder | None:
        sql = f"{_SELECT} WHERE user_id = ? AND reminder_id = ?"
        return await self._fetch_one(_reminder, sql, (user_id, reminder_id))

    async def delete_reminder(self, user_id: str, reminder_id: str) -> bool:
        sql = "DELETE FROM reminders WHERE user_id = ? AND reminder_id = ?"
        return await self._execute(sql, (user_id, reminder_id)) > 0

    async def list_reminders(self, user_id: str) -> list[Reminder]:
        return await self._fetch(_reminder, LIST_REMINDERS, (user_id,))

    async def reminders_for_users(self, user_ids: Sequence[str]) -> dict[str, list[Reminder]]:
        rows = await self._select_in(
            f"{_SELECT} WHERE user_id IN ({{ids}}) ORDER BY user_id, reminder_id",
            user_ids,
        )
        return grouped(map(_reminder, rows), attrgetter("user_id"))

    async def set_preferences(
        self, user_id: str, categories: Mapping[str, bool]
    ) -> dict[str, bool]:
        now = self._now()
        upsert = (
            "INSERT INTO preferences VALUES (?, ?, ?, ?) ON CONFLICT(user_id, category) "
            "DO UPDATE SET enabled = excluded.enabled, updated_at = excluded.updated_at"
        )
        select = "SELECT category, enabled FROM preferences WHERE user_id = ?"

        def run(conn: Conn) -> list[Row]:
            conn.executemany(
                upsert, [(user_id, cat, int(on), now) for cat, on in categories.items()]
            )
            return conn.execute(select, (user_id,)).fetchall()

        return {cat: bool(on) for cat, on in await self._write(run)}

    async def get_preferences(self, user_id: str) -> dict[str, bool]:
        return (await self.preferences_for_users([user_id])).get(user_id, {})

    async def preferences_for_users(self, user_ids: Sequence[str]) -> dict[str, dict[str, bool]]:
        rows = await self._select_in(
            "SELECT user_id, category, enabled FROM preferences WHERE user_id IN ({ids})",
            user_ids,
        )
        return {
            user_id: {cat: bool(on) for _, cat, on in prefs}
            for user_id, prefs in grouped(rows, itemgetter(0)).items()
        }
