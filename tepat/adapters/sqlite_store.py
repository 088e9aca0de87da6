"""The Store on SQLite: the embedded default for a laptop or a small install.

Several processes may share one database file (two ``tepat plan`` runs, the API
and a consumer): WAL lets readers proceed beside the one writer, every
read-then-write runs in a ``BEGIN IMMEDIATE`` transaction, ``busy_timeout``
waits for another process's lock instead of failing, and the unique indexes
(not check-then-insert) decide what already exists.

Each store owns one connection, used only by one dedicated worker thread, so
the event loop never waits on the disk or on another process's lock.

Stdlib ``sqlite3`` rather than aiosqlite: one fewer dependency, and a single
writer thread is what we want anyway; aiosqlite would only wrap the same thing.

Encoding: instants are UTC text in one fixed width format
(``2027-03-14T07:30:00.000000Z``) so text order is time order; local dates are
``YYYY-MM-DD``, local times ``HH:MM`` (``HH:MM:SS[.ffffff]`` only when they carry
seconds), reminder days comma-separated, ``data`` JSON text. Timestamps a
caller leaves ``None`` are stamped from the store's clock.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import json
import sqlite3
import time as _time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, time
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, TypeVar

from tepat.clock import Clock, SystemClock
from tepat.domain.errors import DomainError
from tepat.domain.models import (
    Device,
    Message,
    MessageStatus,
    QuietHours,
    Reminder,
    Ticket,
    User,
)
from tepat.ports.store import (
    Counts,
    DeviceFailure,
    InsertResult,
    MessagePage,
    MessageQuery,
    StatusChange,
)

T = TypeVar("T")
Row = tuple[Any, ...]
Conn = sqlite3.Connection

BUSY_TIMEOUT_S = 30.0
# Bound on ids in one ``IN (...)``: far below SQLite's variable limit, and small
# enough that one statement never holds the write lock for long.
ID_CHUNK = 500
# Rows per multi-row INSERT (further capped by the connection's variable limit).
INSERT_ROWS_PER_STATEMENT = 500
# Messages per write transaction: big enough to amortise the commit, small
# enough that another process's writer waits a fraction of a second at most.
INSERT_ROWS_PER_TRANSACTION = 5000
CACHE_KIB = 64 * 1024
ROTATED_REASON = "replaced"  # why a binding lost its device id or token to a newer one

# --------------------------------------------------------------------------- schema

# Numbered migrations, applied in order, each exactly once, recorded in
# ``schema_migrations``. Never edit a released one: append a new number.
MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (
        1,
        (
            """CREATE TABLE meta (
                key TEXT PRIMARY KEY,
                value TEXT NOT NULL
            )""",
            """CREATE TABLE users (
                user_id TEXT PRIMARY KEY,
                timezone TEXT NOT NULL,
                locale TEXT NOT NULL,
                quiet_start TEXT,
                quiet_end TEXT,
                enabled INTEGER NOT NULL,
                plan_version INTEGER NOT NULL,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL
            )""",
            """CREATE TABLE devices (
                user_id TEXT NOT NULL,
                device_id TEXT NOT NULL,
                push_token TEXT NOT NULL,
                platform TEXT,
                active INTEGER NOT NULL,
                consecutive_failures INTEGER NOT NULL DEFAULT 0,
                deactivated_reason TEXT,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                PRIMARY KEY (user_id, device_id)
            )""",
            "CREATE UNIQUE INDEX ux_devices_active_device ON devices(device_id) WHERE active = 1",
            "CREATE UNIQUE INDEX ux_devices_active_token ON devices(push_token) WHERE active = 1",
            """CREATE TABLE reminders (
                user_id TEXT NOT NULL,
                reminder_id TEXT NOT NULL,
                category TEXT NOT NULL,
                local_time TEXT NOT NULL,
                title TEXT NOT NULL,
                body TEXT NOT NULL,
                label TEXT NOT NULL,
                days TEXT NOT NULL,
                data TEXT NOT NULL,
                enabled INTEGER NOT NULL,
                version INTEGER NOT NULL,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                PRIMARY KEY (user_id, reminder_id)
            )""",
            """CREATE TABLE preferences (
                user_id TEXT NOT NULL,
                category TEXT NOT NULL,
                enabled INTEGER NOT NULL,
                updated_at TEXT NOT NULL,
                PRIMARY KEY (user_id, category)
            )""",
            """CREATE TABLE messages (
                id TEXT PRIMARY KEY,
                user_id TEXT NOT NULL,
                category TEXT NOT NULL,
                label TEXT NOT NULL,
                title TEXT NOT NULL,
                body TEXT NOT NULL,
                scheduled_at TEXT NOT NULL,
                timezone TEXT NOT NULL,
                dedup_key TEXT NOT NULL,
                live_key TEXT,
                device_id TEXT,
                reminder_id TEXT,
                idempotency_key TEXT,
                request_hash TEXT,
                local_date TEXT,
                local_time TEXT,
                data TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('pending', 'sending', 'sent',
                    'delivered', 'failed', 'skipped', 'missed', 'cancelled')),
                status_reason TEXT,
                attempts INTEGER NOT NULL,
                ticket_id TEXT,
                last_error TEXT,
                plan_version INTEGER NOT NULL,
                claimed_at TEXT,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL
            )""",
            "CREATE UNIQUE INDEX ux_messages_dedup ON messages(dedup_key)",
            """CREATE UNIQUE INDEX ux_messages_live ON messages(live_key)
                WHERE live_key IS NOT NULL""",
            # '*' stands for "all the user's devices" (device_id NULL), which a
            # plain unique index would treat as distinct from every other NULL.
            """CREATE UNIQUE INDEX ux_messages_pending_slot ON messages(
                user_id, coalesce(device_id, '*'), category, label, scheduled_at
            ) WHERE status = 'pending'""",
            "CREATE INDEX ix_messages_user_time ON messages(user_id, scheduled_at, id)",
            """CREATE INDEX ix_messages_pending_due ON messages(scheduled_at, id)
                WHERE status = 'pending'""",
            """CREATE INDEX ix_messages_sending_claimed ON messages(claimed_at, id)
                WHERE status = 'sending'""",
            """CREATE INDEX ix_messages_failed_updated ON messages(updated_at, id)
                WHERE status = 'failed'""",
            # Category first: led by status, the planner would prefer it over the
            # partial indexes above for "status = 'pending'" and sort in memory.
            "CREATE INDEX ix_messages_category_status ON messages(category, status)",
            """CREATE TABLE tickets (
                ticket_id TEXT PRIMARY KEY,
                message_id TEXT NOT NULL,
                user_id TEXT NOT NULL,
                device_id TEXT NOT NULL,
                push_token TEXT NOT NULL,
                sent_at TEXT NOT NULL,
                receipt_status TEXT,
                receipt_error TEXT,
                checked_at TEXT
            )""",
            "CREATE INDEX ix_tickets_message ON tickets(message_id)",
            """CREATE INDEX ix_tickets_awaiting ON tickets(sent_at, ticket_id)
                WHERE receipt_status IS NULL""",
        ),
    ),
)


def _migrate(conn: Conn, now: str) -> None:
    """Apply the missing migrations; a second process opening at once waits, then finds none."""
    conn.execute(
        """CREATE TABLE IF NOT EXISTS schema_migrations (
            version INTEGER PRIMARY KEY,
            applied_at TEXT NOT NULL
        )"""
    )
    current = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0]
    for version, statements in MIGRATIONS:
        if version <= current:
            continue
        for statement in statements:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, now))


def _enable_wal(conn: Conn) -> None:
    """Switch to WAL (persistent in the file); retried because the switch needs a
    brief exclusive lock that a concurrent opener may hold, and it does not
    always go through the busy handler."""
    deadline = _time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or _time.monotonic() > deadline:
                raise
            _time.sleep(0.05)  # worker thread, not the event loop


def _connect(path: str) -> Conn:
    if path != ":memory:" and not path.startswith("file:"):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    # isolation_level=None: we issue BEGIN IMMEDIATE / COMMIT ourselves.
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    _enable_wal(conn)
    # NORMAL in WAL mode: a power cut may lose the last commits, never corrupt.
    conn.execute("PRAGMA synchronous=NORMAL")
    # Bulk plans insert into seven message indexes in hash order; the default
    # 2 MB page cache makes that disk-bound long before 300k rows.
    conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
    return conn


def _immediate(fn: Callable[[Conn], T], conn: Conn) -> T:
    """Run ``fn`` in a write transaction taken up front, so a read-then-write
    never finds its snapshot stale when it comes to write."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


