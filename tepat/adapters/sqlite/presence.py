"""Live members of a group: consumer processes sharing one provider's rate ceiling."""

from __future__ import annotations

from datetime import datetime, timedelta

from tepat.adapters.sqlite.codecs import _ts
from tepat.adapters.sqlite.connection import SqliteBase
from tepat.adapters.sqlite.schema import Conn
from tepat.ports.repositories.presence import FORGET_AFTER_TTLS


class PresenceMixin(SqliteBase):
    async def heartbeat(self, group: str, member: str, now: datetime, ttl: timedelta) -> int:
        stamp, live_since = _ts(now), _ts(now - ttl)
        forget_before = _ts(now - ttl * FORGET_AFTER_TTLS)

        def run(conn: Conn) -> int:
            conn.execute(
                "INSERT INTO presence VALUES (?, ?, ?) "
                "ON CONFLICT(grp, member) DO UPDATE SET beat_at = excluded.beat_at",
                (group, member, stamp),
            )
            conn.execute(
                "DELETE FROM presence WHERE grp = ? AND beat_at < ?", (group, forget_before)
            )
            row = conn.execute(
                "SELECT count(*) FROM presence WHERE grp = ? AND beat_at >= ?",
                (group, live_since),
            ).fetchone()
            return int(row[0])

        return await self._write(run)

    async def leave(self, group: str, member: str) -> None:
        await self._execute("DELETE FROM presence WHERE grp = ? AND member = ?", (group, member))
