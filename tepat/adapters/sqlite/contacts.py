"""Contact points, suppressions and provider-event dedup on SQLite (migration 12): each
table's primary key is the port's unique key, and a write decides with ``ON CONFLICT``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tepat.adapters.sqlite.codecs import _decoder, _dt, _ts
from tepat.adapters.sqlite.connection import SqliteBase, _insert_new
from tepat.adapters.sqlite.schema import Conn
from tepat.domain.contacts import Contact, Suppression, SuppressionReason, overrides

_SUPPRESSION_COLUMNS = "channel, address, reason, added_at, source"
_suppression = _decoder(Suppression, _SUPPRESSION_COLUMNS, reason=SuppressionReason, added_at=_dt)
_CONTACT_COLUMNS = "user_id, channel, address, verified, updated_at"
_contact = _decoder(Contact, _CONTACT_COLUMNS, verified=bool, updated_at=_dt)


_SUPPRESSION = f"SELECT {_SUPPRESSION_COLUMNS} FROM suppressions"
_CONTACT = f"SELECT {_CONTACT_COLUMNS} FROM contacts"


class ContactsMixin(SqliteBase):
    async def set_contact(
        self, user_id: str, channel: str, address: str | None, verified: bool, now: datetime
    ) -> None:
        if address is None:
            await self._execute(
                "DELETE FROM contacts WHERE user_id = ? AND channel = ?", (user_id, channel)
            )
            return
        sql = (
            "INSERT INTO contacts (user_id, channel, address, verified, updated_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (user_id, channel) DO UPDATE SET "
            "address = excluded.address, verified = excluded.verified, "
            "updated_at = excluded.updated_at"
        )
        await self._execute(sql, (user_id, channel, address, int(verified), _ts(now)))

    async def contacts_for_users(self, user_ids: Sequence[str], channel: str) -> dict[str, Contact]:
        sql = f"{_CONTACT} WHERE user_id IN ({{ids}}) AND channel = ?"
        rows = await self._select_in(sql, user_ids, (channel,))
        return {row[0]: _contact(row) for row in rows}

    async def list_contacts(self, user_id: str) -> list[Contact]:
        return await self._fetch(
            _contact, f"{_CONTACT} WHERE user_id = ? ORDER BY channel", (user_id,)
        )

    async def add_suppression(
        self,
        channel: str,
        address: str,
        reason: SuppressionReason,
        now: datetime,
        source: str | None = None,
    ) -> bool:
        reason = SuppressionReason(reason)

        # Insert-or-read in one write transaction: the insert decides whether it is
        # new, and an existing row is upgraded only to a stronger reason.
        def run(conn: Conn) -> bool:
            row = (channel, address, reason.value, _ts(now), source)
            if _insert_new(conn, "suppressions", _SUPPRESSION_COLUMNS, row):
                return True
            row = conn.execute(
                "SELECT reason FROM suppressions WHERE channel = ? AND address = ?",
                (channel, address),
            ).fetchone()
            if row is not None and overrides(reason, SuppressionReason(row[0])):
                conn.execute(
                    "UPDATE suppressions SET reason = ?, source = ? "
                    "WHERE channel = ? AND address = ?",
                    (reason.value, source, channel, address),
                )
            return False

        return await self._write(run)

    async def lift_suppression(
        self, channel: str, address: str, reason: SuppressionReason | None = None
    ) -> bool:
        sql = "DELETE FROM suppressions WHERE channel = ? AND address = ?"
        params: tuple[str, ...] = (channel, address)
        if reason is not None:
            sql += " AND reason = ?"
            params = (*params, SuppressionReason(reason).value)
        return await self._execute(sql, params) > 0

    async def suppressions_for(
        self, channel: str, addresses: Sequence[str]
    ) -> dict[str, Suppression]:
        rows = await self._select_in(
            f"{_SUPPRESSION} WHERE address IN ({{ids}}) AND channel = ?", addresses, (channel,)
        )
        return {row[1]: _suppression(row) for row in rows}

    async def list_suppressions(
        self, channel: str | None, after: tuple[str, str] | None, limit: int
    ) -> list[Suppression]:
        where: list[str] = []
        params: list[object] = []
        if channel is not None:
            where.append("channel = ?")
            params.append(channel)
        if after is not None:
            where.append("(channel, address) > (?, ?)")
            params.extend(after)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        sql = f"{_SUPPRESSION}{clause} ORDER BY channel, address LIMIT ?"
        return await self._fetch(_suppression, sql, (*params, max(0, limit)))

    async def record_provider_event(self, provider: str, event_id: str, now: datetime) -> bool:
        row = (provider, event_id, _ts(now))
        return await self._insert_new("provider_events", "provider, event_id, recorded_at", row)

    async def provider_event_seen(self, provider: str, event_id: str) -> bool:
        rows = await self._select(
            "SELECT 1 FROM provider_events WHERE provider = ? AND event_id = ?",
            (provider, event_id),
        )
        return bool(rows)