# --------------------------------------------------------------------------- encoding


# Cached: a plan repeats the same few instants (one per zone and local time,
# and one "now") across hundreds of thousands of messages. Equal aware
# datetimes are the same instant, so they rightly share one text.
@lru_cache(maxsize=16384)
def _ts(value: datetime) -> str:
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: the store keeps UTC instants only")
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _ts_opt(value: datetime | None) -> str | None:
    return None if value is None else _ts(value)


def _dt(text: str) -> datetime:
    return datetime.fromisoformat(text)  # the trailing Z reads back as UTC


def _dt_opt(text: str | None) -> datetime | None:
    return None if text is None else _dt(text)


def _local_time(value: time) -> str:
    if value.second or value.microsecond:
        return value.isoformat()
    return value.isoformat(timespec="minutes")


def _local_time_opt(value: time | None) -> str | None:
    return None if value is None else _local_time(value)


def _json(value: Mapping[str, Any]) -> str:
    if not value:
        return "{}"  # most messages carry no data; skip the encoder
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _placeholders(n: int) -> str:
    return ",".join("?" * n)


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


# --------------------------------------------------------------------------- users

_USER_COLUMNS = (
    "user_id, timezone, locale, quiet_start, quiet_end, enabled, plan_version, "
    "created_at, updated_at"
)


