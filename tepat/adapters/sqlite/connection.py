"""The one connection and its worker thread: how every query reaches SQLite.

Several processes may share one database file (two ``tepat plan`` runs, the API
and a consumer): WAL lets readers proceed beside the one writer, every
read-then-write runs in a ``BEGIN IMMEDIATE`` transaction, ``busy_timeout``
waits for another process's lock instead of failing, and the unique indexes
(not check-then-insert) decide what already exists.

Each store owns one connection, used only by one dedicated worker thread, so
the event loop never waits on the disk or on another process's lock.

Writes queued while the worker is busy are committed together (group commit):
one ``BEGIN IMMEDIATE`` ... ``COMMIT`` for up to ``WRITES_PER_GROUP`` of them,
each in a savepoint, so the claim of the next batch does not wait behind one
commit per earlier outcome, and pages they share are written to the WAL once.
Some errors (SQLITE_FULL, SQLITE_IOERR, ...) make SQLite roll back the whole
transaction, savepoints included: then that write fails and the others run again,
each in a transaction of its own (see ``_commit_group``).

Checkpoints (copying the WAL back into the database file, with an fsync) run on
a second connection and thread of their own, once a second, instead of inside
whichever commit crosses SQLite's 1,000-page mark: a consumer's commits then
never stall behind one (a checkpoint took up to half a second here under load).
``wal_autocheckpoint`` is off on the working connection only.

Stdlib ``sqlite3`` rather than aiosqlite: one fewer dependency, and a single
writer thread is what we want anyway; aiosqlite would only wrap the same thing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from tepat.adapters.sqlite.codecs import Row, _chunks, _placeholders, _ts
from tepat.adapters.sqlite.schema import Conn, _connect, _migrate, on_disk
from tepat.clock import Clock, SystemClock
from tepat.domain.batches import MAX_BATCH

T = TypeVar("T")

# Bound on ids in one ``IN (...)``: far below SQLite's variable limit, and small
# enough that one statement never holds the write lock for long.
ID_CHUNK = 500
# Rows per multi-row INSERT (further capped by the connection's variable limit).
INSERT_ROWS_PER_STATEMENT = 500
# Writes committed together at most (a group holds the write lock for their sum).
WRITES_PER_GROUP = 32
# The reader connection's page cache: lookups by key, the OS caches the file behind it.
READER_CACHE_KIB = 16 * 1024
# How often the checkpoint thread copies the WAL back (real seconds).
CHECKPOINT_INTERVAL_S = 1.0
# WAL frames (pages, 4 KiB) past which a checkpoint makes the WAL start over (64 MiB),
# and how long it may wait for the writer to let it.
WAL_RESTART_FRAMES = 16384
RESTART_WAIT_MS = 5000


def _immediate(fn: Callable[[Conn], T], conn: Conn) -> T:
    """Run ``fn`` in a write transaction taken up front, so a read-then-write
    never finds its snapshot stale when it comes to write."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(conn)
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise
    return result


