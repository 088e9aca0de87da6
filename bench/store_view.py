"""Read-only looks at the SQLite file while (and after) the processes under test write it.

Plain ``sqlite3`` on a read-only connection, so the bench never takes the write lock.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path


@contextmanager
def _read(db_path: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30)
    try:
        yield conn
    finally:
        conn.close()


def status_counts(db_path: Path) -> dict[str, int]:
    with _read(db_path) as conn:
        rows = conn.execute("SELECT status, count(*) FROM messages GROUP BY status").fetchall()
    return {str(s): int(n) for s, n in rows}


def unfinished(db_path: Path) -> int:
    with _read(db_path) as conn:
        row = conn.execute(
            "SELECT count(*) FROM messages WHERE status IN ('pending', 'sending')"
        ).fetchone()
    return int(row[0])


def sent_times(db_path: Path) -> dict[str, datetime]:
    """When each message became ``sent`` (its ``updated_at``, stamped by the consumer)."""
    with _read(db_path) as conn:
        rows = conn.execute(
            "SELECT id, updated_at FROM messages WHERE status IN ('sent', 'delivered')"
        ).fetchall()
    return {str(i): datetime.fromisoformat(u) for i, u in rows}


def tickets_per_message(db_path: Path) -> dict[str, int]:
    with _read(db_path) as conn:
        rows = conn.execute(
            "SELECT message_id, count(*) FROM tickets GROUP BY message_id"
        ).fetchall()
    return {str(m): int(n) for m, n in rows}


def message_count(db_path: Path) -> int:
    with _read(db_path) as conn:
        return int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])


def unpublished_count(db_path: Path) -> int:
    """Pending messages still carrying the outbox mark (not yet on the broker)."""
    with _read(db_path) as conn:
        sql = "SELECT count(*) FROM messages WHERE publish_pending = 1 AND status = 'pending'"
        return int(conn.execute(sql).fetchone()[0])


def duplicate_intents(db_path: Path) -> int:
    """(user, reminder, local date) planned more than once among non-cancelled messages.

    Grouped on the columns themselves, not on ``live_key``, so the check does not lean on
    the unique index it is checking.
    """
    with _read(db_path) as conn:
        row = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM messages "
            "WHERE reminder_id IS NOT NULL AND status != 'cancelled' "
            "GROUP BY user_id, reminder_id, local_date HAVING count(*) > 1)"
        ).fetchone()
    return int(row[0])