def _user_params(user: User, now: str) -> Row:
    quiet = user.quiet_hours
    return (
        user.user_id,
        user.timezone,
        user.locale,
        None if quiet is None else _local_time(quiet.start),
        None if quiet is None else _local_time(quiet.end),
        int(user.enabled),
        user.plan_version,
        _ts_opt(user.created_at) or now,
        _ts_opt(user.updated_at) or now,
    )


def _user(row: Row) -> User:
    user_id, tz, locale, q_start, q_end, enabled, plan_version, created, updated = row
    quiet = None
    if q_start is not None and q_end is not None:
        quiet = QuietHours(time.fromisoformat(q_start), time.fromisoformat(q_end))
    return User(
        user_id=user_id,
        timezone=tz,
        locale=locale,
        quiet_hours=quiet,
        enabled=bool(enabled),
        plan_version=plan_version,
        created_at=_dt(created),
        updated_at=_dt(updated),
    )


# --------------------------------------------------------------------------- devices

_DEVICE_COLUMNS = (
    "user_id, device_id, push_token, platform, active, consecutive_failures, "
    "deactivated_reason, created_at, updated_at"
)


def _device(row: Row) -> Device:
    user_id, device_id, token, platform, active, failures, reason, created, updated = row
    return Device(
        user_id=user_id,
        device_id=device_id,
        push_token=token,
        platform=platform,
        active=bool(active),
        consecutive_failures=failures,
        deactivated_reason=reason,
        created_at=_dt(created),
        updated_at=_dt(updated),
    )


# --------------------------------------------------------------------------- reminders

_REMINDER_COLUMNS = (
    "user_id, reminder_id, category, local_time, title, body, label, days, data, "
    "enabled, version, created_at, updated_at"
)


def _reminder_params(r: Reminder, now: str) -> Row:
    return (
        r.user_id,
        r.reminder_id,
        r.category,
        _local_time(r.local_time),
        r.title,
        r.body,
        r.label,
        ",".join(r.days),
        _json(r.data),
        int(r.enabled),
        r.version,
        _ts_opt(r.created_at) or now,
        _ts_opt(r.updated_at) or now,
    )


def _reminder(row: Row) -> Reminder:
    (user_id, reminder_id, category, local_time, title, body, label, days, data) = row[:9]
    enabled, version, created, updated = row[9:]
    return Reminder(
        user_id=user_id,
        reminder_id=reminder_id,
        category=category,
        local_time=time.fromisoformat(local_time),
        title=title,
        body=body,
        label=label,
        days=tuple(days.split(",")) if days else (),
        data=json.loads(data),
        enabled=bool(enabled),
        version=version,
        created_at=_dt(created),
        updated_at=_dt(updated),
    )


# --------------------------------------------------------------------------- messages

_MESSAGE_FIELDS = (
    "id",
    "user_id",
    "category",
    "label",
    "title",
    "body",
    "scheduled_at",
    "timezone",
    "dedup_key",
    "live_key",
    "device_id",
    "reminder_id",
    "idempotency_key",
    "request_hash",
    "local_date",
    "local_time",
    "data",
    "status",
    "status_reason",
    "attempts",
    "ticket_id",
    "last_error",
    "plan_version",
    "claimed_at",
    "created_at",
    "updated_at",
)
_MESSAGE_COLUMNS = ", ".join(_MESSAGE_FIELDS)


