"""Group commit on a real SQLite file: every caller learns the true fate of its write.

Writes queued while the store's worker is busy share one ``BEGIN IMMEDIATE``, each
in a savepoint. SQLite rolls the whole transaction back on some errors (SQLITE_FULL
here, forced with ``max_page_count``), savepoints included: the failing write must
report its own error, and the others (undone with it, or not yet run) must still be
committed exactly once or report an error; never reported committed when they are not.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tepat.adapters.sqlite.connection import WRITES_PER_GROUP, SqliteBase, TransactionLost
from tepat.adapters.sqlite.schema import Conn

BIG = b"x" * 200_000  # far more than the few pages the file may still grow by


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteBase]:
    s = SqliteBase(str(tmp_path / "group.db"))
    await s.open()

    def setup(conn: Conn) -> None:
        conn.execute("CREATE TABLE t (name TEXT NOT NULL UNIQUE, data BLOB)")
        conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        conn.execute(
            "CREATE TABLE child (parent_id INTEGER REFERENCES parent(id)"
            " DEFERRABLE INITIALLY DEFERRED)"
        )
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        # Room for small rows, never for BIG: that insert fails with SQLITE_FULL.
        conn.execute(f"PRAGMA max_page_count={pages + 8}")

    await s._on_writer(setup)
    yield s
    await s.close()


def insert(name: str, data: bytes = b"") -> Callable[[Conn], str]:
    def run(conn: Conn) -> str:
        conn.execute("INSERT INTO t (name, data) VALUES (?, ?)", (name, data))
        return name

    return run


async def grouped(store: SqliteBase, *writes: Callable[[Conn], Any]) -> list[Any]:
    """Run ``writes`` as one group: queued while the worker is held, then released."""
    gate = threading.Event()
    assert store._executor is not None
    held = store._executor.submit(gate.wait)
    tasks = [asyncio.ensure_future(store._write(w)) for w in writes]
    await asyncio.sleep(0)  # one turn of the loop: every task queues its write
    assert len(store._writes) == len(writes), "all queued behind the held worker"
    gate.set()
    held.result()
    return await asyncio.gather(*tasks, return_exceptions=True)


async def names(store: SqliteBase) -> list[str]:
    rows = await store._select("SELECT name FROM t ORDER BY name")
    return [r[0] for r in rows]


async def not_in_transaction(store: SqliteBase) -> bool:
    return await store._on_writer(lambda c: not c.in_transaction)


async def test_disk_full_fails_that_write_and_commits_the_others_once(
    store: SqliteBase,
) -> None:
    outcomes = await grouped(
        store, insert("a"), insert("b"), insert("big", BIG), insert("c"), insert("d")
    )
    assert outcomes[:2] == ["a", "b"]
    assert isinstance(outcomes[2], sqlite3.OperationalError)
    assert "full" in str(outcomes[2])  # its own error, not "no such savepoint"
    assert outcomes[3:] == ["c", "d"]
    assert await names(store) == ["a", "b", "c", "d"]
    assert await not_in_transaction(store)


async def test_a_write_that_failed_alone_before_the_loss_keeps_its_error(
    store: SqliteBase,
) -> None:
    await store._write(insert("taken"))
    outcomes = await grouped(store, insert("a"), insert("taken"), insert("big", BIG))
    assert outcomes[0] == "a"
    assert isinstance(outcomes[1], sqlite3.IntegrityError)
    assert isinstance(outcomes[2], sqlite3.OperationalError)
    assert await names(store) == ["a", "taken"]


async def test_a_write_that_swallows_the_loss_is_not_reported_committed(
    store: SqliteBase,
) -> None:
    def swallow(conn: Conn) -> str:
        # Goes on as if the transaction were still there.
        with contextlib.suppress(sqlite3.OperationalError):
            conn.execute("INSERT INTO t (name, data) VALUES ('big', ?)", (BIG,))
        return "swallowed"

    outcomes = await grouped(store, insert("a"), swallow, insert("b"))
    assert outcomes[0] == "a"
    assert isinstance(outcomes[1], TransactionLost)
    assert outcomes[2] == "b"
    assert await names(store) == ["a", "b"]
    assert await not_in_transaction(store)


async def test_a_failed_commit_fails_every_write_of_the_group(store: SqliteBase) -> None:
    def orphan(conn: Conn) -> str:
        conn.execute("INSERT INTO child (parent_id) VALUES (42)")  # checked at COMMIT
        return "orphan"

    # Outside any transaction (inside one the pragma is a no-op).
    await store._on_writer(lambda c: c.execute("PRAGMA foreign_keys=ON").fetchall())
    outcomes = await grouped(store, insert("a"), orphan, insert("b"))
    assert all(isinstance(o, sqlite3.IntegrityError) for o in outcomes), outcomes
    assert await names(store) == []
    assert await store._select("SELECT * FROM child") == []
    assert await not_in_transaction(store)
    assert await store._write(insert("after")) == "after"


async def test_a_raising_write_is_rolled_back_alone(store: SqliteBase) -> None:
    def half_then_raise(conn: Conn) -> None:
        conn.execute("INSERT INTO t (name) VALUES ('half')")
        raise ValueError("bad input")

    outcomes = await grouped(store, insert("a"), half_then_raise, insert("b"))
    assert outcomes[0] == "a"
    assert isinstance(outcomes[1], ValueError)
    assert outcomes[2] == "b"
    assert await names(store) == ["a", "b"]
    assert await not_in_transaction(store)


async def test_writes_past_the_cap_still_run_when_the_store_closes_meanwhile(
    tmp_path: Path,
) -> None:
    store = SqliteBase(str(tmp_path / "closing.db"))
    await store.open()
    await store._on_writer(lambda c: c.execute("CREATE TABLE t (name TEXT, data BLOB)").fetchall())
    gate = threading.Event()
    assert store._executor is not None
    store._executor.submit(gate.wait)
    count = WRITES_PER_GROUP + 8  # two groups: the second is submitted by the first
    tasks = [asyncio.ensure_future(store._write(insert(f"w{n:02d}"))) for n in range(count)]
    closing = asyncio.ensure_future(store.close())
    # close() stops the checkpointer first, then drops the executor; it offers no event.
    while store._executor is not None:  # noqa: ASYNC110
        await asyncio.sleep(0)
    assert len(store._writes) == count
    gate.set()
    # A guard, not a wait for time to pass: before the fix these never settled.
    outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
    await closing
    assert outcomes == [f"w{n:02d}" for n in range(count)]
    with contextlib.closing(sqlite3.connect(tmp_path / "closing.db")) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == count
