"""Read-only figures for the operator dashboard (see ``OpsViewRepository`` in the port).

Each query runs on an index (schema migration 3): tickets by ``sent_at``, failed
messages by ``updated_at``, deactivated devices by ``updated_at``, so a dashboard
refresh costs the recent rows, not the table; the oldest due message reads the head of
the pending messages by ``due_at`` and the (few) messages in ``sending``.
"""

from __future__ import annotations

from datetime import datetime

from tepat.adapters.sqlite.codecs import Row, _dt, _dt_opt, _ts
from tepat.adapters.sqlite.connection import SqliteBase
from tepat.ports.repositories.ops_views import SendSample


class OpsViewsMixin(SqliteBase):
    async def recent_sends(self, since: datetime, limit: int) -> list[SendSample]:
        rows = await self._select(
            "SELECT m.category, m.scheduled_at, t.sent_at FROM tickets t "
            "JOIN messages m ON m.id = t.message_id "
            "WHERE t.sent_at >= ? ORDER BY t.sent_at DESC LIMIT ?",
            (_ts(since), max(0, limit)),
        )
        return [SendSample(r[0], _dt(r[1]), _dt(r[2])) for r in rows]

    async def failures_since(self, since: datetime) -> dict[str, int]:
        return await self._reasons_since("messages", "status_reason", "status = 'failed'", since)

    async def devices_deactivated_since(self, since: datetime) -> dict[str, int]:
        return await self._reasons_since("devices", "deactivated_reason", "active = 0", since)

    async def _reasons_since(
        self, table: str, reason: str, where: str, since: datetime
    ) -> dict[str, int]:
        sql = (
            f"SELECT coalesce({reason}, ''), count(*) FROM {table} "
            f"WHERE {where} AND updated_at >= ? GROUP BY 1"
        )
        return _counts(await self._select(sql, (_ts(since),)))

    async def oldest_due_unsent(self, now: datetime) -> datetime | None:
        # One min() per status: each runs on its partial index (an IN over both would not).
        rows = await self._select(
            "SELECT min(due_at) FROM ("
            "SELECT min(due_at) AS due_at FROM messages INDEXED BY ix_messages_pending_due_at "
            "WHERE status = 'pending' AND due_at <= ? "
            "UNION ALL SELECT min(due_at) FROM messages "
            "WHERE status = 'sending' AND due_at <= ?)",
            (_ts(now), _ts(now)),
        )
        return _dt_opt(rows[0][0]) if rows else None

    async def live_members(self, since: datetime) -> dict[str, int]:
        sql = "SELECT grp, count(*) FROM presence WHERE beat_at >= ? GROUP BY grp"
        return _counts(await self._select(sql, (_ts(since),)))


def _counts(rows: list[Row]) -> dict[str, int]:
    return {str(r[0]): int(r[1]) for r in rows}