def _message_params(m: Message, now: str) -> Row:
    return (
        m.id,
        m.user_id,
        m.category,
        m.label,
        m.title,
        m.body,
        _ts(m.scheduled_at),
        m.timezone,
        m.dedup_key,
        m.live_key,
        m.device_id,
        m.reminder_id,
        m.idempotency_key,
        m.request_hash,
        None if m.local_date is None else m.local_date.isoformat(),
        _local_time_opt(m.local_time),
        _json(m.data),
        m.status.value,
        m.status_reason,
        m.attempts,
        m.ticket_id,
        m.last_error,
        m.plan_version,
        _ts_opt(m.claimed_at),
        _ts_opt(m.created_at) or now,
        _ts_opt(m.updated_at) or now,
    )


def _message(row: Row) -> Message:
    (mid, user_id, category, label, title, body, scheduled_at, tz, dedup_key, live_key) = row[:10]
    (device_id, reminder_id, idem_key, req_hash, local_date, local_time, data) = row[10:17]
    (status, reason, attempts, ticket_id, last_error, plan_version) = row[17:23]
    claimed_at, created_at, updated_at = row[23:]
    return Message(
        id=mid,
        user_id=user_id,
        category=category,
        label=label,
        title=title,
        body=body,
        scheduled_at=_dt(scheduled_at),
        timezone=tz,
        dedup_key=dedup_key,
        live_key=live_key,
        device_id=device_id,
        reminder_id=reminder_id,
        idempotency_key=idem_key,
        request_hash=req_hash,
        local_date=None if local_date is None else date.fromisoformat(local_date),
        local_time=None if local_time is None else time.fromisoformat(local_time),
        data=json.loads(data),
        status=MessageStatus(status),
        status_reason=reason,
        attempts=attempts,
        ticket_id=ticket_id,
        last_error=last_error,
        plan_version=plan_version,
        claimed_at=_dt_opt(claimed_at),
        created_at=_dt(created_at),
        updated_at=_dt(updated_at),
    )


def _with_stamps(m: Message, now: datetime) -> Message:
    """The message as stored: timestamps the caller left out filled from the clock."""
    if m.created_at is not None and m.updated_at is not None:
        return m
    return dataclasses.replace(m, created_at=m.created_at or now, updated_at=m.updated_at or now)


@lru_cache(maxsize=8)
def _insert_messages_sql(rows: int) -> str:
    one = f"({_placeholders(len(_MESSAGE_FIELDS))})"
    values = ",".join([one] * rows)
    # No conflict target: DO NOTHING then covers every unique index, the
    # partial ones included, which is exactly "already exists".
    return (
        f"INSERT INTO messages ({_MESSAGE_COLUMNS}) VALUES {values} "
        "ON CONFLICT DO NOTHING RETURNING id"
    )


def _encode_cursor(scheduled_at: str, message_id: str) -> str:
    return base64.urlsafe_b64encode(f"{scheduled_at}|{message_id}".encode()).decode()


def _decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        scheduled_at, message_id = base64.urlsafe_b64decode(cursor.encode()).decode().split("|", 1)
        _dt(scheduled_at)
    except (binascii.Error, UnicodeError, ValueError):
        raise DomainError("cursor", "not a cursor this service returned") from None
    return scheduled_at, message_id


# --------------------------------------------------------------------------- tickets

_TICKET_COLUMNS = (
    "ticket_id, message_id, user_id, device_id, push_token, sent_at, receipt_status, "
    "receipt_error, checked_at"
)


def _ticket_params(t: Ticket) -> Row:
    return (
        t.ticket_id,
        t.message_id,
        t.user_id,
        t.device_id,
        t.push_token,
        _ts(t.sent_at),
        t.receipt_status,
        t.receipt_error,
        _ts_opt(t.checked_at),
    )


def _ticket(row: Row) -> Ticket:
    ticket_id, message_id, user_id, device_id, token, sent_at, status, error, checked = row
    return Ticket(
        ticket_id=ticket_id,
        message_id=message_id,
        user_id=user_id,
        device_id=device_id,
        push_token=token,
        sent_at=_dt(sent_at),
        receipt_status=status,
        receipt_error=error,
        checked_at=_dt_opt(checked),
    )


# --------------------------------------------------------------------------- the store


