"""Many users' records in one write transaction (the bulk import).

Each method applies the same statement as its single-record sibling (``users.py``,
``reminders.py``), only all of them under one ``BEGIN IMMEDIATE``: one lock, one
commit, one trip to the worker thread for a whole request (``write_records``: for the
users, devices and reminders of a request together).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tepat.adapters.sqlite.codecs import (
    _message_params,
    _reminder_params,
    _ts,
    _user_params,
)
from tepat.adapters.sqlite.connection import SqliteBase, _in_chunks, _insert_many
from tepat.adapters.sqlite.messages_write import INSERT_MESSAGES, INSERT_ROWS_PER_TRANSACTION
from tepat.adapters.sqlite.reminders import UPSERT_REMINDER
from tepat.adapters.sqlite.schema import Conn
from tepat.adapters.sqlite.users import (
    _PLAN_COLUMNS,
    ROTATE_TOKEN,
    UPSERT_DEVICE,
    UPSERT_USER,
    _plan_target,
    device_params,
)
from tepat.domain.models import Device, Reminder, User
from tepat.ports.repositories.bulk_import import NewUsersPlan, RecordsWritten
from tepat.ports.repositories.users import PlanTarget


class BulkMixin(SqliteBase):
    async def write_records(
        self,
        users: Sequence[User],
        devices: Sequence[Device],
        reminders: Sequence[Reminder],
        plan: Callable[[], NewUsersPlan] | None = None,
    ) -> RecordsWritten:
        if not (users or devices or reminders):
            return RecordsWritten([])
        now = self._now()
        ids = [u.user_id for u in users]
        user_rows = [_user_params(u, now) for u in users]
        device_rows = [device_params(d, now) for d in devices]
        reminder_rows = [_reminder_params(r, now) for r in reminders]
        # Planned and encoded here, on the caller's thread: the transaction only
        # filters and writes.
        planned = plan() if plan is not None else None
        if planned is not None and len(planned.messages) > INSERT_ROWS_PER_TRANSACTION:
            # Past what one write transaction should hold the lock for: the caller
            # plans after the write, inserting in slices.
            planned = None
        messages = planned.messages if planned is not None else ()
        message_rows = [(m.user_id, _message_params(m, now)) for m in messages]
        mark_rows = [
            (_ts(m.plan_from), _ts(m.plan_next_at), m.fingerprint, m.user_id)
            for m in (planned.marks if planned is not None else ())
        ]

        # One transaction for the three: the write lock is taken (and, with several
        # processes on one file, waited for) once per import instead of three times.
        def run(conn: Conn) -> RecordsWritten:
            # Inside the write transaction, so no other writer creates one in between:
            # "created" is exact even when imports of the same users race.
            existing = {row[0] for row in _in_chunks(conn, _USERS_IN, ids)}
            created: list[bool] = []
            for user_id in ids:
                created.append(user_id not in existing)
                existing.add(user_id)  # the same id twice: only the first creates it
            if user_rows:
                _insert_many(conn, UPSERT_USER, user_rows)
            # One device after the other, as register_device would: a token named twice
            # ends with the later device, and the partial unique index on active tokens
            # holds after every statement.
            for rotation, upsert in device_rows:
                conn.execute(ROTATE_TOKEN, rotation)
                conn.execute(UPSERT_DEVICE, upsert)
            if reminder_rows:
                _insert_many(conn, UPSERT_REMINDER, reminder_rows)
            # Still inside the transaction: no other writer's change is in these.
            new = [uid for uid, c in zip(ids, created, strict=True) if c]
            if planned is not None:
                made = set(new)
                rows = [row for uid, row in message_rows if uid in made]
                if rows:
                    _insert_many(conn, INSERT_MESSAGES, rows)
                conn.executemany(_SET_MARK, [m for m in mark_rows if m[3] in made])
                return RecordsWritten(created, planned=True)
            sql = "SELECT user_id, plan_stamp FROM users WHERE user_id IN ({ids})"
            return RecordsWritten(created, dict(_in_chunks(conn, sql, new)))

        return await self._write(run)

    async def get_plan_targets(self, user_ids: Sequence[str]) -> dict[str, PlanTarget]:
        rows = await self._select_in(
            f"SELECT {_PLAN_COLUMNS} FROM users WHERE user_id IN ({{ids}})", user_ids
        )
        return {t.user.user_id: t for t in map(_plan_target, rows)}


_USERS_IN = "SELECT user_id FROM users WHERE user_id IN ({ids})"
# No stamp to compare: in the transaction that created the user, nothing changed it since.
_SET_MARK = "UPDATE users SET plan_from = ?, plan_next_at = ?, plan_fp = ? WHERE user_id = ?"