class SqliteBase:
    """A writer connection on one worker thread (every write, group-committed), a reader
    connection on another (every read, for a file), and the helpers every query runs through."""

    def __init__(self, path: str, clock: Clock | None = None) -> None:
        self._path = path
        self._clock: Clock = clock or SystemClock()
        self._executor: ThreadPoolExecutor | None = None
        self._conn: Conn | None = None  # touched only by the worker thread
        # Reads on a connection and thread of their own (a file in WAL mode: readers
        # never wait for the writer): a consumer's read-ahead for its next batches no
        # longer queues behind the claims of this second, nor a claim behind reads.
        self._reader: ThreadPoolExecutor | None = None
        self._reader_conn: Conn | None = None  # touched only by the reader thread
        self._checkpointer: asyncio.Task[None] | None = None
        # Writes waiting for the worker (see _write); appended on the event loop's
        # thread, taken on the worker's.
        self._writes: list[_Write] = []
        self._writes_lock = threading.Lock()

    def _worker(self) -> ThreadPoolExecutor:
        if self._executor is None:
            raise RuntimeError("SqliteStore used before open() or after close()")
        return self._executor

    async def _run(self, fn: Callable[[Conn], T]) -> T:
        """Run the read ``fn`` (it must not write): on the reader when there is one."""
        if self._reader is None:
            return await self._on_writer(fn)
        read = partial(_fetched, fn, lambda: self._reader_conn)
        return await asyncio.get_running_loop().run_in_executor(self._reader, read)

    async def _on_writer(self, fn: Callable[[Conn], T]) -> T:
        """Run ``fn`` on the writer's connection and thread, outside any transaction
        (connection settings; what a test must do where the writes happen)."""
        run = partial(_fetched, fn, lambda: self._conn)
        return await asyncio.get_running_loop().run_in_executor(self._worker(), run)

    async def _write(self, fn: Callable[[Conn], T]) -> T:
        """Run ``fn`` in a write transaction: the writes queued while the worker was busy
        share one (group commit), each in a savepoint of its own, so one that raises
        is rolled back alone and the others commit."""
        worker, loop = self._worker(), asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        with self._writes_lock:
            self._writes.append((fn, fut))
            first = len(self._writes) == 1
        if first:
            worker.submit(self._write_group, loop)
        result: T = await fut
        return result

    def _write_group(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the worker: every write queued so far, in one ``BEGIN IMMEDIATE``."""
        with self._writes_lock:
            group, self._writes = self._writes[:WRITES_PER_GROUP], self._writes[WRITES_PER_GROUP:]
            if self._writes and not self._submit_next(loop):
                # Closed meanwhile: no next group would run, so the rest join this one
                # (the connection closes after it, on this same thread).
                group, self._writes = group + self._writes, []
        outcomes: list[_Outcome] = []
        try:
            outcomes = _commit_group(self._conn, group)
        except BaseException as e:
            # Whatever went wrong, no caller is left waiting for ever.
            outcomes = [(fut, None, e) for _, fut in group]
            raise
        finally:
            for fut, result, error in outcomes:
                loop.call_soon_threadsafe(_settle, fut, result, error)

    def _submit_next(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Past the cap: the rest go in the next group, right behind this one."""
        executor = self._executor
        if executor is None:
            return False
        try:
            executor.submit(self._write_group, loop)
        except RuntimeError:  # shut down by close() since
            return False
        return True

    def _now(self) -> str:
        return _ts(self._clock.now())

    async def _select(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return await self._run(lambda c: c.execute(sql, params).fetchall())

    async def _fetch(
        self, decode: Callable[[Row], T], sql: str, params: Sequence[Any] = ()
    ) -> list[T]:
        return [decode(row) for row in await self._select(sql, params)]

    async def _fetch_one(
        self, decode: Callable[[Row], T], sql: str, params: Sequence[Any] = ()
    ) -> T | None:
        rows = await self._select(sql, params)
        return decode(rows[0]) if rows else None

    async def _execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """One write statement in a transaction of its own; how many rows it changed."""
        return await self._write(lambda c: c.execute(sql, params).rowcount)

    async def _insert_new(self, table: str, columns: str, values: Sequence[Any]) -> bool:
        """:func:`_insert_new` in a transaction of its own."""
        return await self._write(lambda c: _insert_new(c, table, columns, values))

    async def _select_in(
        self, sql: str, ids: Sequence[str], params: Sequence[Any] = ()
    ) -> list[Row]:
        """``sql`` has one ``{ids}`` placeholder list, filled a chunk at a time."""
        return await self._run(lambda conn: _in_chunks(conn, sql, ids, params))

    async def open(self) -> None:
        if self._executor is not None:
            return
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tepat-sqlite")
        now = self._now()

        def setup() -> None:
            if on_disk(self._path):
                _make_private(self._path)
            self._conn = _connect(self._path)
            _immediate(partial(_migrate, now=now), self._conn)
            if on_disk(self._path):
                self._conn.execute("PRAGMA wal_autocheckpoint=0")

        def connect_reader() -> None:
            self._reader_conn = _connect(self._path, cache_kib=READER_CACHE_KIB)

        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, setup)
            if on_disk(self._path):
                reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tepat-sqlite-read")
                self._reader = reader
                await loop.run_in_executor(reader, connect_reader)
        except BaseException:
            await self.close()
            raise
        if on_disk(self._path):
            self._checkpointer = asyncio.create_task(_checkpoint_loop(self._path))

    async def close(self) -> None:
        checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            checkpointer.cancel()
            await asyncio.gather(checkpointer, return_exceptions=True)

        def close_reader() -> None:
            if self._reader_conn is not None:
                self._reader_conn.close()
                self._reader_conn = None

        def close_writer() -> None:
            if self._conn is not None:
                # Optional housekeeping: skip it when another process holds the lock.
                with contextlib.suppress(sqlite3.OperationalError):
                    self._conn.execute("PRAGMA optimize")
                self._conn.close()
                self._conn = None

        reader, self._reader = self._reader, None
        if reader is not None:
            await _last_call(reader, close_reader)
        executor, self._executor = self._executor, None
        if executor is not None:
            await _last_call(executor, close_writer)


async def _last_call(executor: ThreadPoolExecutor, fn: Callable[[], None]) -> None:
    """``fn`` on ``executor``'s thread, then the executor shut down, whatever ``fn`` did."""
    try:
        await asyncio.get_running_loop().run_in_executor(executor, fn)
    finally:
        executor.shutdown(wait=False)


def _fetched(fn: Callable[[Conn], T], connection: Callable[[], Conn | None]) -> T:
    """``fn`` on the ``connection()`` of the thread this runs on (read there: close() may
    have ended it since the call was queued)."""
    conn = connection()
    assert conn is not None, "open() connects before any other call"
    result = fn(conn)
    # A cursor must not leave its thread: freed on the event loop's thread it resets a
    # cached statement the thread may be reusing ("bad parameter or other API misuse").
    # Fetch rows or counts there instead.
    assert not isinstance(result, sqlite3.Cursor), "return rows or a count, not a cursor"
    return result


def _in_chunks(
    conn: Conn, sql: str, ids: Sequence[Any], params: Sequence[Any] = (), before: Sequence[Any] = ()
) -> list[Row]:
    """``sql`` (one ``{ids}`` placeholder list, bound between ``before`` and ``params``) for
    each chunk of ``ids`` (each once): the rows of all of them."""
    rows: list[Row] = []
    for chunk in _chunks(list(dict.fromkeys(ids)), ID_CHUNK):
        # Padded with its last id (IN tests a set): see _statement_size.
        padded = [*chunk, *[chunk[-1]] * (_statement_size(len(chunk), ID_CHUNK) - len(chunk))]
        query = sql.format(ids=_placeholders(len(padded)))
        rows.extend(conn.execute(query, (*before, *padded, *params)).fetchall())
    return rows


def _statement_size(n: int, most: int) -> int:
    """How many items a statement for ``n`` of them lists (at most ``most``): a power of
    two, or a full broker batch, so a query has a few texts, not one per batch size, and
    they stay in sqlite3's statement cache (128 per connection): preparing a claim, its
    triggers compiled in, costs about as much as claiming a dozen messages."""
    if MAX_BATCH >= n > MAX_BATCH // 2:
        return min(most, MAX_BATCH)  # a full batch, the common case: not padded
    return min(most, 1 << (n - 1).bit_length())


def _insert_new(conn: Conn, table: str, columns: str, values: Sequence[Any]) -> bool:
    """Insert one row of ``columns`` unless a unique key already holds one (no conflict
    target: every unique key counts); whether it did."""
    sql = f"INSERT INTO {table} ({columns}) VALUES ({_placeholders(len(values))})"
    return conn.execute(f"{sql} ON CONFLICT DO NOTHING", values).rowcount == 1


def _insert_many(conn: Conn, sql: str, rows: Sequence[Row], filler: Row | None = None) -> list[Row]:
    """``sql`` (an INSERT whose ``{values}`` stands for its VALUES rows) for ``rows``, a
    few hundred rows per statement: the same as one statement per row in order (a key
    twice in one statement meets its own earlier row, as a later statement would), with
    one trip into SQLite per statement instead of per row. Each trip releases and takes
    back the GIL, which the event loop's thread holds most of the time under load.
    ``filler``, a row that does nothing, pads each statement (see _statement_size).
    Returns the rows its RETURNING clause gives, if it has one."""
    width = len(rows[0])
    limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    most = max(1, min(INSERT_ROWS_PER_STATEMENT, limit // width))
    one = f"({_placeholders(width)})"
    returned: list[Row] = []
    for chunk in _chunks(rows, most):
        if filler is not None:
            chunk = [*chunk, *[filler] * (_statement_size(len(chunk), most) - len(chunk))]
        query = sql.format(values=",".join([one] * len(chunk)))
        returned.extend(conn.execute(query, [v for row in chunk for v in row]).fetchall())
    return returned


def _make_private(path: str) -> None:
    """The store file readable by its owner only (0600): it holds contacts, tokens and
    webhook secrets. Created so before SQLite opens it (SQLite gives the -wal and -shm
    files the database file's mode), and an older file made with the umask's 0644 is
    narrowed, with its -wal and -shm."""
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    for name in (path, f"{path}-wal", f"{path}-shm"):
        with contextlib.suppress(FileNotFoundError):
            if os.stat(name).st_mode & 0o077:
                os.chmod(name, 0o600)


def checkpoint_once(conn: Conn, restart_frames: int = WAL_RESTART_FRAMES) -> None:
    """One checkpoint pass: PASSIVE, and RESTART once the WAL holds ``restart_frames``.

    Under a steady stream of writes a PASSIVE pass never catches up with the last
    frame, and SQLite starts the WAL over only after a pass that did: the file
    grew without bound (28 GB while planning a million users). RESTART waits for
    the writer in progress, copies every frame and holds the next writer back
    until the WAL can start over; the wait is bounded by ``RESTART_WAIT_MS``.
    """
    _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    if frames < restart_frames:
        return
    conn.execute(f"PRAGMA busy_timeout={RESTART_WAIT_MS}")
    try:
        conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
    finally:
        conn.execute("PRAGMA busy_timeout=0")


async def _checkpoint_loop(path: str) -> None:
    """Copy the WAL back into the database file every second, off the working thread.

    PASSIVE: never waits for readers or the writer, copies what it can; what it
    cannot is copied by a later pass. A failure (another process checkpointing,
    a busy file) is skipped until the next pass.
    """
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tepat-sqlite-ckpt")
    loop = asyncio.get_running_loop()
    conn: list[Conn] = []

    def checkpoint() -> None:
        if not conn:
            # No busy wait: a pass that finds the file locked is simply skipped.
            conn.append(sqlite3.connect(path, timeout=0, isolation_level=None))
        with contextlib.suppress(sqlite3.Error):
            checkpoint_once(conn[0])

    def close() -> None:
        for c in conn:
            c.close()

    try:
        while True:
            # Real time: housekeeping of a file, not an instant of the domain.
            await asyncio.sleep(CHECKPOINT_INTERVAL_S)
            await loop.run_in_executor(executor, checkpoint)
    finally:
        # The pass in flight ends on its own (PASSIVE never waits).
        executor.submit(close)
        executor.shutdown(wait=False)


_Write = tuple[Callable[[Conn], Any], "asyncio.Future[Any]"]
_Outcome = tuple["asyncio.Future[Any]", Any, BaseException | None]


class TransactionLost(sqlite3.OperationalError):
    """A write went on after SQLite had rolled its transaction back (it caught the error)."""


def _commit_group(conn: Conn | None, group: list[_Write]) -> list[_Outcome]:
    """Run ``group`` in one transaction, each write in a savepoint; the outcome of each.

    A write that raises is rolled back to its savepoint alone, unless SQLite has
    already rolled the whole transaction back (SQLITE_FULL, SQLITE_IOERR, SQLITE_BUSY,
    SQLITE_NOMEM: https://www.sqlite.org/lang_transaction.html): then the savepoint is
    gone with the writes before it, so that write fails and every other one of the
    group runs again alone, in a transaction of its own, and reports its own outcome.
    A failure outside the writes (BEGIN, SAVEPOINT, RELEASE, COMMIT) fails them all:
    none of them is known committed.
    """
    if conn is None:  # closed while this group waited (close() ran first)
        error = RuntimeError("SqliteStore closed before the write ran")
        return [(fut, None, error) for _, fut in group]
    outcomes: list[_Outcome] = []
    try:
        conn.execute("BEGIN IMMEDIATE")
        for i, (fn, fut) in enumerate(group):
            conn.execute("SAVEPOINT one_write")
            try:
                result = _call(fn, conn)
            except Exception as e:
                if not conn.in_transaction:
                    # Those that failed before keep their error (rolled back then);
                    # those that succeeded are undone now: they and the rest run again.
                    failed = [o for o in outcomes if o[2] is not None]
                    undone = {id(o[0]) for o in outcomes if o[2] is None}
                    again = [w for w in group[:i] if id(w[1]) in undone] + group[i + 1 :]
                    outcomes = [*failed, (fut, None, e)]
                    break
                conn.execute("ROLLBACK TO one_write")
                conn.execute("RELEASE one_write")
                outcomes.append((fut, None, e))
            else:
                conn.execute("RELEASE one_write")
                outcomes.append((fut, result, None))
        else:
            conn.execute("COMMIT")
            return outcomes
    except BaseException as e:
        _rollback(conn)
        return [(fut, None, e) for _, fut in group]
    return [*outcomes, *_each_alone(conn, again)]


def _each_alone(conn: Conn, writes: list[_Write]) -> list[_Outcome]:
    outcomes: list[_Outcome] = []
    for fn, fut in writes:
        try:
            outcomes.append((fut, _immediate(partial(_call, fn), conn), None))
        except BaseException as e:  # this write's own outcome; the others still run
            outcomes.append((fut, None, e))
    return outcomes


def _call(fn: Callable[[Conn], T], conn: Conn) -> T:
    """``fn`` inside the transaction it was given, and still inside it when it returns."""
    result = fn(conn)
    assert not isinstance(result, sqlite3.Cursor), "return rows, not a cursor"
    if not conn.in_transaction:
        # fn swallowed an error that ended the transaction: what it did before is
        # undone, what it did after ran in autocommit. Never report that committed.
        raise TransactionLost("the write's transaction was rolled back by SQLite")
    return result


def _rollback(conn: Conn) -> None:
    if conn.in_transaction:
        # A failed ROLLBACK must not hide the error that led here, nor keep callers waiting.
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _settle(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.done():  # the caller was cancelled; its write is committed (or not) all the same
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)
