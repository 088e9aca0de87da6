"""The checkpoint pass keeps the WAL bounded under a steady stream of writes."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from tepat.adapters.sqlite.connection import checkpoint_once


def _wal_db(path: Path, rows: int) -> sqlite3.Connection:
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")  # as the store: checkpoints are ours
    writer.execute("CREATE TABLE t (x BLOB)")
    writer.execute("BEGIN")
    writer.executemany("INSERT INTO t VALUES (randomblob(3000))", [()] * rows)
    writer.execute("COMMIT")
    return writer


def test_a_large_wal_is_restarted_and_the_next_write_starts_it_over(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with contextlib.closing(_wal_db(db, 400)) as writer:
        checkpointer = sqlite3.connect(db, timeout=0, isolation_level=None)
        statements: list[str] = []
        checkpointer.set_trace_callback(statements.append)
        checkpoint_once(checkpointer, restart_frames=100)
        assert any("RESTART" in s for s in statements), statements
        writer.execute("INSERT INTO t VALUES (1)")
        _, frames, _ = checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert 0 < frames < 10  # the WAL started over at its beginning
        checkpointer.close()


def test_a_small_wal_gets_only_a_passive_pass(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with contextlib.closing(_wal_db(db, 5)) as _:
        checkpointer = sqlite3.connect(db, timeout=0, isolation_level=None)
        statements: list[str] = []
        checkpointer.set_trace_callback(statements.append)
        checkpoint_once(checkpointer, restart_frames=100)
        assert statements == ["PRAGMA wal_checkpoint(PASSIVE)"]
        checkpointer.close()