class SqliteStore:
    """The :class:`tepat.ports.store.Store` on one SQLite file."""

    def __init__(self, path: str, clock: Clock | None = None) -> None:
        self._path = path
        self._clock: Clock = clock or SystemClock()
        self._executor: ThreadPoolExecutor | None = None
        self._conn: Conn | None = None  # touched only by the worker thread
        self._rows_per_insert = INSERT_ROWS_PER_STATEMENT

    # ----------------------------------------------------------------- plumbing

    async def _run(self, fn: Callable[[Conn], T]) -> T:
        if self._executor is None:
            raise RuntimeError("SqliteStore used before open() or after close()")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._in_worker, fn)

    def _in_worker(self, fn: Callable[[Conn], T]) -> T:
        assert self._conn is not None, "open() connects before any other call"
        result = fn(self._conn)
        # A cursor must not leave this thread: freed on the event loop's thread it
        # resets a cached statement the worker may be reusing ("bad parameter or
        # other API misuse"). Fetch rows or counts here instead.
        assert not isinstance(result, sqlite3.Cursor), "return rows or a count, not a cursor"
        return result

    async def _write(self, fn: Callable[[Conn], T]) -> T:
        return await self._run(partial(_immediate, fn))

    def _now(self) -> str:
        return _ts(self._clock.now())

    async def _select(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return await self._run(lambda c: c.execute(sql, params).fetchall())

    async def _select_in(
        self, sql: str, ids: Sequence[str], params: Sequence[Any] = ()
    ) -> list[Row]:
        """``sql`` has one ``{ids}`` placeholder list, filled a chunk at a time."""
        keys = _unique(ids)

        def run(conn: Conn) -> list[Row]:
            rows: list[Row] = []
            for chunk in _chunks(keys, ID_CHUNK):
                query = sql.format(ids=_placeholders(len(chunk)))
                rows.extend(conn.execute(query, (*chunk, *params)).fetchall())
            return rows

        return await self._run(run)

    # ----------------------------------------------------------------- lifecycle

    async def open(self) -> None:
        if self._executor is not None:
            return
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tepat-sqlite")
        now = self._now()

        def setup(_: Conn | None) -> None:
            self._conn = _connect(self._path)
            limit = self._conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
            self._rows_per_insert = min(INSERT_ROWS_PER_STATEMENT, limit // len(_MESSAGE_FIELDS))
            _immediate(partial(_migrate, now=now), self._conn)

        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, setup, None)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return

        def shutdown() -> None:
            if self._conn is not None:
                # Optional housekeeping: skip it when another process holds the lock.
                with contextlib.suppress(sqlite3.OperationalError):
                    self._conn.execute("PRAGMA optimize")
                self._conn.close()
                self._conn = None

        try:
            await asyncio.get_running_loop().run_in_executor(executor, shutdown)
        finally:
            executor.shutdown(wait=False)

    async def ping(self) -> None:
        await self._select("SELECT 1")

    async def get_meta(self, key: str) -> str | None:
        rows = await self._select("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    async def set_meta(self, key: str, value: str) -> None:
        sql = "INSERT INTO meta VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value"
        await self._write(lambda c: c.execute(sql, (key, value)).rowcount)

    # ----------------------------------------------------------------- users

    async def upsert_user(self, user: User) -> User:
        sql = (
            f"INSERT INTO users ({_USER_COLUMNS}) VALUES ({_placeholders(9)}) "
            "ON CONFLICT(user_id) DO UPDATE SET timezone = excluded.timezone, "
            "locale = excluded.locale, quiet_start = excluded.quiet_start, "
            "quiet_end = excluded.quiet_end, enabled = excluded.enabled, "
            "plan_version = excluded.plan_version, updated_at = excluded.updated_at "
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
        # Two statements rather than one OR, so each uses its partial unique index.
        rotate = [
            "UPDATE devices SET active = 0, deactivated_reason = ?, updated_at = ? "
            f"WHERE active = 1 AND {column} = ? AND NOT (user_id = ? AND device_id = ?)"
            for column in ("device_id", "push_token")
        ]
        upsert = (
            f"INSERT INTO devices ({_DEVICE_COLUMNS}) VALUES (?, ?, ?, ?, 1, 0, NULL, ?, ?) "
            "ON CONFLICT(user_id, device_id) DO UPDATE SET push_token = excluded.push_token, "
            "platform = excluded.platform, active = 1, consecutive_failures = 0, "
            "deactivated_reason = NULL, updated_at = excluded.updated_at "
            f"RETURNING {_DEVICE_COLUMNS}"
        )

        def run(conn: Conn) -> Row:
            # Release the device id and token first: the partial unique
            # indexes are checked per statement.
            for sql, value in zip(rotate, (d.device_id, d.push_token), strict=True):
                conn.execute(sql, (ROTATED_REASON, updated, value, d.user_id, d.device_id))
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

    # ----------------------------------------------------------------- reminders

    async def upsert_reminder(self, reminder: Reminder) -> Reminder:
        sql = (
            f"INSERT INTO reminders ({_REMINDER_COLUMNS}) VALUES ({_placeholders(13)}) "
            "ON CONFLICT(user_id, reminder_id) DO UPDATE SET category = excluded.category, "
            "local_time = excluded.local_time, title = excluded.title, body = excluded.body, "
            "label = excluded.label, days = excluded.days, data = excluded.data, "
            "enabled = excluded.enabled, version = excluded.version, "
            f"updated_at = excluded.updated_at RETURNING {_REMINDER_COLUMNS}"
        )
        params = _reminder_params(reminder, self._now())
        row = await self._write(lambda c: c.execute(sql, params).fetchone())
        return _reminder(row)

    async def get_reminder(self, user_id: str, reminder_id: str) -> Reminder | None:
        rows = await self._select(
            f"SELECT {_REMINDER_COLUMNS} FROM reminders WHERE user_id = ? AND reminder_id = ?",
            (user_id, reminder_id),
        )
        return _reminder(rows[0]) if rows else None

    async def delete_reminder(self, user_id: str, reminder_id: str) -> bool:
        sql = "DELETE FROM reminders WHERE user_id = ? AND reminder_id = ?"
        return await self._write(lambda c: c.execute(sql, (user_id, reminder_id)).rowcount) > 0

    async def list_reminders(self, user_id: str) -> list[Reminder]:
        rows = await self._select(
            f"SELECT {_REMINDER_COLUMNS} FROM reminders WHERE user_id = ? ORDER BY reminder_id",
            (user_id,),
        )
        return [_reminder(r) for r in rows]

    async def reminders_for_users(self, user_ids: Sequence[str]) -> dict[str, list[Reminder]]:
        rows = await self._select_in(
            f"SELECT {_REMINDER_COLUMNS} FROM reminders WHERE user_id IN ({{ids}}) "
            "ORDER BY user_id, reminder_id",
            user_ids,
        )
        found: dict[str, list[Reminder]] = {}
        for reminder in map(_reminder, rows):
            found.setdefault(reminder.user_id, []).append(reminder)
        return found

    # ----------------------------------------------------------------- preferences

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
        rows = await self._select(
            "SELECT category, enabled FROM preferences WHERE user_id = ?", (user_id,)
        )
        return {cat: bool(on) for cat, on in rows}

    async def preferences_for_users(self, user_ids: Sequence[str]) -> dict[str, dict[str, bool]]:
        rows = await self._select_in(
            "SELECT user_id, category, enabled FROM preferences WHERE user_id IN ({ids})",
            user_ids,
        )
        found: dict[str, dict[str, bool]] = {}
        for user_id, cat, on in rows:
            found.setdefault(user_id, {})[cat] = bool(on)
        return found

    # ----------------------------------------------------------------- messages

    async def insert_messages(self, messages: Sequence[Message]) -> InsertResult:
        now = self._clock.now()
        now_text = _ts(now)
        created: list[Message] = []
        # One transaction per slice, not per call: a 300k plan must not hold
        # the write lock for seconds while another process waits. A crash
        # between slices is harmless, since inserting again is idempotent.
        # Slice k+1 is encoded here while the worker writes slice k: sqlite3
        # releases the GIL while it works, so the two overlap on two cores.
        writing: asyncio.Future[list[Message]] | None = None
        try:
            for batch in _chunks(messages, INSERT_ROWS_PER_TRANSACTION):
                rows = [_message_params(m, now_text) for m in batch]
                if writing is not None:
                    created.extend(await writing)
                writing = asyncio.ensure_future(self._insert_batch(batch, rows, now))
            if writing is not None:
                created.extend(await writing)
        finally:
            if writing is not None and not writing.done():
                # Encoding failed mid-way: let the slice in flight finish
                # (its rows are committed either way) before reporting.
                await asyncio.wait([writing])
        return InsertResult(created=created, existing=len(messages) - len(created))

    async def _insert_batch(
        self, batch: Sequence[Message], rows: Sequence[Row], now: datetime
    ) -> list[Message]:
        inserted = await self._write(partial(self._insert_rows, rows))
        return [_with_stamps(m, now) for m in _pick_inserted(batch, inserted)]

    def _insert_rows(self, rows: Sequence[Row], conn: Conn) -> set[str]:
        inserted: set[str] = set()
        for chunk in _chunks(rows, self._rows_per_insert):
            flat = [value for row in chunk for value in row]
            cursor = conn.execute(_insert_messages_sql(len(chunk)), flat)
            inserted.update(r[0] for r in cursor.fetchall())
        return inserted

    async def get_message(self, message_id: str) -> Message | None:
        rows = await self._select(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE id = ?", (message_id,)
        )
        return _message(rows[0]) if rows else None

    async def get_messages(self, message_ids: Sequence[str]) -> list[Message]:
        rows = await self._select_in(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE id IN ({{ids}})", message_ids
        )
        by_id = {m.id: m for m in map(_message, rows)}
        return [by_id[i] for i in _unique(message_ids) if i in by_id]

    async def find_by_live_key(self, live_key: str) -> Message | None:
        rows = await self._select(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE live_key = ?", (live_key,)
        )
        return _message(rows[0]) if rows else None

    async def claim(self, message_ids: Sequence[str], now: datetime) -> list[Message]:
        ids = _unique(message_ids)
        stamp = _ts(now)

        def run(conn: Conn) -> list[Row]:
            rows: list[Row] = []
            for chunk in _chunks(ids, ID_CHUNK):
                sql = (
                    "UPDATE messages SET status = 'sending', claimed_at = ?, "
                    "attempts = attempts + 1, updated_at = ? "
                    f"WHERE id IN ({_placeholders(len(chunk))}) AND status = 'pending' "
                    f"RETURNING {_MESSAGE_COLUMNS}"
                )
                rows.extend(conn.execute(sql, (stamp, stamp, *chunk)).fetchall())
            return rows

        by_id = {m.id: m for m in map(_message, await self._write(run))}
        return [by_id[i] for i in ids if i in by_id]

    async def transition(
        self,
        message_id: str,
        to: MessageStatus,
        now: datetime,
        *,
        expect: Sequence[MessageStatus],
        reason: str | None = None,
        ticket_id: str | None = None,
        last_error: str | None = None,
        scheduled_at: datetime | None = None,
        release_live_key: bool = False,
    ) -> bool:
        if not expect:
            return False
        sql, params = _transition_statement(
            StatusChange(
                message_id, to, reason, ticket_id, last_error, scheduled_at, release_live_key
            ),
            now,
            expect,
        )
        return await self._write(lambda c: _apply_transition(c, sql, params)) > 0

    async def transition_many(
        self, changes: Sequence[StatusChange], now: datetime, *, expect: Sequence[MessageStatus]
    ) -> int:
        if not expect or not changes:
            return 0
        statements = [_transition_statement(ch, now, expect) for ch in changes]
        return await self._write(
            lambda c: sum(_apply_transition(c, sql, params) for sql, params in statements)
        )

    async def cancel_pending(
        self,
        user_id: str,
        after: datetime,
        now: datetime,
        reason: str,
        reminder_id: str | None = None,
    ) -> int:
        stamp = _ts(now)
        # One-off messages name an absolute instant a re-plan does not change.
        sql = (
            "UPDATE messages SET status = 'cancelled', status_reason = ?, live_key = NULL, "
            "updated_at = ? WHERE user_id = ? AND status = 'pending' AND scheduled_at >= ? "
            "AND reminder_id IS NOT NULL"
        )
        params: list[Any] = [reason, stamp, user_id, _ts(after)]
        if reminder_id is not None:
            sql += " AND reminder_id = ?"
            params.append(reminder_id)
        return await self._write(lambda c: c.execute(sql, params).rowcount)

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
            where.append("(scheduled_at, id) < (?, ?)")
            params.extend(_decode_cursor(query.cursor))
        sql = (
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE {' AND '.join(where)} "
            "ORDER BY scheduled_at DESC, id DESC LIMIT ?"
        )
        rows = await self._select(sql, (*params, query.limit + 1))
        page = rows[: query.limit]
        next_cursor = None
        if len(rows) > query.limit:
            last = page[-1]
            next_cursor = _encode_cursor(last[_MESSAGE_FIELDS.index("scheduled_at")], last[0])
        return MessagePage(items=[_message(r) for r in page], next_cursor=next_cursor)

    async def due_pending(self, before: datetime, limit: int) -> list[Message]:
        rows = await self._select(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages "
            "WHERE status = 'pending' AND scheduled_at < ? ORDER BY scheduled_at, id LIMIT ?",
            (_ts(before), limit),
        )
        return [_message(r) for r in rows]

    async def iter_pending(self, batch_size: int = 1000) -> AsyncIterator[list[Message]]:
        sql = (
            f"SELECT {_MESSAGE_COLUMNS} FROM messages "
            "WHERE status = 'pending' AND (scheduled_at, id) > (?, ?) "
            "ORDER BY scheduled_at, id LIMIT ?"
        )
        after = ("", "")
        while True:
            rows = await self._select(sql, (*after, batch_size))
            if not rows:
                return
            yield [_message(r) for r in rows]
            last = rows[-1]
            after = (last[_MESSAGE_FIELDS.index("scheduled_at")], last[0])

    async def stuck_sending(self, claimed_before: datetime, limit: int) -> list[Message]:
        rows = await self._select(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages "
            "WHERE status = 'sending' AND claimed_at < ? ORDER BY claimed_at, id LIMIT ?",
            (_ts(claimed_before), limit),
        )
        return [_message(r) for r in rows]

    async def count_messages(self) -> Counts:
        rows = await self._select(
            "SELECT status, category, count(*) FROM messages GROUP BY status, category"
        )
        return Counts(by_status_category={(s, c): n for s, c, n in rows})

    async def dead_letters(self, limit: int, before_id: str | None = None) -> list[Message]:
        where = "status = 'failed'"
        params: list[Any] = []
        if before_id is not None:
            # Keyset on (updated_at, id) of the last message of the previous page.
            where += " AND (updated_at, id) < (SELECT updated_at, id FROM messages WHERE id = ?)"
            params.append(before_id)
        rows = await self._select(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE {where} "
            "ORDER BY updated_at DESC, id DESC LIMIT ?",
            (*params, limit),
        )
        return [_message(r) for r in rows]

    # ----------------------------------------------------------------- tickets

    async def add_tickets(self, tickets: Sequence[Ticket]) -> None:
        sql = (
            f"INSERT INTO tickets ({_TICKET_COLUMNS}) VALUES ({_placeholders(9)}) "
            "ON CONFLICT(ticket_id) DO NOTHING"
        )
        params = [_ticket_params(t) for t in tickets]
        if params:
            await self._write(lambda c: c.executemany(sql, params).rowcount)

    async def tickets_awaiting_receipt(self, sent_before: datetime, limit: int) -> list[Ticket]:
        rows = await self._select(
            f"SELECT {_TICKET_COLUMNS} FROM tickets WHERE receipt_status IS NULL "
            "AND sent_at < ? ORDER BY sent_at, ticket_id LIMIT ?",
            (_ts(sent_before), limit),
        )
        return [_ticket(r) for r in rows]

    async def record_receipt(
        self, ticket_id: str, status: str, error: str | None, now: datetime
    ) -> bool:
        sql = (
            "UPDATE tickets SET receipt_status = ?, receipt_error = ?, checked_at = ? "
            "WHERE ticket_id = ? AND receipt_status IS NULL"
        )
        params = (status, error, _ts(now), ticket_id)
        return await self._write(lambda c: c.execute(sql, params).rowcount) > 0

    async def tickets_for_message(self, message_id: str) -> list[Ticket]:
        rows = await self._select(
            f"SELECT {_TICKET_COLUMNS} FROM tickets WHERE message_id = ? "
            "ORDER BY sent_at, ticket_id",
            (message_id,),
        )
        return [_ticket(r) for r in rows]


def _pick_inserted(batch: Sequence[Message], inserted: set[str]) -> Iterator[Message]:
    """The messages of ``batch`` whose rows were inserted, in input order.

    RETURNING order is unspecified, so match by id; a repeated id counts once.
    """
    remaining = set(inserted)
    for m in batch:
        if m.id in remaining:
            remaining.discard(m.id)
            yield m


def _transition_statement(
    change: StatusChange, now: datetime, expect: Sequence[MessageStatus]
) -> tuple[str, tuple[Any, ...]]:
    sets = ["status = ?", "updated_at = ?"]
    params: list[Any] = [change.to.value, _ts(now)]
    # Optional fields are only written when given, so a later transition does not
    # erase what an earlier one recorded.
    for column, value in (
        ("status_reason", change.reason),
        ("ticket_id", change.ticket_id),
        ("last_error", change.last_error),
        ("scheduled_at", _ts_opt(change.scheduled_at)),
    ):
        if value is not None:
            sets.append(f"{column} = ?")
            params.append(value)
    if change.release_live_key:
        sets.append("live_key = NULL")
    expected = [s.value for s in expect]
    sql = (
        f"UPDATE messages SET {', '.join(sets)} "
        f"WHERE id = ? AND status IN ({_placeholders(len(expected))})"
    )
    return sql, (*params, change.message_id, *expected)


def _apply_transition(conn: Conn, sql: str, params: tuple[Any, ...]) -> int:
    try:
        return int(conn.execute(sql, params).rowcount)
    except sqlite3.IntegrityError:
        # Back to pending onto a (user, device, category, label, instant) slot another
        # pending message already holds: the update did not happen, and that sibling
        # carries the same notification.
        return 0
