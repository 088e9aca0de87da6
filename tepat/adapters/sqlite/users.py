"""Users and their device bindings."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Sequence
from datetime import datetime
from operator import attrgetter

from tepat.adapters.sqlite.codecs import (
    _DEVICE_COLUMNS,
    _USER_COLUMNS,
    Row,
    _device,
    _dt,
    _placeholders,
    _ts,
    _ts_opt,
    _user,
    _user_params,
)
from tepat.adapters.sqlite.connection import SqliteBase
from tepat.adapters.sqlite.schema import Conn
from tepat.adapters.store_results import grouped, keyset_pages
from tepat.domain.errors import PushTokenInUse
from tepat.domain.models import Device, User
from tepat.ports.repositories.devices import REPLACED, DeviceFailure
from tepat.ports.repositories.users import PlanMark, PlanTarget

# A device id is scoped to its user (the primary key), so only the token can be
# held elsewhere: a token that moves is the same phone after a new login, and its
# old binding ends (ROTATE_TOKEN, run before UPSERT_DEVICE). Shared with the bulk
# import, which must bind tokens exactly as register_device does.
ROTATE_TOKEN = (
    "UPDATE devices SET active = 0, deactivated_reason = ?, updated_at = ? "
    "WHERE active = 1 AND push_token = ? AND NOT (user_id = ? AND device_id = ?)"
)
UPSERT_DEVICE = (
    f"INSERT INTO devices ({_DEVICE_COLUMNS}) VALUES (?, ?, ?, ?, 1, 0, NULL, ?, ?, ?, ?, ?) "
    "ON CONFLICT(user_id, device_id) DO UPDATE SET push_token = excluded.push_token, "
    "kind = excluded.kind, fallback_kind = excluded.fallback_kind, "
    "fallback_token = excluded.fallback_token, "
    "platform = excluded.platform, active = 1, consecutive_failures = 0, "
    "deactivated_reason = NULL, updated_at = excluded.updated_at"
)


# Shared with the bulk import ({values}: the VALUES rows), which writes users alike.
UPSERT_USER = (
    f"INSERT INTO users ({_USER_COLUMNS}) VALUES {{values}} "
    "ON CONFLICT(user_id) DO UPDATE SET timezone = excluded.timezone, "
    "locale = excluded.locale, quiet_start = excluded.quiet_start, "
    "quiet_end = excluded.quiet_end, enabled = excluded.enabled, "
    # Never down: a re-plan may have taken a newer version since the caller read.
    "plan_version = max(plan_version, excluded.plan_version), "
    "updated_at = excluded.updated_at"
)
_PLAN_COLUMNS = f"{_USER_COLUMNS}, plan_stamp, plan_from, plan_next_at, plan_fp"
_SELECT_USERS = f"SELECT {_USER_COLUMNS} FROM users"
_USER_EXISTS = "SELECT 1 FROM users WHERE user_id = ?"
_DEACTIVATE = "UPDATE devices SET active = 0, deactivated_reason = ?, updated_at = ?"
_DROP_FALLBACK = (
    "UPDATE devices SET fallback_kind = NULL, fallback_token = NULL, updated_at = ?"
    " WHERE fallback_token = ?"
)


def device_params(d: Device, now: str) -> tuple[Row, Row]:
    """The parameters of ``ROTATE_TOKEN`` and ``UPSERT_DEVICE`` binding ``d``."""
    created = _ts_opt(d.created_at) or now
    updated = _ts_opt(d.updated_at) or now
    rotation = (REPLACED, updated, d.push_token, d.user_id, d.device_id)
    binding = (d.user_id, d.device_id, d.push_token, d.platform, created, updated, d.kind)
    return rotation, (*binding, d.fallback_kind, d.fallback_token)


PLAN_TARGET = f"SELECT {_PLAN_COLUMNS} FROM users WHERE user_id = ?"
# Compare-and-set on the stamp: a mark made from reads older than a change never sticks.
SET_PLAN_MARK = (
    "UPDATE users SET plan_from = ?, plan_next_at = ?, plan_fp = ? "
    "WHERE user_id = ? AND plan_stamp = ?"
)


def mark_params(m: PlanMark) -> tuple[str, str, str, str, int]:
    return (_ts(m.plan_from), _ts(m.plan_next_at), m.fingerprint, m.user_id, m.stamp)


def _plan_target(row: Row) -> PlanTarget:
    user = _user(row[:9])
    stamp, plan_from, plan_next_at, fingerprint = row[9:]
    mark = None
    if plan_from is not None and plan_next_at is not None and fingerprint is not None:
        mark = PlanMark(user.user_id, stamp, _dt(plan_from), _dt(plan_next_at), fingerprint)
    return PlanTarget(user, stamp, mark)


class UsersMixin(SqliteBase):
    async def upsert_user(self, user: User) -> tuple[User, bool]:
        values = f"({_placeholders(9)})"
        sql = f"{UPSERT_USER.format(values=values)} RETURNING {_USER_COLUMNS}"
        params = _user_params(user, self._now())

        def run(conn: Conn) -> tuple[Row, bool]:
            # In the write transaction: no other write lands between the look and the upsert.
            existed = conn.execute(_USER_EXISTS, (user.user_id,)).fetchone() is not None
            return conn.execute(sql, params).fetchone(), not existed

        row, inserted = await self._write(run)
        return _user(row), inserted

    async def get_user(self, user_id: str) -> User | None:
        return await self._fetch_one(_user, f"{_SELECT_USERS} WHERE user_id = ?", (user_id,))

    async def get_users(self, user_ids: Sequence[str]) -> dict[str, User]:
        rows = await self._select_in(f"{_SELECT_USERS} WHERE user_id IN ({{ids}})", user_ids)
        return {u.user_id: u for u in map(_user, rows)}

    def iter_users(self, batch_size: int = 1000) -> AsyncIterator[list[User]]:
        sql = f"{_SELECT_USERS} WHERE user_id > ? ORDER BY user_id LIMIT ?"

        def page(after: str) -> Awaitable[list[User]]:
            return self._fetch(_user, sql, (after, batch_size))

        return keyset_pages(page, attrgetter("user_id"), "", batch_size)

    def users_to_plan(
        self,
        start: datetime,
        end: datetime,
        fingerprint: str,
        batch_size: int = 1000,
        after: str = "",
        until: str | None = None,
    ) -> AsyncIterator[list[PlanTarget]]:
        # One pass over the primary key, filtering in the engine: a run with nothing
        # new reads every row once and returns none (no index on the mark: it
        # would be rewritten at every run for every user).
        upper = "" if until is None else "AND user_id <= ? "
        sql = (
            f"SELECT {_PLAN_COLUMNS} FROM users WHERE user_id > ? {upper}"
            "AND (plan_next_at IS NULL OR plan_fp IS NOT ? OR plan_from > ? "
            "OR plan_next_at < ?) ORDER BY user_id LIMIT ?"
        )
        size = max(1, batch_size)
        upto: tuple[str, ...] = () if until is None else (until,)
        rest = (*upto, fingerprint, _ts(start), _ts(end), size)

        def page(after: str) -> Awaitable[list[PlanTarget]]:
            return self._fetch(_plan_target, sql, (after, *rest))

        return keyset_pages(page, attrgetter("user.user_id"), after, size)

    async def set_plan_marks(self, marks: Sequence[PlanMark]) -> int:
        if not marks:
            return 0
        params = [mark_params(m) for m in marks]
        return await self._write(lambda c: c.executemany(SET_PLAN_MARK, params).rowcount)

    async def user_id_bounds(self, parts: int) -> list[str]:
        if parts <= 1:
            return []
        total = (await self._select("SELECT count(*) FROM users"))[0][0]
        step = total // parts
        if step == 0:
            return []
        sql = "SELECT user_id FROM users ORDER BY user_id LIMIT 1 OFFSET ?"
        bounds: list[str] = []
        for i in range(1, parts):
            rows = await self._select(sql, (i * step - 1,))
            if rows and (not bounds or rows[0][0] > bounds[-1]):
                bounds.append(rows[0][0])
        return bounds

    async def register_device(
        self, device: Device, *, from_other_users: bool = True
    ) -> tuple[Device, bool]:
        d = device
        rotation, params = device_params(d, self._now())
        upsert = f"{UPSERT_DEVICE} RETURNING {_DEVICE_COLUMNS}"
        active = "SELECT 1 FROM devices WHERE user_id = ? AND device_id = ? AND active = 1"
        others = "SELECT 1 FROM devices WHERE active = 1 AND push_token = ? AND user_id <> ?"

        def run(conn: Conn) -> tuple[Row, bool]:
            # In the write transaction: no other registration can bind the token or
            # activate the device between these looks and the upsert.
            if not from_other_users and conn.execute(others, (d.push_token, d.user_id)).fetchone():
                raise PushTokenInUse()
            was_active = conn.execute(active, (d.user_id, d.device_id)).fetchone() is not None
            # Release the token first: the partial unique index is checked per statement.
            conn.execute(ROTATE_TOKEN, rotation)
            row: Row = conn.execute(upsert, params).fetchone()
            return row, not was_active

        row, activated = await self._write(run)
        return _device(row), activated

    async def deactivate_device(self, user_id: str, device_id: str, reason: str) -> bool:
        sql = f"{_DEACTIVATE} WHERE user_id = ? AND device_id = ? AND active = 1"
        return await self._execute(sql, (reason, self._now(), user_id, device_id)) > 0

    async def deactivate_token(self, push_token: str, reason: str) -> int:
        now = self._now()

        def run(conn: Conn) -> int:
            sql = f"{_DEACTIVATE} WHERE push_token = ? AND active = 1"
            dead = conn.execute(sql, (reason, now, push_token)).rowcount
            return dead + conn.execute(_DROP_FALLBACK, (now, push_token)).rowcount

        return await self._write(run)

    async def list_devices(self, user_id: str) -> list[Device]:
        sql = f"SELECT {_DEVICE_COLUMNS} FROM devices WHERE user_id = ? ORDER BY device_id"
        return await self._fetch(_device, sql, (user_id,))

    async def active_devices(self, user_ids: Sequence[str]) -> dict[str, list[Device]]:
        rows = await self._select_in(
            f"SELECT {_DEVICE_COLUMNS} FROM devices WHERE active = 1 AND user_id IN ({{ids}}) "
            "ORDER BY user_id, device_id",
            user_ids,
        )
        return grouped(map(_device, rows), attrgetter("user_id"))

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
            await self._execute(sql, (now, push_token))
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
