"""Many users' records in one write transaction (the bulk import).

Each method applies the same statement as its single-record sibling (``users.py``,
``reminders.py``), only all of them under one ``BEGIN IMMEDIATE``: one lock, one
commit, one trip to the worker thread for a whole request (``write_records``: for the
users, devices and reminders of a request together).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tepat.adapters.sqlite.codecs import (
    _reminder_params,
    _ts_opt,
    _user_params,
)
from tepat.adapters.sqlite.connection import SqliteBase, _in_chunks, _insert_many
from tepat.adapters.sqlite.reminders import UPSERT_REMINDER
from tepat.adapters.sqlite.schema import Conn
from tepat.adapters.sqlite.users import (
    _PLAN_COLUMNS,
    ROTATE_TOKEN,
    ROTATED_REASON,
    UPSERT_DEVICE,
    UPSERT_USER,
    _plan_target,
)
from tepat.domain.models import Device, Reminder, User
from tepat.ports.repositories.bulk_import import RecordsWritten
from tepat.ports.repositories.users import PlanTarget


class BulkMixin(SqliteBase):
    """:class:`tepat.ports.store.BulkImportRepository` on SQLite."""

    async def write_records(
        self, users: Sequence[User], devices: Sequence[Device], reminders: Sequence[Reminder]
    ) -> RecordsWritten:
        if not (users or devices or reminders):
            return RecordsWritten([])
        now = self._now()
        write_users = _upsert_users(users, now) if users else None
        write_devices = _register_devices(devices, now) if devices else None
        write_reminders = _upsert_reminders(reminders, now) if reminders else None
        ids = [u.user_id for u in users]

        # One transaction for the three: the write lock is taken (and, with several
        # processes on one file, waited for) once per import instead of three times.
        def run(conn: Conn) -> RecordsWritten:
            created = write_users(conn) if write_users else []
            if write_devices:
                write_devices(conn)
            if write_reminders:
                write_reminders(conn)
            # Still inside the transaction: no other writer's change is in these.
            new = [uid for uid, c in zip(ids, created, strict=True) if c]
            sql = "SELECT user_id, plan_stamp FROM users WHERE user_id IN ({ids})"
            return RecordsWritten(created, dict(_in_chunks(conn, sql, new)))

        return await self._write(run)

    async def get_plan_targets(self, user_ids: Sequence[str]) -> dict[str, PlanTarget]:
        rows = await self._select_in(
            f"SELECT {_PLAN_COLUMNS} FROM users WHERE user_id IN ({{ids}})", user_ids
        )
        return {t.user.user_id: t for t in map(_plan_target, rows)}


def _upsert_users(users: Sequence[User], now: str) -> Callable[[Conn], list[bool]]:
    rows = [_user_params(u, now) for u in users]
    ids = [u.user_id for u in users]

    def run(conn: Conn) -> list[bool]:
        # Inside the write transaction, so no other writer creates one in between:
        # "created" is exact even when imports of the same users race.
        sql = "SELECT user_id FROM users WHERE user_id IN ({ids})"
        existing = {row[0] for row in _in_chunks(conn, sql, ids)}
        created: list[bool] = []
        for user_id in ids:
            created.append(user_id not in existing)
            existing.add(user_id)  # the same id twice: only the first creates it
        _insert_many(conn, UPSERT_USER, rows)
        return created

    return run


def _register_devices(devices: Sequence[Device], now: str) -> Callable[[Conn], None]:
    rotations = []
    upserts = []
    for d in devices:
        created = _ts_opt(d.created_at) or now
        updated = _ts_opt(d.updated_at) or now
        rotations.append((ROTATED_REASON, updated, d.push_token, d.user_id, d.device_id))
        upserts.append((d.user_id, d.device_id, d.push_token, d.platform, created, updated))

    def run(conn: Conn) -> None:
        # One device after the other, as register_device would: a token named twice
        # ends with the later device, and the partial unique index on active tokens
        # holds after every statement.
        for rotation, upsert in zip(rotations, upserts, strict=True):
            conn.execute(ROTATE_TOKEN, rotation)
            conn.execute(UPSERT_DEVICE, upsert)

    return run


def _upsert_reminders(reminders: Sequence[Reminder], now: str) -> Callable[[Conn], None]:
    rows = [_reminder_params(r, now) for r in reminders]

    def run(conn: Conn) -> None:
        _insert_many(conn, UPSERT_REMINDER, rows)

    return run
