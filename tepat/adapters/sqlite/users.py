"""Users and their device bindings."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from tepat.adapters.sqlite.codecs import (
    _DEVICE_COLUMNS,
    _USER_COLUMNS,
    Row,
    _device,
    _placeholders,
    _ts_opt,
    _user,
    _user_params,
)
from tepat.adapters.sqlite.connection import SqliteBase
from tepat.adapters.sqlite.schema import Conn
from tepat.domain.models import Device, User
from tepat.ports.store import DeviceFailure

ROTATED_REASON = "replaced"  # why a binding lost its device id or token to a newer one


class UsersMixin(SqliteBase):
    """Users and their device bindings."""

    # ----------------------------------------------------------------- users

    async def upsert_user(self, user: User) -> User:
        sql = (
            f"INSERT INTO users ({_USER_COLUMNS}) VALUES ({_placeholders(9)}) "
            "ON CONFLICT(user_id) DO UPDATE SET timezone = excluded.timezone, "
            "locale = excluded.locale, quiet_start = excluded.quiet_start, "
            "quiet_end = excluded.quiet_end, enabled = excluded.enabled, "
            # Never down: a re-plan may have taken a newer version since the caller read.
            "plan_version = max(plan_version, excluded.plan_version), "
            "updated_at = excluded.updated_at "
            f"RETURNING {_USER_COLUMNS}"
        )
        params = _user_params(user, self._now())
        row = await self._write(lambda c: c.execute(sql, params).fetchone())
        return _user(row)

    async def get_user(self, user_id: str) -> User | None:
        rows = await self._select(
            f"SELECT {_USER_COLUMNS} FROM users WHERE user_id = ?", (user_id,)
        )
        return _user(rows[0]) if rows else None

    async def get_users(self, user_ids: Sequence[str]) -> dict[str, User]:
        rows = await self._select_in(
            f"SELECT {_USER_COLUMNS} FROM users WHERE user_id IN ({{ids}})", user_ids
        )
        return {u.user_id: u for u in map(_user, rows)}

    async def iter_users(self, batch_size: int = 1000) -> AsyncIterator[list[User]]:
        sql = f"SELECT {_USER_COLUMNS} FROM users WHERE user_id > ? ORDER BY user_id LIMIT ?"
        after = ""
        while True:
            rows = await self._select(sql, (after, batch_size))
            if not rows:
                return
            yield [_user(r) for r in rows]
            after = rows[-1][0]

    # ----------------------------------------------------------------- devices

    async def register_device(self, device: Device) -> Device:
        now = self._now()
        created = _ts_opt(device.created_at) or now
        updated = _ts_opt(device.updated_at) or now
        d = device
        # A device id is scoped to its user (the primary key), so only the token can
        # be held elsewhere: a token that moves is the same phone after a new login,
        # and its old binding ends.
        rotate = (
            "UPDATE devices SET active = 0, deactivated_reason = ?, updated_at = ? "
            "WHERE active = 1 AND push_token = ? AND NOT (user_id = ? AND device_id = ?)"
        )
        upsert = (
            f"INSERT INTO devices ({_DEVICE_COLUMNS}) VALUES (?, ?, ?, ?, 1, 0, NULL, ?, ?) "
            "ON CONFLICT(user_id, device_id) DO UPDATE SET push_token = excluded.push_token, "
            "platform = excluded.platform, active = 1, consecutive_failures = 0, "
            "deactivated_reason = NULL, updated_at = excluded.updated_at "
            f"RETURNING {_DEVICE_COLUMNS}"
        )

        def run(conn: Conn) -> Row:
            # Release the token first: the partial unique index is checked per statement.
            conn.execute(rotate, (ROTATED_REASON, updated, d.push_token, d.user_id, d.device_id))
            params = (d.user_id, d.device_id, d.push_token, d.platform, created, updated)
            row: Row = conn.execute(upsert, params).fetchone()
            return row

        return _device(await self._write(run))

    async def deactivate_device(self, user_id: str, device_id: str, reason: str) -> bool:
        sql = (
            "UPDATE devices SET active = 0, deactivated_reason = ?, updated_at = ? "
            "WHERE user_id = ? AND device_id = ? AND active = 1"
        )
        params = (reason, self._now(), user_id, device_id)
        return await self._write(lambda c: c.execute(sql, params).rowcount) > 0

    async def deactivate_token(self, push_token: str, reason: str) -> int:
        sql = (
            "UPDATE devices SET active = 0, deactivated_reason = ?, updated_at = ? "
            "WHERE push_token = ? AND active = 1"
        )
        params = (reason, self._now(), push_token)
        return await self._write(lambda c: c.execute(sql, params).rowcount)

    async def list_devices(self, user_id: str) -> list[Device]:
        rows = await self._select(
            f"SELECT {_DEVICE_COLUMNS} FROM devices WHERE user_id = ? ORDER BY device_id",
            (user_id,),
        )
        return [_device(r) for r in rows]

    async def active_devices(self, user_ids: Sequence[str]) -> dict[str, list[Device]]:
        rows = await self._select_in(
            f"SELECT {_DEVICE_COLUMNS} FROM devices WHERE active = 1 AND user_id IN ({{ids}}) "
            "ORDER BY user_id, device_id",
            user_ids,
        )
        found: dict[str, list[Device]] = {}
        for device in map(_device, rows):
            found.setdefault(device.user_id, []).append(device)
        return found

    async def record_device_outcome(
        self, push_token: str, ok: bool, max_failures: int, reason: str
    ) -> DeviceFailure:
        now = self._now()
        if ok:
            # Only touch the row when there is a streak to reset: success is the hot path.
            sql = (
                "UPDATE devices SET consecutive_failures = 0, updated_at = ? "
                "WHERE push_token = ? AND active = 1 AND consecutive_failures <> 0"
            )
            await self._write(lambda c: c.execute(sql, (now, push_token)).rowcount)
            return DeviceFailure(deactivated=False, consecutive_failures=0)
        # Right-hand sides see the row before the update, so each CASE tests the new count.
        sql = (
            "UPDATE devices SET consecutive_failures = consecutive_failures + 1, "
            "active = CASE WHEN consecutive_failures + 1 >= ? THEN 0 ELSE 1 END, "
            "deactivated_reason = CASE WHEN consecutive_failures + 1 >= ? THEN ? ELSE NULL END, "
            "updated_at = ? WHERE push_token = ? AND active = 1 "
            "RETURNING consecutive_failures, active"
        )
        params = (max_failures, max_failures, reason, now, push_token)
        row = await self._write(lambda c: c.execute(sql, params).fetchone())
        if row is None:
            return DeviceFailure(deactivated=False, consecutive_failures=0)
        return DeviceFailure(deactivated=not row[1], consecutive_failures=row[0])
